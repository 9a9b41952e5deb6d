"""Packs serve the same math as the raw kernels (within the road tolerance: their GEMM layouts differ),
own their bytes, and unpack bit for bit."""

from __future__ import annotations

import tracemalloc
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packrt_kernels_cpu.conv import conv2d, conv2d_geometry
from packrt_kernels_cpu.errors import KernelDTypeError, KernelShapeError
from packrt_kernels_cpu.functional import embedding, linear
from packrt_kernels_cpu.packing import linear_borrowed, pack_conv2d, pack_embedding, pack_linear
from packrt_kernels_cpu.tolerance import assert_same_result

DTYPES = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16]


pytestmark = pytest.mark.usefixtures("kernel_path", "blas_road")  # on both kernel paths and both GEMM roads


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_pack_unpacks_bit_for_bit_in_the_declared_dtype(make: Any, rng: Any, dtype: Any, bias: bool) -> None:
    w = make(rng, (6, 5), dtype)
    w[0, 0] = np.asarray(-0.0).astype(dtype)  # the sign of zero survives too
    b = make(rng, (6,), dtype) if bias else None
    w2, b2 = pack_linear(w, b).unpack()
    assert w2.dtype == w.dtype and w2.shape == w.shape and w2.flags.c_contiguous
    np.testing.assert_array_equal(_bits(w2), _bits(w))
    if b is None:
        assert b2 is None
    else:
        assert b2 is not None
        np.testing.assert_array_equal(_bits(b2), _bits(b))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in_features", [5, 384])
def test_packed_linear_forward_agrees_with_the_unpacked_linear_within_the_road_tolerance(
    make: Any, rng: Any, dtype: Any, in_features: int
) -> None:
    """The pack multiplies a contiguous W^T, ``linear`` a transposed view of W: the BLAS may pick another
    kernel, and so another summation order, for each (oneMKL does on AMD Zen 4), so not the same bits."""
    x, w, b = make(rng, (2, 3, in_features), dtype), make(rng, (4, in_features), dtype), make(rng, (4,), dtype)
    out = pack_linear(w, b).forward(x)
    assert out.dtype == np.dtype(dtype)
    assert_same_result(out, linear(x, w, b), terms=in_features)
    assert_same_result(out, linear_borrowed(x, w, b), terms=in_features)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_linear_pack_is_the_transpose_in_the_dtype_the_gemm_multiplies(blas_road: str, dtype: Any) -> None:
    """float32/float64 as declared; bfloat16 kept on MKL's road (its GEMM takes it), else float32; float16 in
    float32. The bias is held in the compute dtype (float32 for halves)."""
    w = np.ones((6, 5), dtype)
    b = np.ones(6, dtype)
    packed = pack_linear(w, b)
    kept = np.dtype(dtype) != np.float16 and (np.dtype(dtype) != ml_dtypes.bfloat16 or blas_road == "mkl")
    assert packed.wt.dtype == (np.dtype(dtype) if kept else np.float32)
    assert packed.wt.shape == (5, 6) and packed.wt.flags.c_contiguous
    bias_bytes = b.nbytes * (2 if np.dtype(dtype).itemsize == 2 else 1)
    assert packed.nbytes == w.nbytes * (1 if kept else 2) + bias_bytes
    w[...] = 0  # the pack owns its bytes: later writes to the source do not reach it
    np.testing.assert_array_equal(packed.wt, 1.0)


