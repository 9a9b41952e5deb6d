"""The compiled loops of :mod:`packrt_kernels_cpu.blocks`: one weight row of quantized blocks dequantized into
float32 (each format as its numpy reference computes it, so both give the same bits), and the row loop that
serves a few input rows from the blocks.

A format is a number (:data:`packrt_kernels_cpu.blocks.CODES`: the order of
:data:`packrt_base.blocks.BLOCK_FORMATS`); the fp16 scales are read through a 65,536-entry float32 table
(``half``), which is exact and cheaper than converting the bits in the loop.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from packrt_kernels_cpu._numba_kernels import _serial, tasks, twins
from packrt_kernels_cpu._numba_plan import _float_panels
from packrt_kernels_cpu._numba_tiles import call_tile

Array = Any
Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K = range(8)
# Dot products may sum in any order (so they vectorise); the dequantized weights do not depend on it.
_dotting = numba.njit(cache=True, fastmath={"nnan", "nsz", "reassoc", "contract"}, nogil=True, error_model="numpy")


@_serial
def _scale(row: Array, at: int, half: Array) -> Any:
    """The fp16 at byte ``at`` of ``row`` as float32."""
    return half[np.int64(row[at]) | (np.int64(row[at + 1]) << 8)]


@_serial
def _k_scale_min(scales: Array, j: int) -> tuple[Any, Any]:
    """Q4_K / Q5_K: sub-block ``j``'s six-bit scale and min from the 12 packed bytes."""
    if j < 4:
        return np.int64(scales[j]) & 63, np.int64(scales[j + 4]) & 63
    sc = (np.int64(scales[j + 4]) & 15) | ((np.int64(scales[j - 4]) >> 6) << 4)
    mn = (np.int64(scales[j + 4]) >> 4) | ((np.int64(scales[j]) >> 6) << 4)
    return sc, mn


