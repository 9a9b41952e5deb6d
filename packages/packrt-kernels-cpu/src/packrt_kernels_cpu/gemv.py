"""One float32 row times a matrix (a batch-1 decode step's projections) on numba's pool.

OpenBLAS's GEMV runs on one core; spreading the weight's columns (or its row groups) over the pool is
what a decode step gains on two threads or more. The sums are grouped the same way whatever the thread
count, so the bits do not depend on it.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from packrt_kernels_cpu import compiled, threads

Array = Any
_F32 = np.dtype(np.float32)
_GEMV_MIN = 1 << 12  # weight elements below which numpy's call (less overhead) stays the road
_GEMV_PARALLEL_MIN = 1 << 16  # weight elements from which a GEMV spreads over the pool
_gemv_parts = threading.local()  # .buffer: this thread's partial sums of gemv (its own, not scratch_f32's)


def gemv_takes(x: Array, wt: Array, bias: Array | None) -> bool:
    """Whether :func:`gemv` computes ``x @ wt (+ bias)``: one float32 row ``x`` (1, K), ``wt`` (K, N) float32
    C-contiguous (a linear pack) or the transpose of a C-contiguous (N, K) weight, ``bias`` None or
    contiguous (N,) float32, the path enabled, and numba's pool holding two threads or more (on one
    thread OpenBLAS's GEMV is as fast and already there)."""
    if type(x) is not np.ndarray or type(wt) is not np.ndarray or x.dtype != _F32 or wt.dtype != _F32:
        return False
    if x.ndim != 2 or x.shape[0] != 1 or wt.ndim != 2 or x.shape[1] != wt.shape[0] or wt.size < _GEMV_MIN:
        return False
    if not (wt.flags.c_contiguous or wt.T.flags.c_contiguous) or threads.serial():
        return False
    if bias is not None and (type(bias) is not np.ndarray or bias.dtype != _F32 or bias.shape != (wt.shape[1],)):
        return False
    return compiled.enabled() and compiled.pool_size() > 1


def gemv(x: Array, wt: Array, bias: Array | None) -> Array:
    """``x @ wt (+ bias)`` as a (1, N) float32 array, for what :func:`gemv_takes` accepts. A pack's (K, N)
    layout sums fixed groups of 128 weight rows, then the groups in order; a transposed weight takes one
    dot product per output. Either way the bits do not depend on the thread count."""
    k = compiled.kernels()
    row = np.ascontiguousarray(x[0])
    b = np.empty(0, _F32) if bias is None else np.ascontiguousarray(bias)
    out = np.empty((1, wt.shape[1]), _F32)
    parallel = wt.size >= _GEMV_PARALLEL_MIN
    if wt.flags.c_contiguous:
        chunks = -(-wt.shape[0] // k.GEMV_ROWS)
        size = chunks * wt.shape[1]
        buffer = getattr(_gemv_parts, "buffer", None)
        if buffer is None or buffer.size < size:
            buffer = _gemv_parts.buffer = np.empty(size, _F32)
        parts = buffer[:size].reshape(chunks, wt.shape[1])
        (k.gemv_t if parallel else k.gemv_t_serial)(row, wt, b, parts, out[0])
    else:
        (k.gemv if parallel else k.gemv_serial)(row, wt.T, b, out[0])
    return out


__all__ = ["gemv", "gemv_takes"]
