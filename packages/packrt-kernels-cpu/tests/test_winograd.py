"""conv2d's Winograd F(2x2, 3x3) road agrees with torch for every size, padding and grouping it takes,
and is taken only where it applies (MKL's road, numba loaded). Its threads: test_conv_threads.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conv_cases import ConvCase, conv_cases, pairs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packrt_kernels_cpu import blas, compiled
from packrt_kernels_cpu import settings as kernel_settings
from packrt_kernels_cpu.conv import conv2d, conv2d_geometry, road, roads, winograd

pytestmark = [
    pytest.mark.skipif(not compiled.enabled(), reason="numba does not load here: no Winograd road"),
    pytest.mark.usefixtures("mkl_road"),
]


@pytest.fixture
def mkl_road() -> Iterator[None]:
    """The road runs on MKL's batched GEMM: MKL decided afresh, a skip where its wheel is not installed."""
    with kernel_settings.override(blas="auto"):
        if blas.sgemm_batch() is None:
            pytest.skip("MKL does not load here (pip install packrt-kernels-cpu[mkl]): no Winograd road")
        yield


@pytest.fixture
def any_channel_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any channel count takes the road (the property draws a few channels only)."""
    monkeypatch.setattr(roads, "_WINOGRAD_MIN_CHANNELS", 1)


@pytest.mark.usefixtures("conv_layout", "any_channel_count")
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    case=conv_cases(groups=2, per_group=5),
    image=pairs(1, 9),
    padding=st.sampled_from([0, 1, 2, (0, 1), (2, 0), "same"]),
)
def test_winograd_conv2d_matches_torch_for_any_size_padding_and_groups(
    ref: Any, case: ConvCase, image: tuple[int, int], padding: Any
) -> None:
    h, w = image
    pad = (padding, padding) if isinstance(padding, int) else padding
    if padding != "same" and (h + 2 * pad[0] < 3 or w + 2 * pad[1] < 3):
        h, w = h + 2, w + 2  # the padded input must hold the kernel
    x, k, b = case.inputs((h, w), (3, 3))
    geometry = conv2d_geometry((3, 3), padding=padding, groups=case.groups)
    assert road(x, geometry) == "winograd"
    ref.check(conv2d(x, k, b, geometry), ref.conv2d(x, k, b, padding=padding, groups=case.groups))


def test_a_layer_of_sixteen_channels_takes_the_road_and_matches_torch(ref: Any, rng: Any) -> None:
    x = rng.standard_normal((2, 16, 11, 14)).astype(np.float32)
    k = (rng.standard_normal((24, 16, 3, 3)) * 0.2).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    geometry = conv2d_geometry((3, 3), padding=1)
    assert road(x, geometry) == "winograd"
    ref.check(conv2d(x, k, b, geometry), ref.conv2d(x, k, b, padding=1))


@pytest.mark.parametrize(
    ("kernel", "keywords", "channels", "dtype"),
    [
        ((3, 3), {}, 4, np.float32),  # too few input channels a group: the columns are faster
        ((3, 3), {"groups": 8}, 32, np.float32),  # 4 a group
        ((5, 5), {}, 32, np.float32),
        ((3, 3), {"stride": 2}, 32, np.float32),
        ((3, 3), {"dilation": 2}, 32, np.float32),
        ((3, 3), {}, 32, np.float64),
    ],
    ids=["4-channels", "4-a-group", "5x5", "stride-2", "dilation-2", "float64"],
)
def test_the_road_is_not_taken_where_it_does_not_apply(
    kernel: tuple[int, int], keywords: dict[str, Any], channels: int, dtype: Any
) -> None:
    x = np.zeros((1, channels, 8, 8), dtype)
    assert road(x, conv2d_geometry(kernel, **keywords)) != "winograd"


def test_the_road_is_not_taken_off_mkls_road() -> None:
    with kernel_settings.override(blas="numpy"):
        assert road(np.zeros((1, 32, 8, 8), np.float32), conv2d_geometry((3, 3), padding=1)) != "winograd"


def test_the_transformed_weight_is_g_k_gt_in_float64_rounded_once(rng: Any) -> None:
    kernels = rng.standard_normal((2, 3, 5, 3, 3)).astype(np.float32)  # (groups, out, in, 3, 3)
    g = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
    want = (g @ kernels.astype(np.float64) @ g.T).reshape(2, 3, 5, 16).transpose(0, 3, 1, 2).astype(np.float32)
    np.testing.assert_array_equal(winograd.transformed_weight(kernels.reshape(2, 3, 45)), want)


def test_columns_and_winograd_agree_within_float32_rounding(rng: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    x = rng.standard_normal((2, 32, 16, 16)).astype(np.float32)
    k = (rng.standard_normal((32, 32, 3, 3)) / 17).astype(np.float32)
    geometry = conv2d_geometry((3, 3), padding=1)
    by_winograd = conv2d(x, k, None, geometry)
    monkeypatch.setattr(roads, "_WINOGRAD_MIN_CHANNELS", 10**9)
    by_columns = conv2d(x, k, None, geometry)
    np.testing.assert_allclose(by_winograd, by_columns, rtol=1e-5, atol=2e-6)
