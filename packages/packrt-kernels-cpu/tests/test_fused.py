"""The numba-compiled kernels agree with the numpy reference path, and the switch between them holds."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from packrt_kernels_cpu import compiled, fused, scratch, settings
from packrt_kernels_cpu import functional as kernels
from packrt_kernels_cpu.tolerance import tolerance

F32 = np.float32
CASES: dict[str, Callable[[np.ndarray], Any]] = {
    "gelu": lambda x: kernels.gelu(x),
    "gelu-tanh": lambda x: kernels.gelu(x, "tanh"),
    "silu": kernels.silu,
    "relu": kernels.relu,
    "softmax": lambda x: kernels.softmax(x, -1),
    "layer_norm": lambda x: kernels.layer_norm(
        x, x.shape[-1], np.full(x.shape[-1], 1.5, F32), np.ones(x.shape[-1], F32)
    ),
    "layer_norm-plain": lambda x: kernels.layer_norm(x, x.shape[-1]),
    "rms_norm": lambda x: kernels.rms_norm(x, x.shape[-1], np.full(x.shape[-1], 0.5, F32)),
}


def _both(fn: Callable[[np.ndarray], Any], x: np.ndarray) -> tuple[Any, Any]:
    with settings.override(numba=True):
        fast = fn(x)
    with settings.override(numba=False):
        reference = fn(x)
    return fast, reference


def test_the_fused_path_loads_and_takes_contiguous_float32_numpy_arrays_only() -> None:
    assert compiled.enabled()
    assert fused.handles(np.ones((2, 3), F32))
    assert not fused.handles(np.ones((2, 3), np.float64))
    assert not fused.handles(np.ones((3, 2), F32).T)  # not C-contiguous
    assert not fused.handles([1.0, 2.0])


def test_numba_off_in_the_settings_turns_the_fused_path_off() -> None:
    with settings.override(numba=False):
        assert not compiled.enabled() and not fused.handles(np.ones(3, F32))
    assert compiled.enabled(), "the settings as they were come back after the block"


@pytest.mark.parametrize(("value", "on"), [("0", False), ("1", True), ("", True), (" 0 ", False)])
def test_packrt_numba_0_in_the_environment_turns_the_fused_path_off(value: str, on: bool) -> None:
    assert settings.from_environment({"PACKRT_NUMBA": value}).numba is on
    assert settings.from_environment({}).numba, "numba is on by default"


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 5, 768), (4, 3072), (64, 4096)])  # the last: the parallel path
def test_each_fused_kernel_matches_the_numpy_reference(name: str, shape: tuple[int, ...]) -> None:
    x = (np.random.default_rng(len(shape) * 31 + shape[-1]).standard_normal(shape) * 4).astype(F32)
    fast, reference = _both(CASES[name], x)
    assert fast.dtype == F32 and fast.shape == x.shape
    rtol, atol = tolerance(F32)
    np.testing.assert_allclose(fast, reference, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", ["gelu", "gelu-tanh", "silu", "softmax"])
def test_fused_kernels_stay_finite_and_agree_on_extreme_inputs(name: str) -> None:
    x = np.array([[-1e4, -80.0, -9.0, 0.0, 9.0, 80.0, 1e4]], F32)
    fast, reference = _both(CASES[name], x)
    assert np.isfinite(fast).all()
    np.testing.assert_allclose(fast, reference, rtol=1e-5, atol=1e-6)


def test_relu_gives_numpys_bits_for_nan_infinities_and_signed_zeros() -> None:
    x = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, -1.5, 2.5] * 50_000, F32)  # large: the threaded path too
    fast, reference = _both(CASES["relu"], x)
    np.testing.assert_array_equal(fast.view(np.uint32), reference.view(np.uint32))


def test_a_fully_masked_softmax_row_is_nan_on_both_paths() -> None:
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf]], F32)
    fast, reference = _both(CASES["softmax"], x)
    assert np.isnan(fast[0]).all() and np.isnan(reference[0]).all()
    assert fast[1].tolist() == reference[1].tolist() == [1.0, 0.0]


def test_half_precision_goes_through_the_fused_float32_path_and_rounds_once() -> None:
    x = np.linspace(-5, 5, 64, dtype=np.float16).reshape(4, 16)
    fast, reference = _both(CASES["gelu"], x)
    assert fast.dtype == reference.dtype == np.float16
    np.testing.assert_array_equal(fast, CASES["gelu"](x.astype(F32)).astype(np.float16))  # one rounding, at the end
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(fast.astype(F32), reference.astype(F32), rtol=rtol, atol=atol)


def test_bfloat16_float32_casts_give_ml_dtypes_bits_exactly() -> None:
    rng = np.random.default_rng(3)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39, 3.4e38, 1.0 + 2**-8, 1.0 + 3 * 2**-8], F32)
    values = np.concatenate([specials, (rng.standard_normal(20000) * 10.0 ** rng.integers(-40, 38, 20000)).astype(F32)])
    bf16 = np.dtype(ml_dtypes.bfloat16)
    assert fused.casts(values, bf16)
    narrow = fused.cast(values, bf16)
    finite = ~np.isnan(values)
    np.testing.assert_array_equal(narrow.view(np.uint16)[finite], values.astype(bf16).view(np.uint16)[finite])
    assert np.isnan(narrow[4].astype(F32))  # NaN stays NaN (its payload bits may differ)
    wide = fused.cast(narrow, F32)
    np.testing.assert_array_equal(wide.view(np.uint32), narrow.astype(F32).view(np.uint32))


def test_small_or_non_contiguous_arrays_keep_numpys_cast() -> None:
    bf16 = np.dtype(ml_dtypes.bfloat16)
    assert not fused.casts(np.ones(16, F32), bf16)
    assert not fused.casts(np.ones((128, 128), F32).T, bf16)
    assert not fused.casts(np.ones(8192, np.float64), bf16)


@pytest.mark.parametrize("size", [4096 * 3, 1 << 19])  # the calling thread's loop, then the pool's
def test_bfloat16_casts_give_ml_dtypes_bits_on_the_calling_thread_and_on_the_pool(size: int) -> None:
    values = np.random.default_rng(size).standard_normal(size).astype(F32)
    bf16 = np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(fused.cast(values, bf16).view(np.uint16), values.astype(bf16).view(np.uint16))


def test_a_large_transpose_on_the_pool_equals_numpys() -> None:
    w = np.random.default_rng(9).standard_normal((700, 900)).astype(F32)
    np.testing.assert_array_equal(fused.transposed(w, np.dtype(F32)), w.T)
    bf16 = w.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(fused.transposed(bf16, np.dtype(F32)), bf16.T.astype(F32))


def test_the_scratch_buffer_is_reused_per_thread() -> None:
    first = scratch.scratch_f32((4, 8))
    again = scratch.scratch_f32((2, 3))
    assert np.shares_memory(first, again), "a smaller request reuses this thread's buffer"
    seen: list[np.ndarray] = []
    worker = threading.Thread(target=lambda: seen.append(scratch.scratch_f32((4, 8))))
    worker.start()
    worker.join()
    assert not np.shares_memory(seen[0], first), "each thread has its own buffer"


@pytest.mark.usefixtures("blas_road")  # MKL's road: one blocked pass with MKL's exp; numpy's: three steps
def test_in_place_softmax_matches_numpys_and_turns_an_all_masked_row_into_zeros() -> None:
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((64, 300)) * 30).astype(F32)  # wide enough for the parallel path too
    x[3, :] = -np.inf  # a query that may see no key
    x[5, ::2] = -np.inf
    x[7, 0] = 80.0  # a large logit: the shift keeps exp finite
    expected = np.exp(x - np.where(np.isneginf(x).all(-1, keepdims=True), 0, x.max(-1, keepdims=True)))
    expected /= np.where(expected.sum(-1, keepdims=True) == 0, 1, expected.sum(-1, keepdims=True))
    for rows in (x[:4].copy(), np.repeat(x, 20, axis=0)):  # the calling-thread and the parallel kernel
        fused.softmax_in_place(rows)
        want = expected[:4] if rows.shape[0] == 4 else np.repeat(expected, 20, axis=0)
        np.testing.assert_allclose(rows, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(rows[3 * 20], np.zeros(300, F32))
    with_nan = np.array([[0.0, np.nan, 1.0], [0.0, 1.0, 2.0]], F32)
    fused.softmax_in_place(with_nan)
    assert np.isnan(with_nan[0]).all(), "a NaN score makes its whole row NaN, as numpy's path and torch do"
    assert np.isfinite(with_nan[1]).all()


BF16_CASES = ["gelu", "gelu-tanh", "silu", "layer_norm", "layer_norm-plain", "rms_norm"]


@pytest.mark.parametrize("name", BF16_CASES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (5, 1500), (64, 4096)])  # tiles cut mid-row; the parallel path
def test_bfloat16_kernels_give_the_bits_of_widen_compute_round(name: str, shape: tuple[int, ...]) -> None:
    """A bfloat16 input is computed in float32 tile by tile and rounded once: exactly what widening the
    whole array, running the float32 kernel and rounding the result gives, with no float32 copy between."""
    x = (np.random.default_rng(shape[-1]).standard_normal(shape) * 4).astype(ml_dtypes.bfloat16)
    x.reshape(-1)[:3] = np.array([np.nan, np.inf, -np.inf]).astype(ml_dtypes.bfloat16)[: x.size]
    assert fused.handles_bf16(x)
    out = CASES[name](x)
    assert out.dtype == x.dtype and out.shape == x.shape
    with np.errstate(invalid="ignore"):
        want = CASES[name](x.astype(F32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


def test_a_strided_bfloat16_input_takes_the_float32_road_and_agrees() -> None:
    x = (np.random.default_rng(9).standard_normal((6, 40)) * 3).astype(ml_dtypes.bfloat16)[:, ::2]
    assert not fused.handles_bf16(x)
    want = kernels.gelu(x.astype(F32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(kernels.gelu(x).view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("rows", [1, 5, 2000])  # 2000 x 300: filled on the pool
def test_broadcast_rows_lays_the_row_out_in_every_row(rows: int) -> None:
    row = np.random.default_rng(rows).standard_normal(300).astype(np.float32)
    out = fused.broadcast_rows(row, rows)
    assert out.shape == (rows, 300) and out.dtype == np.float32 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, np.broadcast_to(row, (rows, 300)))


@pytest.mark.parametrize(("offset", "spread"), [(0.0, 1.0), (1e3, 1e-2), (-5e5, 3.0), (1e4, 1e-3)])
def test_layer_norm_of_rows_far_from_zero_is_as_accurate_as_float32_allows(offset: float, spread: float) -> None:
    """The one-pass moments (shifted by a value of the row) must not cancel: against a float64 reference
    the error stays within one float32 ulp of the row's mean, in normalised units (torch's float32
    LayerNorm measured 4-10x that)."""
    if not compiled.enabled():
        pytest.skip("numba does not load here: the numpy path is the reference")
    x = (offset + spread * np.random.default_rng(3).standard_normal((64, 768))).astype(F32)
    got = fused.layer_norm(x, 768, np.ones(768, F32), np.zeros(768, F32), 1e-12)
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-12)
    bound = float(np.spacing(np.float32(abs(offset)))) / spread + 1e-5
    assert float(np.abs(got - want).max()) <= bound


def test_the_compiled_exp_is_within_its_stated_ulps_and_exact_at_its_edges() -> None:
    """SiLU's and softmax's exp (``_numba_kernels.exp_value``, plain arithmetic so it vectorises): within
    1.3 units in the last place over float32's normal range; inf, 0 and NaN where exp gives them."""
    from packrt_kernels_cpu import _numba_kernels

    x = np.linspace(-87.0, 88.7, 400_001, dtype=F32)
    got = np.array([_numba_kernels.exp_value(v) for v in x[::97]], F32)
    exact = np.exp(x[::97].astype(np.float64))
    ulp = np.spacing(exact.astype(F32)).astype(np.float64)
    assert (np.abs(got - exact) / ulp).max() <= 1.3
    edges = np.array([np.inf, 89.0, -np.inf, -104.0, 0.0, np.nan], F32)
    got_edges = [float(_numba_kernels.exp_value(v)) for v in edges]
    assert got_edges[:5] == [np.inf, np.inf, 0.0, 0.0, 1.0] and np.isnan(got_edges[5])
