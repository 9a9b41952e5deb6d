"""GEMM through the fastest BLAS this process can load: oneMKL's CBLAS when the ``mkl`` wheel is
installed (``pip install packrt-kernels-cpu[mkl]``), numpy's ``matmul`` (the OpenBLAS numpy ships)
otherwise.

Why a second road: at an encoder's shapes (1024 rows, 384-3072 wide) OpenBLAS's float32 GEMM is
slower than MKL's on Intel CPUs, and it has no bfloat16 GEMM at all, where MKL's
``cblas_gemm_bf16bf16f32`` multiplies bfloat16 operands into float32 (on AMX where the CPU has it).
docs/benchmarks.md gives the measured ratios. With MKL a bias is added by the GEMM itself: the
output starts as the bias broadcast and the product accumulates onto it (``beta = 1``), the pass
a separate ``out += b`` would make over the output is gone.

The road is the settings' (``PACKRT_BLAS``, :mod:`packrt_kernels_cpu.settings`), decided once, on
first use (:mod:`packrt_kernels_cpu.mkl`). Whatever the road, the rules are numpy's: the same shapes,
dtypes and results up to float rounding (the sum order differs).
"""

from __future__ import annotations

import os
from typing import Any

import ml_dtypes
import numpy as np

from packrt_kernels_cpu import mkl, settings, threads
from packrt_kernels_cpu.errors import KernelShapeError

Array = Any

