"""The compiled loops of :mod:`packrt_kernels_cpu.q8_gemm`: a panel of 32 weight rows unpacked to bytes with
each block's scale and offset, and the GEMM that quantizes the rows of ``x`` to q8 and runs the VNNI tiles over
every panel (a run of panels per thread of the pool)."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from packrt_kernels_cpu._numba_blocks import Q4_1, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0, _q8_row
from packrt_kernels_cpu._numba_kernels import _serial, tasks, twins
from packrt_kernels_cpu._numba_tiles import call_tile
from packrt_kernels_cpu.block_tiles import Q8_BYTES as _Q8
from packrt_kernels_cpu.q8_gemm import PANEL_BLOCK, Q6K_BLOCK

Array = Any


# numba inlines these into the loop that calls them (LLVM would leave a call with eight array arguments per block)
_inline = numba.njit(inline="always", nogil=True, error_model="numpy")
_LOW = np.int64(0x0F0F0F0F)
_ONES = np.int64(0x01010101)
# a 4-bit field, one bit per byte, moved to bit 4 of its byte: Q5's fifth bits of 4 weights at once
_SPREAD = np.array([sum(((n >> t) & 1) << (8 * t + 4) for t in range(4)) for n in range(16)], np.int64)


@_inline
def _word(blocks: Array, r: int, at: int) -> Any:
    """The little-endian uint32 at byte ``at`` of weight row ``r`` (4 weights' bytes: one store to the panel).
    Rows are indexed, never sliced: a slice is a view whose reference count numba updates atomically."""
    return (
        np.int64(blocks[r, at])
        | (np.int64(blocks[r, at + 1]) << 8)
        | (np.int64(blocks[r, at + 2]) << 16)
        | (np.int64(blocks[r, at + 3]) << 24)
    )


@_inline
def _half(blocks: Array, r: int, at: int, half: Array) -> Any:
    """The fp16 at byte ``at`` of weight row ``r`` as float32."""
    return half[np.int64(blocks[r, at]) | (np.int64(blocks[r, at + 1]) << 8)]


@_serial
def unpack_panel(code: int, blocks: Array, first: int, half: Array, panel: Array) -> None:
    """Weight rows ``first`` to ``first + 32`` of ``blocks`` into ``panel`` (uint8, blocks of 32 inputs x
    :data:`PANEL_BLOCK` bytes): each block's bytes as ``vpdpbusd`` reads them, then its 32 s, then its 32 c.

    One loop body, no helper taking arrays: numba counts references to every array passed to a call, and
    those atomic updates cost more than the unpacking itself."""
    words, scales = panel.view(np.uint32), panel.view(np.float32)
    small = code <= Q5_1
    size = (34, 18, 20, 22, 24, 144, 176)[code]
    start = (2, 2, 4, 6, 8, 16, 48)[code]  # where the quants start in a block (K: in a super-block)
    fifth = code in (Q5_0, Q5_1)
    offset = np.float32((-128.0, -8.0, 0.0, -16.0, 0.0, 0.0, 0.0)[code])
    for b in range(panel.shape[0] // PANEL_BLOCK):  # a block's 1,280 bytes filled at once: they stay in L1
        base = b * (PANEL_BLOCK // 4)
        for j in range(32):
            r = first + j
            if small:
                at = b * size
                d = _half(blocks, r, at, half)
                if code == Q8_0:
                    for g in range(8):
                        words[base + 32 * g + j] = np.uint32(_word(blocks, r, at + 2 + 4 * g) ^ 0x80808080)
                else:
                    high = _word(blocks, r, at + (2 if code == Q5_0 else 4)) if fifth else np.int64(0)
                    for g in range(4):
                        packed = _word(blocks, r, at + start + 4 * g)
                        low, upper = packed & _LOW, (packed >> 4) & _LOW
                        if fifth:
                            low |= _SPREAD[(high >> (4 * g)) & 15]
                            upper |= _SPREAD[(high >> (4 * g + 16)) & 15]
                        words[base + 32 * g + j] = np.uint32(low)
                        words[base + 32 * (g + 4) + j] = np.uint32(upper)
                s = d
                c = _half(blocks, r, at + 2, half) if code in (Q4_1, Q5_1) else offset * d
            else:
                at, sub = (b >> 3) * size, b & 7
                shift, quants = 4 * (sub & 1), at + start + 32 * (sub >> 1)
                for g in range(8):
                    q = (_word(blocks, r, quants + 4 * g) >> shift) & _LOW
                    if code == Q5_K:
                        q |= ((_word(blocks, r, at + 16 + 4 * g) >> sub) & _ONES) << 4
                    words[base + 32 * g + j] = np.uint32(q)
                k = at + 4  # the 12 bytes of 6-bit scales and mins, as _numba_blocks._k_scale_min reads them
                if sub < 4:
                    sc, mn = np.int64(blocks[r, k + sub]) & 63, np.int64(blocks[r, k + sub + 4]) & 63
                else:
                    sc = (np.int64(blocks[r, k + sub + 4]) & 15) | ((np.int64(blocks[r, k + sub - 4]) >> 6) << 4)
                    mn = (np.int64(blocks[r, k + sub + 4]) >> 4) | ((np.int64(blocks[r, k + sub]) >> 6) << 4)
                s = _half(blocks, r, at, half) * np.float32(sc)
                c = -(_half(blocks, r, at + 2, half) * np.float32(mn))
            scales[base + 256 + j] = s
            scales[base + 288 + j] = c


_THREES = np.int64(0x03030303)
_BIT5 = np.int64(0x20202020)


@_serial
def unpack_q6k_panel(blocks: Array, first: int, half: Array, panel: Array) -> None:
    """Q6_K's weight rows ``first`` to ``first + 32`` into ``panel`` (uint8, blocks of 32 inputs x
    :data:`Q6K_BLOCK` bytes): each block's weights ``q - 32`` as signed bytes in ``vpdpbusd``'s order, the scales
    ``d * scale`` of its two halves, and ``c = -128 (s_lo sum_lo + s_hi sum_hi)`` (see q8_gemm)."""
    words, scales = panel.view(np.uint32), panel.view(np.float32)
    for b in range(panel.shape[0] // Q6K_BLOCK):
        base = b * (Q6K_BLOCK // 4)
        at, sub = (b >> 3) * 210, b & 7
        h, t = sub >> 2, sub & 3  # 128-weight half of the super-block, and which 32 of it
        low_at, high_at = at + 64 * h + 32 * (t & 1), at + 128 + 32 * h
        shift, high_shift = 4 * (t >> 1), 2 * t
        for j in range(32):
            r = first + j
            d = _half(blocks, r, at + 208, half)
            lo_sum, hi_sum = np.int64(0), np.int64(0)
            for g in range(8):
                low = (_word(blocks, r, low_at + 4 * g) >> shift) & _LOW
                q = low | (((_word(blocks, r, high_at + 4 * g) >> high_shift) & _THREES) << 4)
                four = ((q * _ONES) >> 24) & 255  # the 4 bytes' sum (at most 4 * 63)
                if g < 4:
                    lo_sum += four
                else:
                    hi_sum += four
                # q - 32 as a signed byte: q ^ 0x20 where bit 5 is set, q ^ 0xE0 where it is not
                bit5 = q & _BIT5
                words[base + 32 * g + j] = np.uint32(q ^ 0xE0E0E0E0 ^ (bit5 << 1) ^ (bit5 << 2))
            s_lo = d * np.float32((np.int64(blocks[r, at + 192 + 2 * sub]) ^ 128) - 128)
            s_hi = d * np.float32((np.int64(blocks[r, at + 193 + 2 * sub]) ^ 128) - 128)
            scales[base + 256 + j] = s_lo
            scales[base + 288 + j] = s_hi
            low_part, high_part = s_lo * np.float32(lo_sum - 512), s_hi * np.float32(hi_sum - 512)
            scales[base + 320 + j] = np.float32(-128.0) * (low_part + high_part)


@_serial
def _gemm_span(
    code: int, x8: Array, blocks: Array, half: Array, full: int, one: int, out: Array, lo: int, hi: int
) -> None:
    """Output columns ``32 lo`` to ``32 hi``: each panel unpacked once, then multiplied by every q8 row."""
    nb = x8.shape[1] // _Q8
    panel = np.empty(nb * (Q6K_BLOCK if code == Q6_K else PANEL_BLOCK), np.uint8)
    rows = x8.shape[0]
    so, sx, x = out.strides[0], x8.strides[0], x8.ctypes.data
    ldo = so // 4
    for p in range(lo, hi):
        if code == Q6_K:
            unpack_q6k_panel(blocks, 32 * p, half, panel)
        else:
            unpack_panel(code, blocks, 32 * p, half, panel)
        o, w = out.ctypes.data + 128 * p, panel.ctypes.data
        r = 0
        while r + 4 <= rows:
            call_tile(full, o + r * so, ldo, x + r * sx, sx, w, nb)
            r += 4
        while r < rows:
            call_tile(one, o + r * so, ldo, x + r * sx, sx, w, nb)
            r += 1


def _q8_gemm(x: Array, blocks: Array, code: int, half: Array, full: int, one: int, out: Array) -> None:
    """``out`` (M, N) float32 = ``x`` (M, K) float32, quantized to q8 rows, times the weight rows ``blocks``
    (N, row bytes) hold; N a multiple of 32, K of the format's block."""
    x8 = np.empty((x.shape[0], x.shape[1] // 32 * _Q8), np.uint8)
    for i in range(x.shape[0]):
        _q8_row(x[i], x8[i])
    count = blocks.shape[0] // 32
    split = tasks(count)
    for t in numba.prange(split):
        _gemm_span(code, x8, blocks, half, full, one, out, count * t // split, count * (t + 1) // split)


q8_gemm, q8_gemm_serial = twins(_q8_gemm)
