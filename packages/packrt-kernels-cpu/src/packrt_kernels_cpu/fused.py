"""Fused float32 CPU kernels compiled with numba: one pass over the data, no temporaries.

The elementwise and row-wise kernels that dominate an encoder's forward outside its GEMMs
(exact and tanh GELU, SiLU, LayerNorm, RMSNorm, softmax) each run here as one compiled loop,
multi-threaded over rows with ``prange`` (capped by ``CpuBackend.set_num_threads``), instead
of a chain of numpy temporaries. They take C-contiguous float32 arrays; the numpy code in
:mod:`packrt_kernels_cpu.functional` stays the reference the tests compare against and the
path for every other dtype and namespace, and for machines where numba cannot load.

The compiled loops load on first use (:mod:`packrt_kernels_cpu.compiled`, which also says when the
road is off: ``PACKRT_NUMBA=0``, or numba missing); every function here assumes the caller checked
the matching ``handles``/``casts``/``rotates``/``transposes``/``binary_takes`` first.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from packrt_kernels_cpu import blas, compiled

Array = Any
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_CAST_MIN = 4096  # below this many elements the compiled call costs more than it saves


def _plain_f32(x: Array) -> bool:
    return type(x) is np.ndarray and x.dtype == _F32 and x.flags.c_contiguous


def handles(x: Array) -> bool:
    """Whether ``x`` can take the fused path (a C-contiguous float32 numpy array, path enabled)."""
    return _plain_f32(x) and compiled.enabled()


def handles_all(*arrays: Array | None) -> bool:
    """:func:`handles` of each of ``arrays`` (None ignored), the path asked about once: a decode step asks
    this for every kernel of every layer."""
    return all(x is None or _plain_f32(x) for x in arrays) and compiled.enabled()


def handles_bf16(x: Array) -> bool:
    """Whether ``x`` is a C-contiguous bfloat16 numpy array the fused kernels take as it is (bfloat16 in
    and out, computed in float32 tile by tile)."""
    return type(x) is np.ndarray and x.dtype == _BF16 and x.flags.c_contiguous and compiled.enabled()


def _bits(a: Array) -> Array:
    """A bfloat16 array's bits as uint16, flat (what the bfloat16 kernels read and write)."""
    return a.reshape(-1).view(np.uint16)


def casts(a: Array, dtype: np.dtype[Any]) -> bool:
    """Whether the fused path converts ``a`` to ``dtype`` (bfloat16 <-> float32, numpy, contiguous)."""
    pair = (a.dtype, dtype)
    return (
        (pair == (_BF16, _F32) or pair == (_F32, _BF16))
        and type(a) is np.ndarray
        and a.flags.c_contiguous
        and a.size >= _CAST_MIN
        and compiled.enabled()
    )


def cast(a: Array, dtype: np.dtype[Any]) -> Array:
    """``a.astype(dtype)`` for bfloat16 <-> float32 by bit arithmetic, which vectorises where ml_dtypes'
    per-element conversion does not; the same bits as ml_dtypes, rounding to nearest even."""
    if a.dtype == _BF16:
        out = np.empty(a.shape, _F32)
        compiled.kernels().cast_bits(True, a.reshape(-1).view(np.uint16), out.reshape(-1).view(np.uint32), 0, a.size)
    else:
        out = np.empty(a.shape, _BF16)
        compiled.kernels().cast_bits(False, a.reshape(-1).view(np.uint32), out.reshape(-1).view(np.uint16), 0, a.size)
    return out


def rotates(x: Array, cos: Array, sin: Array) -> bool:
    """Whether :func:`rotary` takes these: a 4-D float32 numpy ``x`` (B, H, T, D) of any strides (heads
    split off a projection are a transposed view) and C-contiguous float32 (T, D) tables."""
    if type(x) is not np.ndarray or x.ndim != 4 or x.dtype != _F32 or x.size == 0:
        return False
    for t in (cos, sin):
        if type(t) is not np.ndarray or t.dtype != _F32 or t.shape != x.shape[2:] or not t.flags.c_contiguous:
            return False
    return compiled.enabled()


def rotary(x: Array, cos: Array, sin: Array) -> Array:
    """``x * cos + rotate_half(x) * sin`` as a new C-contiguous array, in one pass (see :func:`rotates`)."""
    out = np.empty(x.shape, _F32)
    compiled.launch("rotary", x.size, x, cos, sin, out)
    return out


def transposes(w: Array, dtype: np.dtype[Any]) -> bool:
    """Whether :func:`transposed` takes ``w`` into ``dtype`` (2-D numpy, float32 or float64 kept,
    or bfloat16 kept or widened to float32, and large enough to be worth a compiled call)."""
    pairs = ((_F32, _F32), (_F64, _F64), (_BF16, _F32), (_BF16, _BF16))
    return (
        type(w) is np.ndarray
        and w.ndim == 2
        and (w.dtype, dtype) in pairs
        and w.size >= _CAST_MIN
        and compiled.enabled()
    )


def transposed(w: Array, dtype: np.dtype[Any]) -> Array:
    """A new C-contiguous ``w.T`` in ``dtype`` (what a linear pack keeps), copied tile by tile."""
    out = np.empty((w.shape[1], w.shape[0]), dtype)
    if w.dtype == _BF16:  # bit patterns: widened into float32's upper half, or copied as they are
        widen = out.dtype != _BF16
        compiled.launch("transpose", w.size, w.view(np.uint16), out.view(np.uint32 if widen else np.uint16), widen)
    else:
        compiled.launch("transpose", w.size, w, out, False)
    return out


