"""int8 per-channel quantization stays within half a step; float64 inputs of its packed linear serve the
dequantized weight's math in float64."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from packrt_kernels_cpu.errors import KernelDTypeError, KernelShapeError
from packrt_kernels_cpu.functional import linear
from packrt_kernels_cpu.quantize import dequantize, pack_quantized_linear, quantize_per_channel

DTYPES = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16]


@settings(max_examples=80, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=6),
        elements=st.floats(-(2.0**100), 2.0**100, width=32),
    )
)
def test_every_weight_is_recovered_within_half_a_step_of_its_row(w: np.ndarray) -> None:
    q, scale = quantize_per_channel(w)
    assert q.dtype == np.int8 and q.shape == w.shape
    assert scale.dtype == np.float32 and scale.shape == (w.shape[0],)
    assert (scale > 0).all() and (np.abs(q.astype(np.int16)) <= 127).all()
    per_row = scale.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
    err = np.abs(w.astype(np.float64) - q * per_row)
    assert (err <= per_row / 2 * (1 + 1e-6)).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_maximum_maps_to_127_and_zero_rows_get_scale_one(dtype: Any) -> None:
    w = np.array([[0.5, -2.0, 1.0], [0.0, 0.0, 0.0]]).astype(dtype)
    q, scale = quantize_per_channel(w)
    np.testing.assert_array_equal(q[0], [32, -127, 64])
    np.testing.assert_array_equal(q[1], 0)
    np.testing.assert_array_equal(scale, np.array([2.0 / 127, 1.0], np.float32))
    np.testing.assert_array_equal(dequantize(q, scale)[1], 0.0)


def test_quantize_refuses_non_finite_weights_by_row() -> None:
    w = np.ones((3, 2), np.float32)
    w[2, 1] = np.inf
    with pytest.raises(KernelShapeError, match=r"weight has 1 non-finite values \(first in row 2\)"):
        quantize_per_channel(w)
    with pytest.raises(KernelShapeError, match=r"weight must be 2 or 3 or 4 or 5-D"):
        quantize_per_channel(np.ones(3, np.float32))


def test_dequantize_checks_the_dtype_and_shape_of_q_and_scale() -> None:
    q = np.zeros((2, 3), np.int8)
    with pytest.raises(KernelDTypeError, match="q must be int8, got int16"):
        dequantize(q.astype(np.int16), np.ones(2, np.float32))
    with pytest.raises(KernelDTypeError, match="scale must be float32, got float64"):
        dequantize(q, np.ones(2))
    with pytest.raises(KernelShapeError, match=r"scale must have shape \(2,\), got \(3,\)"):
        dequantize(q, np.ones(3, np.float32))


@pytest.mark.parametrize("scratch_bytes", [1, 40, 1 << 20])
def test_a_float64_forward_keeps_activations_float_and_equals_linear_on_the_dequantized_weight(
    make: Any, rng: Any, scratch_bytes: int
) -> None:
    dtype = np.float64  # float32 and half inputs take the int8 road (test_int8.py)
    w, b = make(rng, (9, 10), np.float32), make(rng, (9,), dtype)
    q, scale = quantize_per_channel(w)
    packed = pack_quantized_linear(q, scale, b, scratch_bytes=scratch_bytes)
    x = make(rng, (2, 3, 10), dtype)
    out = packed.forward(x)
    assert out.dtype == np.dtype(dtype) and out.shape == (2, 3, 9)
    dense = dequantize(q, scale).astype(np.float64)
    want = linear(x.astype(np.float64), dense, b.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)  # the reference rounds q * scale to float32


def test_quantized_pack_is_int8_resident_and_unpacks_exactly(rng: Any) -> None:
    w = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal(64).astype(ml_dtypes.bfloat16)
    q, scale = quantize_per_channel(w)
    packed = pack_quantized_linear(q, scale, b)
    assert packed.nbytes == 64 * 32 + 64 * 4 + 64 * 2
    q2, s2, b2 = packed.unpack()
    np.testing.assert_array_equal(q2, q)
    np.testing.assert_array_equal(s2.view(np.uint32), scale.view(np.uint32))
    assert b2 is not None and b2.dtype == b.dtype
    np.testing.assert_array_equal(b2.view(np.uint16), b.view(np.uint16))
    q[...] = 0  # the pack owns its copy
    np.testing.assert_array_equal(packed.q, q2)
    assert packed.block_rows(np.dtype(np.float32)) == 64
    assert pack_quantized_linear(q2, s2, scratch_bytes=256).block_rows(np.dtype(np.float32)) == 2


def test_quantized_pack_names_bad_arguments() -> None:
    q, scale = np.zeros((3, 4), np.int8), np.ones(3, np.float32)
    with pytest.raises(KernelShapeError, match="scale must be finite and > 0 in every row"):
        pack_quantized_linear(q, np.zeros(3, np.float32))
    with pytest.raises(KernelShapeError, match=r"bias must have shape \(3,\), got \(2,\)"):
        pack_quantized_linear(q, scale, np.zeros(2, np.float32))
    with pytest.raises(KernelShapeError, match=r"q must be 2-D \(out_features, in_features\)"):
        pack_quantized_linear(np.zeros((3, 4, 1), np.int8), scale)
    with pytest.raises(KernelShapeError, match="scratch_bytes must be >= 1, got 0"):
        pack_quantized_linear(q, scale, scratch_bytes=0)


def test_a_subnormal_row_is_still_recovered_within_half_a_step() -> None:
    w = np.array([[5.94e-43, -1e-44, 0.0]], dtype=np.float32)  # amax/127 is subnormal in float32
    q, scale = quantize_per_channel(w)
    err = np.abs(w.astype(np.float64) - q * scale.astype(np.float64)[:, None])
    assert (err <= scale.astype(np.float64)[:, None] / 2).all()
