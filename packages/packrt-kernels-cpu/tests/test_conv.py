"""conv2d agrees with torch for any geometry on every road, takes the road meant for each input, and
names the argument that is wrong. (The Winograd road's own cases: test_winograd.py.)"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conv_cases import ConvCase, conv_cases, pairs
from hypothesis import HealthCheck, given, settings

from packrt_kernels_cpu import compiled
from packrt_kernels_cpu.conv import Conv2dGeometry, columns, conv2d, conv2d_geometry, im2col, road, roads
from packrt_kernels_cpu.errors import KernelShapeError

DTYPES = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16]


# every comparison with torch on both kernel paths, both GEMM roads, banded and shared out over threads
pytestmark = pytest.mark.usefixtures("kernel_path", "blas_road", "conv_layout")


def resolve(w: np.ndarray, **geometry: Any) -> Conv2dGeometry:
    """The geometry torch's keyword arguments describe, for weight ``w``."""
    return conv2d_geometry((int(w.shape[2]), int(w.shape[3])), **geometry)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")  # torch's own note
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "geometry",
    [
        {},
        {"stride": 2, "padding": 1},
        {"stride": (1, 2), "padding": (2, 0), "dilation": (2, 1)},
        {"groups": 2, "padding": "same"},
        {"groups": 4, "padding": "valid", "dilation": 2},
    ],
)
def test_conv2d_matches_torch(ref: Any, make: Any, rng: Any, dtype: Any, geometry: dict[str, Any]) -> None:
    groups = geometry.get("groups", 1)
    x = make(rng, (2, 4, 9, 10), dtype)
    w = make(rng, (8, 4 // groups, 3, 2), dtype, 0.3)
    b = make(rng, (8,), dtype)
    ref.check(conv2d(x, w, b, resolve(w, **geometry)), ref.conv2d(x, w, b, **geometry))


def test_unbatched_input_gives_unbatched_output(ref: Any, make: Any, rng: Any) -> None:
    x, w = make(rng, (3, 6, 6), np.float32), make(rng, (5, 3, 3, 3), np.float32)
    out = conv2d(x, w, None, resolve(w, padding=1))
    assert out.shape == (5, 6, 6)
    ref.check(out, ref.conv2d(x, w, None, padding=1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    case=conv_cases(groups=3, per_group=3),
    kernel=pairs(1, 4),
    stride=pairs(1, 3),
    padding=pairs(0, 2),
    dilation=pairs(1, 3),
    slack=pairs(0, 6),
)
def test_conv2d_geometry_property_against_torch(
    ref: Any,
    case: ConvCase,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    slack: tuple[int, int],
) -> None:
    # the smallest input the dilated kernel fits into, plus the slack
    image = (
        max(1, dilation[0] * (kernel[0] - 1) + 1 - 2 * padding[0]) + slack[0],
        max(1, dilation[1] * (kernel[1] - 1) + 1 - 2 * padding[1]) + slack[1],
    )
    x, w, b = case.inputs(image, kernel)
    kwargs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": case.groups}
    ref.check(conv2d(x, w, b, resolve(w, **kwargs)), ref.conv2d(x, w, b, **kwargs))


def test_conv2d_names_an_input_smaller_than_the_kernel() -> None:
    with pytest.raises(KernelShapeError, match=r"conv2d output would be 0x0: the input 2x2 .* dilated kernel 3x3"):
        conv2d_geometry((3, 3)).output_size(2, 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stride": 0}, "stride must be >= 1 in both dims, got 0"),
        ({"dilation": (1, 2, 3)}, r"dilation must be an int or a pair of ints, got \(1, 2, 3\)"),
        ({"padding": -1}, "padding must be >= 0 in both dims, got -1"),
        ({"padding": "full"}, "padding must be an int, a pair, 'valid' or 'same', got 'full'"),
        ({"padding": "same", "stride": 2}, r"padding='same' needs stride 1, got stride \(2, 2\)"),
        ({"groups": 0}, "groups must be a positive int, got 0"),
    ],
)
def test_geometry_arguments_are_validated_by_name(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(KernelShapeError, match=message):
        conv2d_geometry((3, 3), **kwargs)


def test_same_padding_puts_the_odd_pixel_at_the_bottom_right() -> None:
    assert conv2d_geometry((4, 3), padding="same").padding == (1, 2, 1, 1)
    assert conv2d_geometry((2, 2), padding="same", dilation=3).padding == (1, 2, 1, 2)


def test_each_input_takes_the_road_meant_for_it(kernel_path: str, blas_road: str) -> None:
    x32, x64 = np.zeros((1, 32, 8, 8), np.float32), np.zeros((1, 32, 8, 8), np.float64)
    three_by_three = conv2d_geometry((3, 3), padding=1)
    assert road(x64, three_by_three) == "columns", "float64 is numpy's road only"
    assert road(x32[:, :, ::2], three_by_three) == "columns", "a strided input is numpy's road only"
    if kernel_path == "numpy":
        assert road(x32, three_by_three) == "columns", "PACKRT_NUMBA=0 leaves numpy's road only"
        return
    if not compiled.enabled():
        pytest.skip("numba does not load here: no compiled road")
    if blas_road == "numpy":
        assert road(x32, three_by_three) == "column-bands", "without MKL's batched GEMM, a GEMM a band from Python"
        return
    assert road(x32, three_by_three) == "winograd"
    assert road(np.zeros((1, 4, 8, 8), np.float32), three_by_three) == "column-tiles", "too few channels"
    for geometry in ({"stride": 2}, {"dilation": 2}, {"groups": 8}):
        assert road(x32, conv2d_geometry((3, 3), padding=1, **geometry)) == "column-tiles", geometry
    assert road(x32, conv2d_geometry((5, 5))) == "column-tiles"


@pytest.mark.parametrize("first_row", [0, 3])
def test_compiled_band_columns_are_numpys_columns_of_those_rows(first_row: int) -> None:
    if not compiled.enabled():
        pytest.skip("numba does not load here (or PACKRT_NUMBA=0): no compiled columns")
    x = np.random.default_rng(first_row).standard_normal((1, 5, 31, 29)).astype(np.float32)
    geometry = conv2d_geometry((3, 2), stride=(2, 1), padding=(2, 1), dilation=(1, 2))
    want, oh, ow = im2col(x, geometry)
    got = columns.band_columns(x, geometry, (first_row, oh), np.full(want.size, np.nan, np.float32))
    np.testing.assert_array_equal(got.reshape(-1, oh - first_row, ow), want.reshape(-1, oh, ow)[:, first_row:])


def test_winograd_is_taken_from_its_channel_threshold_on(
    kernel_path: str, blas_road: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kernel_path == "numpy" or blas_road == "numpy" or not compiled.enabled():
        pytest.skip("the Winograd road needs numba and MKL's batched GEMM")
    x = np.zeros((1, 16, 8, 8), np.float32)
    geometry = conv2d_geometry((3, 3), padding=1)
    monkeypatch.setattr(roads, "_WINOGRAD_MIN_CHANNELS", 17)
    assert road(x, geometry) == "column-tiles"
    monkeypatch.setattr(roads, "_WINOGRAD_MIN_CHANNELS", 16)
    assert road(x, geometry) == "winograd"