def gelu(x: Array, approximate: str) -> Array:
    """GELU of a float32 (or bfloat16) array: ``x/2 * erfc(-x/sqrt 2)``, or the tanh form."""
    k = compiled.kernels()
    return _activation(k.GELU_TANH if approximate == "tanh" else k.GELU_ERF, x)


def _activation(op: int, x: Array) -> Array:
    """Elementwise kernel ``op`` of a float32 array, or of a bfloat16 one in one pass (bfloat16 out)."""
    out = np.empty_like(x)
    if x.dtype == _BF16:
        compiled.launch("activation_bf16", x.size, op, _bits(x), _bits(out))
    else:
        compiled.launch("activation", x.size, op, x.reshape(-1), out.reshape(-1))
    return out


def broadcast_rows(row: Array, rows: int) -> Array:
    """A new (rows, n) float32 array whose every row is ``row`` (n,), filled on the pool where large
    (numpy's broadcast copy runs on one core)."""
    out = np.empty((rows, int(row.shape[0])), _F32)
    compiled.launch("fill_rows", out.size, np.ascontiguousarray(row, _F32), out)
    return out


_BINARY_OPS = ("add", "subtract", "multiply")


def binary_takes(a: Any, b: Any) -> bool:
    """Whether :func:`binary` computes ``a op b``: two C-contiguous float32 numpy arrays of one shape,
    large enough for the pool (numpy's loop is as fast below that), the path enabled."""
    return (
        type(a) is np.ndarray
        and type(b) is np.ndarray
        and a.dtype == _F32
        and b.dtype == _F32
        and a.shape == b.shape
        and a.size >= compiled.PARALLEL_MIN
        and a.flags.c_contiguous
        and b.flags.c_contiguous
        and compiled.enabled()
    )


def binary(op: str, a: Array, b: Array) -> Array:
    """``numpy.<op>(a, b)`` for ``op`` add, subtract or multiply of arrays :func:`binary_takes` accepts,
    on the pool: the same bits (one IEEE operation an element)."""
    out = np.empty_like(a)
    k = compiled.kernels()
    code = (k.ADD, k.SUBTRACT, k.MULTIPLY)[_BINARY_OPS.index(op)]
    compiled.launch("binary", a.size, code, a.reshape(-1), b.reshape(-1), out.reshape(-1))
    return out


def relu(x: Array) -> Array:
    """``max(x, 0)`` of a float32 array, NaN kept (threaded where large: numpy's maximum runs on one
    core)."""
    out = np.empty_like(x)
    compiled.launch("activation", x.size, compiled.kernels().RELU, x.reshape(-1), out.reshape(-1))
    return out


def silu(x: Array) -> Array:
    """``x * sigmoid(x)`` of a float32 (or bfloat16) array."""
    return _activation(compiled.kernels().SILU, x)


def layer_norm(x: Array, width: int, w: Array | None, b: Array | None, eps: float) -> Array:
    """LayerNorm over the trailing ``width`` elements of each row (w, b float32 of that size, or None);
    a bfloat16 ``x`` gives bfloat16."""
    ones = np.ones(width, _F32) if w is None else w.reshape(-1)
    zeros = np.zeros(width, _F32) if b is None else b.reshape(-1)
    return _rows(compiled.kernels().LAYER_NORM, x, width, ones, zeros, eps)


def _rows(op: int, x: Array, width: int, w: Array, b: Array, eps: float) -> Array:
    """Row kernel ``op`` over rows of ``width`` of a float32 array, or of a bfloat16 one in one pass."""
    out = np.empty_like(x)
    if x.dtype == _BF16:
        args = (_bits(x).reshape(-1, width), w, b, np.float32(eps), _bits(out).reshape(-1, width))
        compiled.launch("rows_bf16", x.size, op, *args)
    else:
        compiled.launch("rows", x.size, op, x.reshape(-1, width), w, b, np.float32(eps), out.reshape(-1, width))
    return out


def rms_norm(x: Array, width: int, w: Array | None, eps: float) -> Array:
    """RMSNorm over the trailing ``width`` elements of each row; a bfloat16 ``x`` gives bfloat16."""
    ones = np.ones(width, _F32) if w is None else w.reshape(-1)
    return _rows(compiled.kernels().RMS_NORM, x, width, ones, ones, eps)


def softmax_last(x: Array) -> Array:
    """Softmax along the last axis (max-shifted; an all ``-inf`` row gives NaN, as numpy's path)."""
    out = np.empty_like(x)
    width = x.shape[-1]
    unused = np.empty(0, _F32)  # softmax takes no weights
    compiled.launch(
        "rows",
        x.size,
        compiled.kernels().SOFTMAX,
        x.reshape(-1, width),
        unused,
        unused,
        np.float32(0),
        out.reshape(-1, width),
    )
    return out


def softmax_in_place(x: Array) -> None:
    """Softmax along the last axis of a float32 C-contiguous ``x``, written over it: shift by the
    row max, a SIMD exp (``blas.exp``), divide by the row sum. A row that is all ``-inf`` becomes zeros
    (attention's rule for a query that may see no key), not NaN. The exp runs between two compiled
    passes, from Python, not inside numba's parallel region: MKL called inside an OpenMP region may
    start nested threads of its own."""
    rows = x.reshape(-1, x.shape[-1])
    k = compiled.kernels()
    compiled.launch("softmax_step", x.size, k.SHIFT, rows)
    blas.exp(rows, out=rows)  # MKL's vector exp where it loaded, else numpy's (both SIMD)
    compiled.launch("softmax_step", x.size, k.NORMALIZE, rows)