def _peak_bytes(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_borrowed_linear_makes_no_copy_of_a_float32_weight_but_converts_a_half_one() -> None:
    w32 = np.ones((512, 512), np.float32)
    x32 = np.ones((1, 512), np.float32)
    linear_borrowed(x32, w32)  # a BLAS's first call sets up its own buffers (oneMKL: ~34 MB), no copy of w
    assert _peak_bytes(lambda: linear_borrowed(x32, w32)) < w32.nbytes // 8
    w16, x16 = w32.astype(np.float16), x32.astype(np.float16)
    assert _peak_bytes(lambda: linear_borrowed(x16, w16)) >= w32.nbytes  # a float32 copy for the call


@settings(max_examples=50, deadline=None)
@given(
    lead=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    in_features=st.integers(1, 33),
    out_features=st.integers(1, 33),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_linear_and_its_pack_match_torch_for_any_shape(
    ref: Any, lead: list[int], in_features: int, out_features: int, bias: bool, seed: int
) -> None:
    r = np.random.default_rng(seed)
    x = r.standard_normal((*lead, in_features)).astype(np.float32)
    w = r.standard_normal((out_features, in_features)).astype(np.float32)
    b = r.standard_normal(out_features).astype(np.float32) if bias else None
    want = ref.F.linear(ref.t(x), ref.t(w), None if b is None else ref.t(b))
    ref.check(linear(x, w, b), want)
    ref.check(pack_linear(w, b).forward(x), want)


def test_pack_linear_names_a_bad_bias_or_weight_at_pack_time() -> None:
    with pytest.raises(KernelShapeError, match=r"bias must have shape \(3,\), got \(4,\)"):
        pack_linear(np.zeros((3, 4), np.float32), np.zeros(4, np.float32))
    with pytest.raises(KernelDTypeError, match="weight has dtype int8; expected one of"):
        pack_linear(np.zeros((3, 4), np.int8))


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_pack_forward_agrees_with_conv2d_and_unpacks_bit_for_bit(make: Any, rng: Any, dtype: Any) -> None:
    x, w, b = make(rng, (2, 6, 7, 7), dtype), make(rng, (4, 3, 3, 2), dtype), make(rng, (4,), dtype)
    geometry: dict[str, Any] = {"stride": 2, "padding": (1, 0), "dilation": 1, "groups": 2}
    resolved = conv2d_geometry((3, 2), **geometry)
    packed = pack_conv2d(w, b, resolved)
    assert packed.w_groups.shape == (2, 2, 3 * 3 * 2)
    terms = 3 * 3 * 2  # in_channels / groups * kh * kw
    assert_same_result(packed.forward(x), conv2d(x, w, b, resolved), terms=terms)
    assert_same_result(packed.forward(x[0]), conv2d(x[0], w, b, resolved), terms=terms)
    w2, b2 = packed.unpack()
    assert w2.dtype == w.dtype and w2.shape == w.shape
    np.testing.assert_array_equal(_bits(w2), _bits(w))
    assert b2 is not None
    np.testing.assert_array_equal(_bits(b2), _bits(b))
    factor = 2 if np.dtype(dtype).itemsize == 2 else 1
    assert packed.nbytes == (w.nbytes + b.nbytes) * factor


def test_conv_pack_validates_geometry_and_groups_once() -> None:
    with pytest.raises(KernelShapeError, match="weight's out_channels=4 must be divisible by groups=3"):
        pack_conv2d(np.zeros((4, 1, 3, 3), np.float32), None, conv2d_geometry((3, 3), groups=3))
    with pytest.raises(KernelShapeError, match="stride must be >= 1"):
        conv2d_geometry((3, 3), stride=0)
    with pytest.raises(KernelShapeError, match=r"weight.s kernel is \(3, 3\) but the geometry .* for \(2, 2\)"):
        pack_conv2d(np.zeros((4, 1, 3, 3), np.float32), None, conv2d_geometry((2, 2)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_pack_keeps_the_declared_dtype_and_round_trips(make: Any, rng: Any, dtype: Any) -> None:
    table = make(rng, (7, 3), dtype)
    packed = pack_embedding(table)
    assert packed.nbytes == table.nbytes
    ids = np.array([[0, 6], [3, 3]])
    np.testing.assert_array_equal(_bits(packed.forward(ids)), _bits(embedding(ids, table)))
    np.testing.assert_array_equal(_bits(packed.unpack()), _bits(table))


def test_a_linear_pack_of_a_strided_weight_is_its_contiguous_transpose() -> None:
    base = np.random.default_rng(5).standard_normal((300, 200)).astype(np.float32)
    w = base[::2, 1::1]  # a strided view, as a memory-mapped or sliced checkpoint gives
    packed = pack_linear(w)
    assert packed.wt.flags.c_contiguous and packed.wt.shape == (199, 150)
    np.testing.assert_array_equal(packed.wt, w.T)
