"""The compiled loops behind :mod:`packrt_kernels_cpu.fused` (the only module that imports numba).

Each takes C-contiguous float32 arrays and writes ``out``; rows run in parallel (``prange``).
Row reductions (means, variances, sums of exponentials) accumulate in float64, so a wide row
keeps the accuracy numpy's pairwise float32 sums have; everything else stays float32.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np

Array = Any


def get_num_threads() -> int:
    """The pool size parallel regions launched from this thread use now."""
    return int(numba.get_num_threads())


def set_num_threads(n: int) -> None:
    """Cap the pool for parallel regions this thread launches (numba's own maximum is the core count)."""
    limit = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
    numba.set_num_threads(max(1, min(int(n), int(limit))))


_jit = numba.njit(parallel=True, cache=True, fastmath=False, nogil=True)
_INV_SQRT2 = np.float32(1.0 / math.sqrt(2.0))
_TANH_SCALE = np.float32(math.sqrt(2.0 / math.pi))
_CUBIC = np.float32(0.044715)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)


@_jit
def gelu_erf(x: Array, out: Array) -> None:
    for i in numba.prange(x.shape[0]):
        v = x[i]
        out[i] = _HALF * v * math.erfc(-v * _INV_SQRT2)


@_jit
def gelu_tanh(x: Array, out: Array) -> None:
    for i in numba.prange(x.shape[0]):
        v = x[i]
        out[i] = _HALF * v * (_ONE + math.tanh(_TANH_SCALE * (v + _CUBIC * v * v * v)))


@_jit
def silu(x: Array, out: Array) -> None:
    for i in numba.prange(x.shape[0]):
        v = x[i]
        out[i] = v / (_ONE + math.exp(-v))


@_jit
def layer_norm(x: Array, w: Array, b: Array, eps: np.float32, out: Array) -> None:
    rows, width = x.shape
    for r in numba.prange(rows):
        total = 0.0
        for j in range(width):
            total += x[r, j]
        mean = np.float32(total / width)
        squares = 0.0
        for j in range(width):
            d = x[r, j] - mean
            squares += d * d
        scale = np.float32(1.0 / math.sqrt(squares / width + eps))
        for j in range(width):
            out[r, j] = (x[r, j] - mean) * scale * w[j] + b[j]


@_jit
def rms_norm(x: Array, w: Array, eps: np.float32, out: Array) -> None:
    rows, width = x.shape
    for r in numba.prange(rows):
        squares = 0.0
        for j in range(width):
            squares += x[r, j] * x[r, j]
        scale = np.float32(1.0 / math.sqrt(squares / width + eps))
        for j in range(width):
            out[r, j] = x[r, j] * scale * w[j]


@_jit
def softmax(x: Array, out: Array) -> None:
    rows, width = x.shape
    for r in numba.prange(rows):
        top = x[r, 0]
        for j in range(1, width):
            top = max(top, x[r, j])
        total = 0.0
        for j in range(width):
            e = math.exp(x[r, j] - top)
            out[r, j] = e
            total += e
        inv = np.float32(1.0 / total)
        for j in range(width):
            out[r, j] *= inv


@_jit
def bf16_bits_to_f32_bits(src: Array, out: Array) -> None:
    """bfloat16 is the top half of a float32: widening is a shift (exact)."""
    for i in numba.prange(src.shape[0]):
        out[i] = np.uint32(src[i]) << np.uint32(16)


@_jit
def f32_bits_to_bf16_bits(src: Array, out: Array) -> None:
    """Narrowing rounds to nearest, ties to even (as ml_dtypes does); NaN stays a quiet NaN."""
    for i in numba.prange(src.shape[0]):
        bits = src[i]
        if (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
            out[i] = np.uint16((bits >> np.uint32(16)) | np.uint32(0x0040))
        else:
            lsb = (bits >> np.uint32(16)) & np.uint32(1)
            out[i] = np.uint16((bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16))


@_jit
def im2col(x: Array, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, top: int, left: int, out: Array) -> None:
    """Columns ``out`` (N, C, kh, kw, OH, OW) of ``x`` (N, C, H, W), zero where a tap reads padding:
    no padded copy of the input is ever made; (image, channel) pairs run in parallel. (Working out
    the valid column range per tap instead of testing each column measured slower.)"""
    n, c, h, w = x.shape
    oh, ow = out.shape[4], out.shape[5]
    for nc in numba.prange(n * c):
        b, ch = nc // c, nc % c
        for i in range(kh):
            for j in range(kw):
                for r in range(oh):
                    src_r = r * sh + i * dh - top
                    if src_r < 0 or src_r >= h:
                        for q in range(ow):
                            out[b, ch, i, j, r, q] = 0
                        continue
                    for q in range(ow):
                        src_q = q * sw + j * dw - left
                        out[b, ch, i, j, r, q] = x[b, ch, src_r, src_q] if 0 <= src_q < w else 0


@_jit
def transpose(src: Array, out: Array) -> None:
    """``out = src.T`` copied in 32x32 tiles, so reads and writes both stay in cache (numpy's
    strided copy of a transposed view measured about half the speed); tiles run in parallel."""
    rows, cols = src.shape
    tile = 32
    tiles_j = (cols + tile - 1) // tile
    for t in numba.prange(((rows + tile - 1) // tile) * tiles_j):
        i0, j0 = (t // tiles_j) * tile, (t % tiles_j) * tile
        for i in range(i0, min(i0 + tile, rows)):
            for j in range(j0, min(j0 + tile, cols)):
                out[j, i] = src[i, j]


@_jit
def transpose_bf16_bits_to_f32_bits(src: Array, out: Array) -> None:
    """:func:`transpose` of a bfloat16 matrix (as uint16 bits) into float32 (as uint32 bits)."""
    rows, cols = src.shape
    tile = 32
    tiles_j = (cols + tile - 1) // tile
    for t in numba.prange(((rows + tile - 1) // tile) * tiles_j):
        i0, j0 = (t // tiles_j) * tile, (t % tiles_j) * tile
        for i in range(i0, min(i0 + tile, rows)):
            for j in range(j0, min(j0 + tile, cols)):
                out[j, i] = np.uint32(src[i, j]) << np.uint32(16)