_BF16 = np.dtype(ml_dtypes.bfloat16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112  # CBLAS_LAYOUT / CBLAS_TRANSPOSE values
_INT32_MAX = 2**31 - 1
_VML_MIN = 1 << 14  # below this many elements numpy's exp wins: MKL's call has a larger fixed cost
_VML_LA = 0x1  # vector math accuracy mode "low accuracy": within 4 ulp
_SMALL_FLOP = 1 << 24  # a product below this many flops runs on one MKL thread (see matmul)


def provider() -> str:
    """``"mkl"`` or ``"numpy"``: the road GEMMs take in this process."""
    return "mkl" if mkl.handle() is not None else "numpy"


_CORES = os.cpu_count() or 1


def num_threads() -> int:
    """The thread cap ``set_num_threads`` last set (the machine's core count before any)."""
    return settings.current().threads or _CORES


def multiplies(dtype: np.dtype[Any]) -> bool:
    """Whether :func:`matmul` takes operands of ``dtype`` as they are: float32 and float64 always,
    bfloat16 where MKL's bfloat16 GEMM loaded (products exact in float32, the result float32)."""
    dt = np.dtype(dtype)
    if dt == _BF16:
        library = mkl.handle()
        return library is not None and library.bf16gemm is not None
    return dt in (_F32, _F64)


def _operand(a: Array) -> tuple[int, int] | None:
    """(CBLAS transpose flag, leading dimension) for the trailing matrices of a numpy operand that MKL
    reads in place: rows or columns evenly strided (a transposed or row-sliced view included), or None."""
    rows, cols = a.shape[-2:]
    size = a.itemsize
    row_step = a.strides[-2] if rows > 1 else cols * size  # a length-1 axis's stride means nothing
    col_step = a.strides[-1] if cols > 1 else size
    if col_step == size and row_step % size == 0 and row_step // size >= max(1, cols):
        return _NO_TRANS, max(1, row_step // size)
    if row_step == size and col_step % size == 0 and col_step // size >= max(1, rows):
        return _TRANS, max(1, col_step // size)
    return None


def _batch_step(a: Array) -> int | None:
    """Elements between one matrix of a stack and the next along its last batch axis (None if uneven)."""
    if a.ndim == 2 or a.shape[-3] == 1:
        return 0
    step = a.strides[-3]
    return step // a.itemsize if step >= 0 and step % a.itemsize == 0 else None


def matmul(
    a: Array,
    b: Array,
    bias: Array | None = None,
    *,
    alpha: float = 1.0,
    out: Array | None = None,
    accumulate: bool = False,
) -> Array:
    """``a @ b (+ bias)`` with numpy's rules for ``a`` (..., M, K) and ``b`` (..., K, N) of one float dtype
    (batch axes broadcast), ``bias`` broadcastable to the result, in its dtype. float32/float64 give their
    own dtype; bfloat16 operands (see :func:`multiplies`) give float32. Matrices whose rows or columns are
    evenly strided (transposed views, heads sliced out of a wider array) are read in place. ``alpha``
    scales the product (not the bias): MKL applies it inside the GEMM. The result is a new C-contiguous
    array, or ``out`` (the result's shape and dtype; rows may be strided, as in a slice of a wider array).
    ``accumulate=True`` adds the product onto what ``out`` holds (a bias laid out there already, say)."""
    if accumulate and (out is None or bias is not None):
        raise KernelShapeError("matmul(accumulate=True) adds onto out: pass out=, and no bias (lay it out in out)")
    plan = _plan(a, b, out)
    if plan is None:
        if accumulate:
            out += _numpy_matmul(a, b, None, alpha, None)
            return out
        return _numpy_matmul(a, b, bias, alpha, out)
    library, gemm, a, b, out, fa, fb, fo = plan
    beta = 1.0 if accumulate else 0.0
    if bias is not None:
        out[...] = bias  # the GEMM accumulates onto the bias: no second pass over out
        beta = 1.0
    # Below about 16 MFLOP one thread finishes first: waking a passive pool's workers costs more than
    # splitting the product saves.
    # (Inside threads.on_this_thread every GEMM of the thread is on one MKL thread already.)
    small = not threads.serial() and num_threads() > 1 and 2 * a.shape[-1] * out.size < _SMALL_FLOP
    if small:
        library.set_local_threads(1)
    try:
        _gemms(library, gemm, a, b, out, (alpha, beta), (fa, fb, fo))
    finally:
        if small:
            library.set_local_threads(0)
    return out


_Layout = tuple[int, int, int]  # (CBLAS transpose flag, leading dimension, elements between batch matrices)


def _plan(a: Array, b: Array, out: Array | None) -> tuple[Any, ...] | None:
    """How MKL computes ``a @ b`` into ``out`` (allocated here when None): the handle, the GEMM, the
    operands broadcast to one batch shape and each one's layout; None where numpy's matmul must.
    (Called for every GEMM, conv2d's many small ones too: the checks stay cheap.)"""
    library = _library_for(a, b, out)
    if library is None:
        return None
    if (a.ndim > 2 or b.ndim > 2) and a.shape[:-2] != b.shape[:-2]:  # batch axes broadcast as numpy's do:
        try:  # a repeated matrix gets stride 0
            batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            return None  # numpy raises its own error
        a, b = np.broadcast_to(a, (*batch, *a.shape[-2:])), np.broadcast_to(b, (*batch, *b.shape[-2:]))
    gemm = library.gemm_for(a.dtype)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    dtype = _F64 if a.dtype == _F64 else _F32
    if out is None:
        out = np.empty((*a.shape[:-2], m, n), dtype)
    elif out.shape != (*a.shape[:-2], m, n) or out.dtype != dtype:
        return None  # numpy's matmul accepts or refuses this out
    fa, fb, fo = _layout(a), _layout(b), _layout(out)
    if gemm is None or fa is None or fb is None or fo is None or fo[0] != _NO_TRANS:
        return None  # an output MKL would have to write transposed: numpy's
    if m * n > _INT32_MAX or max(k, fa[1], fa[2], fb[1], fb[2], fo[1], fo[2]) > _INT32_MAX:
        return None
    return (library, gemm, a, b, out, fa, fb, fo)


def _library_for(a: Array, b: Array, out: Array | None) -> mkl.Mkl | None:
    """MKL's handle when these operands are ones it may take (plain numpy matrices of one dtype,
    not empty, ``a`` more than one row), else None."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or (out is not None and type(out) is not np.ndarray):
        return None
    if a.ndim < 2 or b.ndim < 2 or (a.shape[-2] == 1 and a.dtype != _BF16):
        return None  # a row times a matrix (batch-1 decode): OpenBLAS's GEMV streams faster, numpy's road
    if a.dtype != b.dtype or a.size == 0 or b.size == 0:
        return None
    return mkl.handle()


def _layout(a: Array) -> _Layout | None:
    """(CBLAS transpose flag, leading dimension, batch step) for a numpy operand's matrices, or None."""
    flag, step = _operand(a), _batch_step(a)
    return None if flag is None or step is None else (*flag, step)


def _gemms(
    library: mkl.Mkl,
    gemm: Any,
    a: Array,
    b: Array,
    out: Array,
    scalars: tuple[float, float],
    layouts: tuple[_Layout, ...],
) -> None:
    """The CBLAS calls of one (batched) product into ``out``, which already holds the bias if any."""
    (ta, lda, sa), (tb, ldb, sb), (_, ldc, sc) = layouts
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    sc = sc or ldc * m  # a stack of one: MKL still wants the output's step to clear a whole matrix
    alpha, beta = scalars
    if a.ndim == 2:
        gemm(_ROW_MAJOR, ta, tb, m, n, k, alpha, a.ctypes.data, lda, b.ctypes.data, ldb, beta, out.ctypes.data, ldc)
        return
    count = a.shape[-3]
    # MKL's strided batch refuses output matrices closer than one whole matrix apart (stride_c < ldc * m),
    # as attention's heads are when written merged, (seq, heads * dim): those take a call per matrix.
    batch = library.sgemm_batch if a.dtype == _F32 and sc >= ldc * m else None
    if a.ndim == 3 and batch is not None:  # one stack (a conv band's, attention's)
        pa, pb, po = a.ctypes.data, b.ctypes.data, out.ctypes.data
        batch(_ROW_MAJOR, ta, tb, m, n, k, alpha, pa, lda, sa, pb, ldb, sb, beta, po, ldc, sc, count)
        return
    for outer in np.ndindex(*a.shape[:-3]):  # the batch axes before the last: a call each
        pa, pb, po = (x.ctypes.data + sum(i * st for i, st in zip(outer, x.strides, strict=False)) for x in (a, b, out))
        if batch is not None:
            batch(_ROW_MAJOR, ta, tb, m, n, k, alpha, pa, lda, sa, pb, ldb, sb, beta, po, ldc, sc, count)
            continue
        for j in range(count):
            at, bt, ot = (
                x + j * st * x_size
                for x, st, x_size in ((pa, sa, a.itemsize), (pb, sb, b.itemsize), (po, sc, out.itemsize))
            )
            gemm(_ROW_MAJOR, ta, tb, m, n, k, alpha, at, lda, bt, ldb, beta, ot, ldc)


def sgemm_batch() -> Any | None:
    """MKL's ``cblas_sgemm_batch_strided`` as a ctypes function that compiled code may call (numba takes
    it as an argument; pointers are ``array.ctypes``), or None where :func:`mkl.batch_handle` gives no
    MKL or before MKL 2020. A compiled loop of many GEMMs calls it without coming back to Python (and the
    GIL) between them."""
    library = mkl.batch_handle()
    return None if library is None else library.sgemm_batch


def gemm_s8u8s32() -> Any | None:
    """MKL's ``cblas_gemm_s8u8s32`` as a ctypes function (the arguments as oneMKL documents them), or None
    off MKL's road or where this MKL lacks it. :mod:`packrt_kernels_cpu.int8` calls it."""
    library = mkl.handle()
    return None if library is None else library.s8u8s32


def _numpy_matmul(a: Array, b: Array, bias: Array | None, alpha: float, out: Array | None) -> Array:
    if a.dtype == _BF16:  # numpy's BLAS has no bfloat16 GEMM: multiply the float32 widening
        a, b = a.astype(_F32), b.astype(_F32)
    result = a @ b if out is None else np.matmul(a, b, out=out)
    if alpha != 1.0:
        result *= result.dtype.type(alpha)
    if bias is not None:
        result += bias
    return result


def exp(x: Array, out: Array) -> Array:
    """``numpy.exp(x, out=out)``; for large C-contiguous float32 numpy arrays on MKL's road, MKL's vector exp
    (threaded and vectorised; MKL's low-accuracy mode, within 4 ulp)."""
    library = mkl.handle() if type(x) is np.ndarray and type(out) is np.ndarray else None
    fits = x.dtype == _F32 and out.dtype == _F32 and x.shape == out.shape and _VML_MIN <= x.size <= _INT32_MAX
    if library is None or library.vexp is None or not (fits and x.flags.c_contiguous and out.flags.c_contiguous):
        return np.exp(x, out=out)
    library.vexp(x.size, x.ctypes.data, out.ctypes.data, _VML_LA)
    return out


__all__ = ["exp", "gemm_s8u8s32", "matmul", "multiplies", "num_threads", "provider", "sgemm_batch"]
