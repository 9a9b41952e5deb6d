"""The int8 road: the uint8 x int8 GEMM is exact in int32 on both roads, activations quantize within
half a step per row, and the int8 linear is the float linear of the quantized operands."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packrt_kernels_cpu import int8
from packrt_kernels_cpu.errors import KernelDTypeError, KernelShapeError
from packrt_kernels_cpu.quantize import dequantize, pack_quantized_linear, quantize_per_channel

FIXTURES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.int64) @ b.astype(np.int64).T


@FIXTURES
@given(
    m=st.sampled_from([1, 2, 3, 4, 5, 9, 17, 40]),
    k=st.integers(1, 1100),
    n=st.integers(1, 140),
    seed=st.integers(0, 2**32 - 1),
)
def test_gemm_is_exact_in_int32_on_both_roads(blas_road: str, m: int, k: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    b = rng.integers(-128, 128, (n, k), dtype=np.int8)
    out = int8.gemm_u8s8s32(a, b)
    assert out.dtype == np.int32 and out.shape == (m, n)
    np.testing.assert_array_equal(out, exact(a, b))


@pytest.mark.parametrize("k", [int8.MAX_K, int8.FLOAT_CHUNK, int8.FLOAT_CHUNK + 1, 1000])
def test_gemm_of_extreme_levels_does_not_wrap_up_to_max_k(blas_road: str, k: int) -> None:
    a = np.full((2, k), 255, np.uint8)
    b = np.stack([np.full(k, -128, np.int8), np.full(k, 127, np.int8), np.zeros(k, np.int8)])
    out = int8.gemm_u8s8s32(a, b)
    np.testing.assert_array_equal(out, exact(a, b))
    assert out[0, 0] == -255 * 128 * k


def test_gemm_of_empty_operands_is_empty_or_zero(blas_road: str) -> None:
    assert int8.gemm_u8s8s32(np.zeros((0, 4), np.uint8), np.zeros((3, 4), np.int8)).shape == (0, 3)
    np.testing.assert_array_equal(int8.gemm_u8s8s32(np.zeros((2, 0), np.uint8), np.zeros((3, 0), np.int8)), 0)


def test_gemm_reads_strided_operands_and_fills_a_given_out(blas_road: str, rng: Any) -> None:
    a = rng.integers(0, 256, (6, 40), dtype=np.uint8)[:, 3:33]
    b = rng.integers(-128, 128, (30, 7), dtype=np.int8).T
    out = np.empty((6, 7), np.int32)
    assert int8.gemm_u8s8s32(a, b, out) is out
    np.testing.assert_array_equal(out, exact(a, b))


def test_gemm_names_wrong_dtypes_shapes_and_out() -> None:
    a, b = np.zeros((2, 3), np.uint8), np.zeros((4, 3), np.int8)
    with pytest.raises(KernelDTypeError, match=r"a \(activations\) must be uint8 \(rows, K\), got int8"):
        int8.gemm_u8s8s32(b, b)
    with pytest.raises(KernelDTypeError, match=r"b \(weight\) must be int8 \(out_features, K\), got uint8"):
        int8.gemm_u8s8s32(a, a)
    with pytest.raises(KernelDTypeError, match=r"must be a numpy array .*got list"):
        int8.gemm_u8s8s32([[1]], b)
    with pytest.raises(KernelShapeError, match=r"a \(activations\) must be 2-D \(rows, K\), got shape \(3,\)"):
        int8.gemm_u8s8s32(np.zeros(3, np.uint8), b)
    with pytest.raises(KernelShapeError, match=r"a is \(rows, 3\) but b is \(4, 5\): b must be \(out_features, 3\)"):
        int8.gemm_u8s8s32(a, np.zeros((4, 5), np.int8))
    with pytest.raises(KernelShapeError, match=r"K=65537 is over 65536, .*cut K into chunks"):
        int8.gemm_u8s8s32(np.zeros((1, 65537), np.uint8), np.zeros((1, 65537), np.int8))
    with pytest.raises(KernelShapeError, match=r"out must be a C-contiguous int32 numpy array of shape \(2, 4\)"):
        int8.gemm_u8s8s32(a, b, np.zeros((2, 4), np.int64))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 6),
    cols=st.integers(1, 90),
    scale=st.sampled_from([1e-30, 1e-3, 1.0, 1e4, 1e30]),
    shift=st.sampled_from([0.0, 1.0, -1.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_activation_row_is_recovered_within_half_its_step(
    rows: int, cols: int, scale: float, shift: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    x = ((rng.standard_normal((rows, cols)) + shift) * scale).astype(np.float32)
    x[0, 0] = 0.0
    u, s, z = int8.quantize_rows(x)
    assert u.dtype == np.uint8 and s.dtype == np.float32 and z.dtype == np.int32
    assert ((z >= 0) & (z <= 255)).all() and (s > 0).all()
    levels = (u.astype(np.float64) - z[:, None]) * s.astype(np.float64)[:, None]
    step = s.astype(np.float64)[:, None]
    # half a step, plus float32's rounding of the scale, its inverse, x * inverse and the zero point
    # added: four roundings of values up to 256 levels, 2**-24 of each
    assert (np.abs(levels - x) <= step * (0.5 + 4 * 256 * 2.0**-24) + 1e-45).all()
    assert u[0, 0] == z[0]  # zero is a level of its own: padding and ReLU zeros stay exactly zero


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 5),
    cols=st.integers(1, 70),
    scale=st.sampled_from([1e-30, 1e-3, 1.0, 1e30]),
    shift=st.sampled_from([0.0, 3.0, -3.0]),
    negative_zeros=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_rows_scale_and_zero_point_come_from_its_range_widened_to_hold_zero(
    rows: int, cols: int, scale: float, shift: float, negative_zeros: bool, seed: int
) -> None:
    # scale = (max(0, row) - min(0, row)) / 255 and zero = round(-min / scale), in float32 as the rule states
    rng = np.random.default_rng(seed)
    x = ((rng.standard_normal((rows, cols)) + shift) * scale).astype(np.float32)
    if negative_zeros:
        x[:, ::3] = -0.0
        x[-1] = -0.0  # a row of negative zeros: scale 1, zero point 0
    _, s, z = int8.quantize_rows(x)
    for row, got_scale, got_zero in zip(x, s, z, strict=True):
        lo, hi = min(np.float32(0), row.min()), max(np.float32(0), row.max())
        span = np.float32(hi - lo)
        want = span / np.float32(255) if span > 0 else np.float32(1)
        assert got_scale.view(np.uint32) == np.float32(want).view(np.uint32)
        zero = np.int32(np.float32(-lo) * (np.float32(1) / np.float32(want)) + np.float32(0.5))
        assert got_zero == min(max(zero, 0), 255)


def test_a_zero_row_gets_scale_one_and_a_non_finite_row_scale_nan() -> None:
    x = np.array([[0.0, 0.0], [1.0, np.nan], [np.inf, 1.0], [2.0, -1.0]], np.float32)
    u, s, z = int8.quantize_rows(x)
    assert s[0] == 1.0 and z[0] == 0 and (u[0] == 0).all()
    assert np.isnan(s[1]) and np.isnan(s[2])
    np.testing.assert_allclose(s[3], 3.0 / 255, rtol=1e-6)
    q, ws = quantize_per_channel(np.ones((3, 2), np.float32))
    out = int8.linear(x, q, ws, int8.weight_sums(q), None)
    assert np.isnan(out[1:3]).all() and np.isfinite(out[[0, 3]]).all()


@pytest.mark.parametrize("where", [0, 5, 21, 38])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_value_anywhere_in_a_wide_row_makes_its_scale_nan(where: int, bad: float) -> None:
    """The row's range is read four values at a time, then the rest one by one: first, middle and tail."""
    x = np.linspace(-2, 3, 4 * 39, dtype=np.float32).reshape(4, 39)
    x[2, where] = bad
    _, s, _ = int8.quantize_rows(x)
    assert np.isnan(s[2]) and np.isfinite(s[[0, 1, 3]]).all()


