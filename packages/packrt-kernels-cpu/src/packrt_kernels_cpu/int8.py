"""The int8 linear road: activations quantized per row at run time, an int8 x uint8 -> int32 GEMM,
and one pass back to float32 with both scales and the bias.

For a weight quantized per output channel (``w[n] ~ q[n] * w_scale[n]``, :func:`quantize_per_channel`)
and each activation row quantized asymmetrically onto uint8 (``x[i] ~ (u[i] - zero[i]) * x_scale[i]``)::

    y[i, n] = (sum_k u[i, k] q[n, k]  -  zero[i] * sum_k q[n, k]) * x_scale[i] * w_scale[n] + b[n]

The first sum is the int32 GEMM (exact: ``K * 255 * 128 < 2**31`` for ``K <= 65536``; longer rows
are cut into chunks of 65536 whose float32 results add up); the second is the weight's row sums,
computed once per pack. On MKL's road the GEMM is oneMKL's ``cblas_gemm_s8u8s32`` (VNNI or AMX
where the CPU has them, several times float32's rate: docs/benchmarks.md). Off it, on a CPU with
AVX512-VNNI, a packed layer's weight is repacked once into :mod:`packrt_kernels_cpu.vnni`'s panels and
multiplied there (oneMKL runs generic int8 code on AMD CPUs). Elsewhere it is float32 GEMMs on numpy's
BLAS over K chunks of 512, each exact in float32, so about float32's speed plus converting the int8
operands. Every road gives the same integers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt_kernels_cpu import blas, compiled, vnni
from packrt_kernels_cpu.errors import KernelDTypeError, KernelShapeError

Array = Any

MAX_K = 1 << 16  # the longest row one int32 GEMM sums exactly: 65536 * 255 * 128 < 2**31
_U8, _S8, _I32, _F32 = (np.dtype(t) for t in (np.uint8, np.int8, np.int32, np.float32))
_NO_BIAS = np.empty(0, _F32)  # the compiled loops read an empty bias as none
_COL_MAJOR, _NO_TRANS, _TRANS, _FIX_OFFSET = 102, 111, 112, 173  # CBLAS_LAYOUT / _TRANSPOSE / _OFFSET
_INT32_MAX = 2**31 - 1
_NO_OFFSET = np.zeros(1, np.int32)  # the C offset MKL reads with CblasFixOffset: none
# Off MKL's road the GEMM runs as float32 GEMMs on numpy's BLAS over chunks of this many columns of
# K, each exact (see _gemm_in_float): the BLAS's float32 kernels outrun a compiled int32 loop at every
# batch size (docs/benchmarks.md).
FLOAT_CHUNK = 512


def _compiled() -> Any:
    """The road's compiled loops (:mod:`._numba_int8`), loaded on first use: ``import packrt`` loads no numba."""
    return compiled.module("packrt_kernels_cpu._numba_int8")


def _dequantize(acc: Array, *args: Any) -> None:
    """The product back in float32 (``_numba_int8.dequantize_product``'s arguments), on the pool when large."""
    compiled.launch("dequantize_product", acc.size, acc, *args, loops=_compiled())


def _require(a: Array, dtype: np.dtype[Any], name: str, shape: str) -> None:
    if type(a) is not np.ndarray:
        raise KernelDTypeError(f"{name} must be a numpy array ({shape} {dtype.name}), got {type(a).__name__}")
    if a.dtype != dtype:
        raise KernelDTypeError(f"{name} must be {dtype.name} {shape}, got {a.dtype.name}")
    if a.ndim != 2:
        raise KernelShapeError(f"{name} must be 2-D {shape}, got shape {tuple(a.shape)}")


def quantize_rows(x: Array) -> tuple[Array, Array, Array]:
    """``(u, scale, zero)``: float32 ``x`` (M, K) as uint8 levels, one float32 scale and one int32 zero
    point per row, ``x[i] ~ (u[i] - zero[i]) * scale[i]`` within half a step (and float32 rounding) (each row's range,
    widened to hold 0, maps onto 0..255, so 0 is exact). A row of zeros gets scale 1; a row holding
    NaN or infinity gets scale NaN, which carries into every output of that row."""
    _require(x, _F32, "x", "(rows, in_features)")
    x = np.ascontiguousarray(x)
    rows = x.shape[0]
    u = np.empty(x.shape, _U8)
    scale = np.empty(rows, _F32)
    zero = np.empty(rows, _I32)
    if x.size:
        # each row's range and levels in one compiled pass, rows shared over the pool
        compiled.launch("quantize_rows", x.size, x, u, scale, zero, loops=_compiled())
    else:
        scale[:] = 1.0
        zero[:] = 0
    return u, scale, zero


def weight_sums(q: Array) -> Array:
    """Each row's sum of the int8 weight ``q`` (N, K), int32: the zero points' share of the product."""
    _require(q, _S8, "q", "(out_features, in_features)")
    out = np.empty(q.shape[0], _I32)
    compiled.launch("row_sums", q.size, np.ascontiguousarray(q), out, loops=_compiled())
    return out


def uses_vnni() -> bool:
    """Whether a packed int8 linear multiplies on :mod:`packrt_kernels_cpu.vnni` here: off MKL's road
    (oneMKL's own int8 GEMM is taken where MKL is), on a CPU with AVX512-VNNI."""
    return blas.gemm_s8u8s32() is None and vnni.available()