@_serial
def _small_blocks(code: int, row: Array, half: Array, out: Array) -> None:
    """The 32-weight formats: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1."""
    size = (34, 18, 20, 22, 24)[code]
    for b in range(out.shape[0] // 32):
        at, o = b * size, b * 32
        d = _scale(row, at, half)
        if code == Q8_0:
            for i in range(32):
                out[o + i] = d * np.float32((np.int64(row[at + 2 + i]) ^ 128) - 128)
            continue
        m = _scale(row, at + 2, half) if code in (Q4_1, Q5_1) else np.float32(0)
        high = np.int64(0)
        start = at + (2 if code == Q4_0 else 4 if code == Q4_1 else 6 if code == Q5_0 else 8)
        if code in (Q5_0, Q5_1):
            h = at + (2 if code == Q5_0 else 4)
            high = np.int64(row[h]) | (np.int64(row[h + 1]) << 8) | (np.int64(row[h + 2]) << 16)
            high |= np.int64(row[h + 3]) << 24
        shift = 8 if code == Q4_0 else 16 if code == Q5_0 else 0
        for i in range(16):
            byte = np.int64(row[start + i])
            lo, hi = byte & 15, byte >> 4
            if code in (Q5_0, Q5_1):
                lo |= ((high >> i) & 1) << 4
                hi |= ((high >> (i + 16)) & 1) << 4
            if code in (Q4_1, Q5_1):
                out[o + i] = d * np.float32(lo) + m
                out[o + i + 16] = d * np.float32(hi) + m
            else:
                out[o + i] = d * np.float32(lo - shift)
                out[o + i + 16] = d * np.float32(hi - shift)


@_serial
def _k_blocks(code: int, row: Array, half: Array, out: Array) -> None:
    """Q4_K and Q5_K: super-blocks of 256 in 8 sub-blocks of 32, each ``d * scale * q - dmin * min``."""
    size = 144 if code == Q4_K else 176
    quants = 16 if code == Q4_K else 48
    for b in range(out.shape[0] // 256):
        at, o = b * size, b * 256
        d, dmin = _scale(row, at, half), _scale(row, at + 2, half)
        scales = row[at + 4 : at + 16]
        for c in range(4):
            sc1, m1 = _k_scale_min(scales, 2 * c)
            sc2, m2 = _k_scale_min(scales, 2 * c + 1)
            d1, o1 = d * np.float32(sc1), dmin * np.float32(m1)
            d2, o2 = d * np.float32(sc2), dmin * np.float32(m2)
            for i in range(32):
                byte = np.int64(row[at + quants + 32 * c + i])
                lo, hi = byte & 15, byte >> 4
                if code == Q5_K:
                    bits = np.int64(row[at + 16 + i])
                    lo += ((bits >> (2 * c)) & 1) << 4
                    hi += ((bits >> (2 * c + 1)) & 1) << 4
                out[o + 64 * c + i] = d1 * np.float32(lo) - o1
                out[o + 64 * c + 32 + i] = d2 * np.float32(hi) - o2


@_serial
def _q6_k_blocks(row: Array, half: Array, out: Array) -> None:
    """Q6_K: 256 weights of 4 + 2 bits, one int8 scale per 16, ``d * scale * (q - 32)``."""
    for b in range(out.shape[0] // 256):
        at, o = b * 210, b * 256
        d = _scale(row, at + 208, half)
        for h in range(2):
            ql, qh, base = at + 64 * h, at + 128 + 32 * h, o + 128 * h
            for i in range(32):
                low1, low2, high = np.int64(row[ql + i]), np.int64(row[ql + 32 + i]), np.int64(row[qh + i])
                qs = (
                    ((low1 & 15) | ((high & 3) << 4)) - 32,
                    ((low2 & 15) | (((high >> 2) & 3) << 4)) - 32,
                    ((low1 >> 4) | (((high >> 4) & 3) << 4)) - 32,
                    ((low2 >> 4) | (((high >> 6) & 3) << 4)) - 32,
                )
                for t in range(4):
                    v = base + 32 * t + i
                    sc = (np.int64(row[at + 192 + (v - o) // 16]) ^ 128) - 128
                    out[v] = (d * np.float32(sc)) * np.float32(qs[t])


@_serial
def dequantize_row(code: int, row: Array, half: Array, out: Array) -> None:
    """``out`` (in_features,) float32 = the weights of one row of blocks of format ``code``."""
    if code <= Q5_1:
        _small_blocks(code, row, half, out)
    elif code <= Q5_K:
        _k_blocks(code, row, half, out)
    else:
        _q6_k_blocks(row, half, out)


@_dotting
def _dot(a: Array, b: Array) -> np.float32:
    s = np.float32(0)
    for t in range(a.shape[0]):
        s += a[t] * b[t]
    return s


@_serial
def _dequantize_span(blocks: Array, code: int, half: Array, out: Array, lo: int, hi: int) -> None:
    for r in range(lo, hi):
        dequantize_row(code, blocks[r], half, out[r])


def _dequantize_rows(blocks: Array, code: int, half: Array, out: Array) -> None:
    """``out`` (rows, in) float32 = the weights ``blocks`` (rows, row bytes) hold."""
    units = blocks.shape[0]
    split = tasks(units)
    for t in numba.prange(split):
        _dequantize_span(blocks, code, half, out, units * t // split, units * (t + 1) // split)


dequantize_rows, dequantize_rows_serial = twins(_dequantize_rows)

_TILE_PANELS = 4  # weight panels of 32 rows dequantized at a time by one thread of the tile GEMM


@_serial
def _panel_span(tiles: Array, x: Array, blocks: Array, code: int, half: Array, out: Array, lo: int, hi: int) -> None:
    """Columns ``32 lo`` to ``32 hi`` of ``out = x @ W^T``: the blocks' rows dequantized straight into the
    float32 tiles' panel layout, a few panels at a time (they stay in L2), then multiplied by the tiles."""
    panels = np.empty((_TILE_PANELS, x.shape[1], 32), np.float32)
    for first in range(lo, hi, _TILE_PANELS):
        last = min(hi, first + _TILE_PANELS)
        for p in range(first, last):
            for j in range(32):  # row j of the panel is its column j: written 128 bytes apart
                dequantize_row(code, blocks[32 * p + j], half, panels[p - first, :, j])
        _float_panels(tiles, out[:, 32 * first : 32 * last], x, panels, 0, last - first)


def _block_tiles(tiles: Array, x: Array, blocks: Array, code: int, half: Array, out: Array, threads: int) -> None:
    """``out`` (M, N) = ``x`` (M, K) times the weight rows ``blocks`` (N, row bytes) hold, N a multiple of 32:
    one run of panels per thread (as the float32 panel GEMM), each dequantized as it is multiplied."""
    count = blocks.shape[0] // 32
    chunks = tasks(min(threads, count))
    for c in numba.prange(chunks):
        _panel_span(tiles, x, blocks, code, half, out, count * c // chunks, count * (c + 1) // chunks)


block_tiles, block_tiles_serial = twins(_block_tiles)


# The fused dots keep one partial sum per lane of a block (``acc``) and fold each block's scale into its
# products, so no block ends in a horizontal sum: the lanes are added once, at the end of the row. Nibbles and
# 2-bit fields are split in float32 (``floor``), because numba widens integer arithmetic to 64 bits, which AVX2
# cannot convert to float in vector registers.


@_dotting
def _split(byte: np.float32, parts: float) -> tuple[np.float32, np.float32]:
    """(byte mod ``parts``, byte // ``parts``) of a byte held in float32."""
    high = np.floor(byte * np.float32(1.0 / parts))
    return byte - np.float32(parts) * high, high


@_dotting
def _lanes(acc: Array) -> np.float32:
    s = np.float32(0)
    for i in range(acc.shape[0]):
        s += acc[i]
    return s


@_dotting
def _dot_q8_0(row: Array, x: Array, half: Array, acc: Array) -> np.float32:
    signed = row.view(np.int8)
    acc[:] = 0
    for b in range(x.shape[0] // 32):
        at, o = 34 * b, 32 * b
        d = _scale(row, at, half)
        for i in range(32):
            acc[i] += (d * np.float32(signed[at + 2 + i])) * x[o + i]
    return _lanes(acc)


@_dotting
def _dot_q4(row: Array, x: Array, sums: Array, half: Array, acc: Array, offset: bool) -> np.float32:
    """Q4_0 (``offset``: 18-byte blocks, each quant less 8) and Q4_1 (20 bytes, a min each); the 8 or the min
    applied through the input's block sums."""
    acc[:] = 0
    tail = np.float32(0)
    size, start = (18, 2) if offset else (20, 4)
    for b in range(x.shape[0] // 32):
        at, o = size * b, 32 * b
        d = _scale(row, at, half)
        for i in range(16):
            lo, hi = _split(np.float32(row[at + start + i]), 16.0)
            acc[i] += (d * lo) * x[o + i]
            acc[16 + i] += (d * hi) * x[o + 16 + i]
        tail += (np.float32(-8) * d if offset else _scale(row, at + 2, half)) * sums[b]
    return _lanes(acc) + tail


@_dotting
def _dot_q4_k(row: Array, x: Array, sums: Array, half: Array, acc: Array) -> np.float32:
    acc[:] = 0
    tail = np.float32(0)
    for b in range(x.shape[0] // 256):
        at, o = 144 * b, 256 * b
        d, dmin = _scale(row, at, half), _scale(row, at + 2, half)
        scales = row[at + 4 : at + 16]
        for c in range(4):
            sc1, m1 = _k_scale_min(scales, 2 * c)
            sc2, m2 = _k_scale_min(scales, 2 * c + 1)
            d1, d2 = d * np.float32(sc1), d * np.float32(sc2)
            for i in range(32):
                lo, hi = _split(np.float32(row[at + 16 + 32 * c + i]), 16.0)
                acc[i] += (d1 * lo) * x[o + 64 * c + i]
                acc[32 + i] += (d2 * hi) * x[o + 64 * c + 32 + i]
            tail -= dmin * (np.float32(m1) * sums[8 * b + 2 * c] + np.float32(m2) * sums[8 * b + 2 * c + 1])
    return _lanes(acc) + tail


@_dotting
def _dot_q6_k(row: Array, x: Array, half: Array, acc: Array) -> np.float32:
    signed = row.view(np.int8)
    acc[:] = 0
    for b in range(x.shape[0] // 256):
        at, o = 210 * b, 256 * b
        d = _scale(row, at + 208, half)
        for h in range(2):
            ql, qh, base = at + 64 * h, at + 128 + 32 * h, o + 128 * h
            for g in range(2):  # 16 weights share a scale
                s1 = d * np.float32(signed[at + 192 + 8 * h + g])
                s2 = d * np.float32(signed[at + 194 + 8 * h + g])
                s3 = d * np.float32(signed[at + 196 + 8 * h + g])
                s4 = d * np.float32(signed[at + 198 + 8 * h + g])
                for j in range(16):
                    i = 16 * g + j
                    lo1, hi1 = _split(np.float32(row[ql + i]), 16.0)
                    lo2, hi2 = _split(np.float32(row[ql + 32 + i]), 16.0)
                    a, rest = _split(np.float32(row[qh + i]), 4.0)
                    bb, rest = _split(rest, 4.0)
                    c, e = _split(rest, 4.0)
                    acc[i] += (s1 * (lo1 + np.float32(16) * a - np.float32(32))) * x[base + i]
                    acc[32 + i] += (s2 * (lo2 + np.float32(16) * bb - np.float32(32))) * x[base + 32 + i]
                    acc[i] += (s3 * (hi1 + np.float32(16) * c - np.float32(32))) * x[base + 64 + i]
                    acc[32 + i] += (s4 * (hi2 + np.float32(16) * e - np.float32(32))) * x[base + 96 + i]
    return _lanes(acc)


@_serial
def _row_dot(code: int, row: Array, x: Array, sums: Array, half: Array, w: Array, acc: Array) -> np.float32:
    """One output: the dot of an input row with the weight row of blocks ``row``, fused for the common formats
    (``sums``: the input's sums per 32 weights, for the formats with a min or an offset; ``acc``: 64 lanes);
    the others through ``w``, the row dequantized."""
    if code == Q8_0:
        return _dot_q8_0(row, x, half, acc)
    if code in (Q4_0, Q4_1):
        return _dot_q4(row, x, sums, half, acc, code == Q4_0)
    if code == Q4_K:
        return _dot_q4_k(row, x, sums, half, acc)
    if code == Q6_K:
        return _dot_q6_k(row, x, half, acc)
    dequantize_row(code, row, half, w)
    return _dot(x, w)


@_serial
def _block_span(x: Array, sums: Array, blocks: Array, code: int, half: Array, out: Array, lo: int, hi: int) -> None:
    """``out[:, lo:hi] = x @ W[lo:hi]^T``, each output one fused pass over its weight row's blocks."""
    w = np.empty(x.shape[1], np.float32)
    acc = np.empty(64, np.float32)
    for r in range(lo, hi):
        for i in range(x.shape[0]):
            out[i, r] = _row_dot(code, blocks[r], x[i], sums[i], half, w, acc)


@_serial
def _block_sums(x: Array, sums: Array) -> None:
    for i in range(x.shape[0]):
        for b in range(sums.shape[1]):
            s = np.float32(0)
            for t in range(32 * b, 32 * b + 32):
                s += x[i, t]
            sums[i, b] = s


def _block_rows(x: Array, blocks: Array, code: int, half: Array, out: Array) -> None:
    """``out = x @ W^T`` for a few rows of float32 ``x`` over the blocks (rows of W shared out in spans of 16)."""
    sums = np.empty((x.shape[0], x.shape[1] // 32), np.float32)
    _block_sums(x, sums)
    rows = blocks.shape[0]
    units = (rows + 15) // 16
    split = tasks(units)
    for t in numba.prange(split):
        lo, hi = 16 * (units * t // split), 16 * (units * (t + 1) // split)
        _block_span(x, sums, blocks, code, half, out, lo, min(hi, rows))


block_rows, block_rows_serial = twins(_block_rows)


# -- the q8 road: activations quantized per block of 32, each dot one call of an AVX2 tile (block_tiles) ------


@_serial
def _half_round(v: np.float32) -> Any:
    """``v`` rounded to the nearest fp16 value (ties to even), as float32: how llama.cpp stores a q8 scale.
    The values are far below fp16's largest; below its smallest normal one the step is 2**-24."""
    if abs(v) < np.float32(6.103515625e-05):
        return np.float32(np.rint(v * np.float32(16777216.0)) / np.float32(16777216.0))
    cell = np.empty(1, np.float32)
    cell[0] = v
    bits = cell.view(np.uint32)
    low = bits[0] & np.uint32(0x1FFF)
    bits[0] &= np.uint32(0xFFFFE000)
    if low > np.uint32(0x1000) or (low == np.uint32(0x1000) and bits[0] & np.uint32(0x2000)):
        bits[0] += np.uint32(0x2000)
    return cell[0]


@_serial
def _q8_row(x: Array, out: Array) -> None:
    """One row of float32 ``x`` as q8 blocks into ``out`` (uint8, 44 bytes a block of 32; see block_tiles)."""
    values, fields = out.view(np.int8), out.view(np.float32)
    for b in range(x.shape[0] // 32):
        amax = np.float32(0)
        for i in range(32):
            amax = max(amax, abs(x[32 * b + i]))
        d = amax / np.float32(127)
        inverse = np.float32(127) / amax if amax != 0 else np.float32(0)
        total = np.int64(0)
        for i in range(32):
            v = np.rint(x[32 * b + i] * inverse)
            values[44 * b + i] = np.int8(v)
            total += np.int64(v)
        d16 = _half_round(d)
        fields[11 * b + 8] = d16
        fields[11 * b + 9] = d16 * np.float32(total)
        fields[11 * b + 10] = _half_round(d * np.float32(total))


@_serial
def _q8_span(tiles: Array, x8: Array, blocks: Array, nb: int, out: Array, lo: int, hi: int) -> None:
    """``out[:, lo:hi]``: per weight row, one call of the many-row tile ``tiles[1]`` per ``tiles[2]`` input rows, of
    the one-row tile ``tiles[0]`` per row left (each row's bits are the same on either). The row count travels
    with the addresses: a constant here would be cached with this loop's machine code, apart from the tiles."""
    o, w, x = out.ctypes.data, blocks.ctypes.data, x8.ctypes.data
    so, sw, sx = out.strides[0], blocks.strides[0], x8.strides[0]
    column, n, many = out.strides[1], x8.shape[0], tiles[2]
    for r in range(lo, hi):
        i = 0
        while i + many <= n:
            call_tile(tiles[1], o + i * so + r * column, so, w + r * sw, sx, x + i * sx, nb)
            i += many
        while i < n:
            call_tile(tiles[0], o + i * so + r * column, 0, w + r * sw, 0, x + i * sx, nb)
            i += 1


def _block_q8_rows(x: Array, blocks: Array, tiles: Array, out: Array) -> None:
    """``out = x @ W^T`` for a few rows of float32 ``x``, through q8 activations and the format's tiles."""
    nb = x.shape[1] // 32
    x8 = np.empty((x.shape[0], nb * 44), np.uint8)
    for i in range(x.shape[0]):
        _q8_row(x[i], x8[i])
    rows = blocks.shape[0]
    units = (rows + 15) // 16
    split = tasks(units)
    for t in numba.prange(split):
        lo, hi = 16 * (units * t // split), 16 * (units * (t + 1) // split)
        _q8_span(tiles, x8, blocks, nb, out, lo, min(hi, rows))


block_q8_rows, block_q8_rows_serial = twins(_block_q8_rows)


@_serial
def _parts_span(tiles: Array, first: int, x8: Array, parts: Any, nb: int, out: Array, lo: int, hi: int) -> None:
    """Units ``lo`` to ``hi`` of 16 output columns, counted across ``parts`` side by side in ``out``: each part's
    share on its own tiles (``tiles[first + i]``)."""
    start, column = 0, 0
    for i in range(len(parts)):
        rows = parts[i].shape[0]
        units = (rows + 15) // 16
        a, b = max(lo, start), min(hi, start + units)
        if a < b:
            view = out[:, column : column + rows]
            _q8_span(tiles[first + i], x8, parts[i], nb, view, 16 * (a - start), min(16 * (b - start), rows))
        start += units
        column += rows


def _block_q8_parts(x: Array, parts: Any, tiles: Array, first: int, out: Array) -> None:
    """``out``'s columns side by side = ``x @ W_i^T`` for the weights ``parts`` (of one or several formats: the q,
    k and v of a layer), with ``x`` quantized to q8 once for them all and their rows shared out as one
    parallel region. Each output's bits are those of :func:`block_q8_rows` over its part alone."""
    nb = x.shape[1] // 32
    x8 = np.empty((x.shape[0], nb * 44), np.uint8)
    for i in range(x.shape[0]):
        _q8_row(x[i], x8[i])
    units = 0
    for i in range(len(parts)):
        units += (parts[i].shape[0] + 15) // 16
    split = tasks(units)
    for t in numba.prange(split):
        _parts_span(tiles, first, x8, parts, nb, out, units * t // split, units * (t + 1) // split)


block_q8_parts, block_q8_parts_serial = twins(_block_q8_parts)


def _quantize_q8(x: Array, out: Array) -> None:
    """Rows of float32 ``x`` as q8 blocks into ``out`` (uint8 (rows, k / 32 * 44)): for tests, against the
    numpy reference."""
    for i in range(x.shape[0]):
        _q8_row(x[i], out[i])


quantize_q8 = _serial(_quantize_q8)