def test_quantize_rows_names_a_wrong_input() -> None:
    with pytest.raises(KernelDTypeError, match=r"x must be float32 \(rows, in_features\), got float64"):
        int8.quantize_rows(np.zeros((2, 3)))
    with pytest.raises(KernelShapeError, match=r"x must be 2-D \(rows, in_features\), got shape \(2, 3, 1\)"):
        int8.quantize_rows(np.zeros((2, 3, 1), np.float32))


def quantized_operands(x: np.ndarray, q: np.ndarray, ws: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x as its uint8 levels dequantized, the dequantized weight, each row's activation step), float64."""
    u, s, z = int8.quantize_rows(x)
    xd = (u.astype(np.float64) - z[:, None]) * s.astype(np.float64)[:, None]
    return xd, dequantize(q, ws).astype(np.float64), s.astype(np.float64)


@pytest.mark.parametrize("shape", [(1, 7, 3), (5, 130, 70), (64, 768, 96)])
def test_int8_linear_is_the_float_product_of_the_quantized_operands(
    blas_road: str, rng: Any, shape: tuple[int, int, int]
) -> None:
    m, k, n = shape
    x = rng.standard_normal((m, k)).astype(np.float32)
    w, b = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    q, ws = quantize_per_channel(w)
    out = int8.linear(x, q, ws, int8.weight_sums(q), b)
    xd, wd, step = quantized_operands(x, q, ws)
    want = xd @ wd.T + b
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # Against float: each output is off by at most half a step of its row times its weight row's L1 norm.
    bound = step[:, None] / 2 * np.abs(wd).sum(axis=1)[None, :]
    assert (np.abs(out - (x.astype(np.float64) @ wd.T + b)) <= bound * (1 + 1e-4) + 1e-5).all()


def test_rows_longer_than_max_k_are_summed_in_exact_chunks(monkeypatch: pytest.MonkeyPatch, rng: Any) -> None:
    monkeypatch.setattr(int8, "MAX_K", 64)
    x = rng.standard_normal((3, 150)).astype(np.float32)
    q, ws = quantize_per_channel(rng.standard_normal((5, 150)).astype(np.float32))
    b = rng.standard_normal(5).astype(np.float32)
    out = int8.linear(x, q, ws, int8.weight_sums(q), b)
    want = (
        b
        + sum(  # each chunk's activations quantized on their own
            quantized_operands(np.ascontiguousarray(x[:, c : c + 64]), q[:, c : c + 64], ws)[0]
            @ dequantize(q, ws)[:, c : c + 64].T
            for c in range(0, 150, 64)
        )
    )
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_packed_quantized_linear_serves_float_inputs_through_int8(blas_road: str, rng: Any, dtype: Any) -> None:
    w, b = rng.standard_normal((9, 10)).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    q, ws = quantize_per_channel(w)
    packed = pack_quantized_linear(q, ws, b)
    x = rng.standard_normal((2, 3, 10)).astype(dtype)
    out = packed.forward(x)
    assert out.dtype == np.dtype(dtype) and out.shape == (2, 3, 9)
    want = int8.linear(x.astype(np.float32).reshape(6, 10), q, ws, int8.weight_sums(q), b).reshape(2, 3, 9)
    np.testing.assert_array_equal(out, want.astype(dtype))