def gemm_u8s8s32(a: Array, b: Array, out: Array | None = None) -> Array:
    """``a @ b.T`` exactly, as int32 (M, N): ``a`` uint8 (M, K), ``b`` int8 (N, K), ``K <= MAX_K``.

    MKL's ``cblas_gemm_s8u8s32`` on MKL's road (see :func:`packrt_kernels_cpu.blas.provider`), numba's
    loop otherwise; the same integers either way. ``out``: an int32 C-contiguous (M, N) to fill."""
    _require(a, _U8, "a (activations)", "(rows, K)")
    _require(b, _S8, "b (weight)", "(out_features, K)")
    (m, k), n = a.shape, b.shape[0]
    if b.shape[1] != k:
        raise KernelShapeError(f"a is (rows, {k}) but b is {tuple(b.shape)}: b must be (out_features, {k})")
    if k > MAX_K:
        raise KernelShapeError(
            f"K={k} is over {MAX_K}, where int32 sums of uint8 x int8 products may wrap: cut K into chunks"
        )
    if out is None:
        out = np.empty((m, n), _I32)
    elif type(out) is not np.ndarray or out.dtype != _I32 or out.shape != (m, n) or not out.flags.c_contiguous:
        raise KernelShapeError(
            f"out must be a C-contiguous int32 numpy array of shape {(m, n)}, got "
            f"{getattr(out, 'dtype', type(out).__name__)} {tuple(getattr(out, 'shape', ()))}"
        )
    if out.size == 0:
        return out
    if k == 0:
        out[...] = 0
        return out
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    gemm = blas.gemm_s8u8s32()
    if gemm is None or m * n > _INT32_MAX:
        return _gemm_in_float(a, b, out)
    # Row-major out (M, N) is column-major (N, M): out^T = b @ a^T, with b (N, K) read transposed, as
    # MKL's signed operand A, and a (M, K) as its unsigned B.
    gemm(
        _COL_MAJOR, _TRANS, _NO_TRANS, _FIX_OFFSET, n, m, k, 1.0,
        b.ctypes.data, k, 0, a.ctypes.data, k, 0, 0.0, out.ctypes.data, n, _NO_OFFSET.ctypes.data,
    )  # fmt: skip
    return out


def _gemm_in_float(a: Array, b: Array, out: Array) -> Array:
    """``a @ b.T`` exactly, by float32 GEMMs over chunks of ``FLOAT_CHUNK`` columns of K: every partial
    sum is an integer below 2**24 in magnitude (512 * 255 * 128 < 2**24), which float32 holds exactly
    whatever order the BLAS adds in, so each chunk's product converts to int32 without error."""
    k = a.shape[1]
    part = np.empty(out.shape, _F32)
    for k0 in range(0, k, FLOAT_CHUNK):
        k1 = min(k0 + FLOAT_CHUNK, k)
        np.matmul(a[:, k0:k1].astype(_F32), b[:, k0:k1].astype(_F32).T, out=part)
        if k0 == 0:
            out[...] = part
        else:
            out += part.astype(_I32)
    return out


def linear(
    x: Array,
    q: Array,
    w_scale: Array,
    w_sum: Array,
    bias: Array | None,
    out: Array | None = None,
    panels: vnni.Panels | None = None,
) -> Array:
    """``x @ (q * w_scale)^T + bias`` through int8: float32 ``x`` (M, K), int8 ``q`` (N, K), float32
    ``w_scale`` (N,), ``w_sum = weight_sums(q)``, float32 ``bias`` (N,) or None; float32 (M, N) out
    (written into ``out``, a C-contiguous float32 (M, N), when given). ``panels``: ``q`` repacked by
    :func:`packrt_kernels_cpu.vnni.pack`, whose GEMM then multiplies (where :func:`vnni.available`).

    Each activation row is quantized (:func:`quantize_rows`), multiplied in int32, and its product
    turned back into float32 with the row's and the column's scales and the bias in one pass."""
    m, n = x.shape[0], q.shape[0]
    if out is None:
        out = np.empty((m, n), _F32)
    if out.size == 0:
        return out
    k = x.shape[1]
    b = bias if bias is not None else _NO_BIAS
    if k == 0:
        out[...] = 0.0 if bias is None else bias
        return out
    if panels is not None and k <= MAX_K and vnni.available():  # VNNI: the same integers, 4x float32's speed
        _require(x, _F32, "x", "(rows, in_features)")
        vnni.linear(np.ascontiguousarray(x), panels, w_scale, w_sum, b, out)  # quantized, multiplied, dequantized
        return out
    acc = np.empty((m, n), _I32)
    for k0 in range(0, k, MAX_K):  # one chunk for every layer short of 65536 inputs
        k1 = min(k0 + MAX_K, k)
        xs, qs = (x, q) if k1 - k0 == k else (x[:, k0:k1], q[:, k0:k1])
        sums = w_sum if k1 - k0 == k else weight_sums(qs)
        u, x_scale, x_zero = quantize_rows(xs)
        gemm_u8s8s32(u, qs, acc)
        _dequantize(acc, x_scale, x_zero, w_scale, sums, b, k0 > 0, out)
    return out


__all__ = ["MAX_K", "gemm_u8s8s32", "linear", "quantize_rows", "uses_vnni", "weight_sums"]
