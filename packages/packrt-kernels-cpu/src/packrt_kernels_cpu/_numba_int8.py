"""The compiled loops of the int8 linear road (:mod:`packrt_kernels_cpu.int8`): quantize activations per
row, sum the weight's rows, and turn the int32 product back into float32 with the scales and the
bias in one pass; on the VNNI panels (:mod:`packrt_kernels_cpu.vnni`) one loop does all three, a chunk of
rows (or a run of panels) a task, each tile's product turned back while it is in L1.

Each loop is a compiled serial loop over a span of its rows (or panels) and a body that splits the
work into spans with ``prange``, compiled twice as in :mod:`._numba_kernels` (:func:`._numba_kernels.twins`):
``name`` runs the spans over numba's pool (its size follows ``set_num_threads``), ``name_serial`` on
the calling thread, for small work and inside :func:`packrt_kernels_cpu.threads.on_this_thread` (see
:func:`compiled.launch`). Each writes a caller-given ``out``; every array is C-contiguous.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from packrt_kernels_cpu._numba_kernels import _float32_from_bits, _ordered, _serial, tasks, twins
from packrt_kernels_cpu._numba_tiles import call_tile

Array = Any


_U8_MAX = np.float32(255.0)
_ZERO = np.float32(0.0)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)
_NAN = np.float32(np.nan)


@_serial
def _row_range(row: Array) -> tuple[Any, Any]:
    """(min(0, row), max(0, row)) of a float32 row (C-contiguous), as integer minima and maxima of the ordered
    bits (:func:`_ordered`): 16 lanes at a time, 0.12 ns an element on a Zen 4 core against 0.33 for four float
    chains. NaN may land in either (:func:`_holds_nan` is asked apart); -0.0 becomes 0.0."""
    bits = row.view(np.int32)
    lo = hi = np.int32(0)  # the ordered bits of +0.0
    for j in range(bits.shape[0]):
        key = _ordered(bits[j])
        lo, hi = min(lo, key), max(hi, key)
    return _float32_from_bits(_ordered(lo)) + _ZERO, _float32_from_bits(_ordered(hi))


@_serial
def _holds_nan(row: Array) -> bool:
    """Whether the row holds a NaN: an integer OR over the comparisons, which vectorises without fastmath."""
    found = np.int32(0)
    for j in range(row.shape[0]):
        found |= np.int32(row[j] != row[j])
    return bool(found != 0)


@_serial
def _quantize_span(x: Array, q: Array, scale: Array, zero: Array, r0: int, r1: int) -> None:
    """``q[i] = round(x[i] / scale[i]) + zero[i]`` clipped to 0..255, as uint8, per row of float32 ``x``.

    Each row's range, ``lo = min(0, row)`` to ``hi = max(0, row)``, maps onto 0..255: ``scale = (hi - lo)
    / 255``, ``zero = round(-lo / scale)``, so 0 is a level of its own (padding and ReLU zeros stay exact).
    Rounding is half up (every level is >= 0 by then). A row of zeros gets scale 1; a row whose range is
    not finite (NaN, infinity) gets scale NaN, which carries into every output of that row."""
    cols = x.shape[1]
    for i in range(r0, r1):
        lo, hi = _row_range(x[i])
        span = _NAN if _holds_nan(x[i]) else hi - lo
        if not np.isfinite(span):
            scale[i] = _NAN
            zero[i] = 0
            for j in range(cols):
                q[i, j] = 0
            continue
        s = span / _U8_MAX if span > _ZERO else _ONE
        inv = _ONE / s
        if not np.isfinite(inv):  # a span so small that 1/scale overflows: the row rounds to zeros
            s = _ONE
            inv = _ONE
        z = min(max(np.float32(np.int32(-lo * inv + _HALF)), _ZERO), _U8_MAX)
        scale[i] = s
        zero[i] = np.int32(z)
        for j in range(cols):
            v = min(max(x[i, j] * inv + z, _ZERO), _U8_MAX)
            q[i, j] = np.uint8(np.int32(v + _HALF))


def _quantize_rows(x: Array, q: Array, scale: Array, zero: Array) -> None:
    units = x.shape[0]
    split = tasks(units)
    for i in numba.prange(split):
        _quantize_span(x, q, scale, zero, units * i // split, units * (i + 1) // split)


quantize_rows, quantize_rows_serial = twins(_quantize_rows)


@_serial
def _row_sums_span(q: Array, out: Array, r0: int, r1: int) -> None:
    """``out[n] = sum(q[n])`` in int32 for int8 ``q`` (N, K)."""
    for n in range(r0, r1):
        s = np.int32(0)
        for kk in range(q.shape[1]):
            s += np.int32(q[n, kk])
        out[n] = s


def _row_sums(q: Array, out: Array) -> None:
    units = q.shape[0]
    split = tasks(units)
    for n in numba.prange(split):
        _row_sums_span(q, out, units * n // split, units * (n + 1) // split)


row_sums, row_sums_serial = twins(_row_sums)


@_serial
def _signed_product(acc: Any, z: Any, w_sum: Any) -> Any:
    """``acc - z * w_sum`` as float32: the int32 product of a row's uint8 levels and a weight column, less
    its zero point's share, is the product of the signed levels, at most ``K * 255 * 128 < 2**31`` in
    magnitude for ``K <= 65536``. It fits int32, so int32 arithmetic gives it exactly even where ``z *
    w_sum`` wraps on the way (the wrap cancels), at twice int64's vector width. Every int8 road turns its
    product back through this and :func:`_dequantize_row`'s scaling: the same bits on each."""
    return np.float32(np.int32(acc - z * w_sum))


@_serial
def _dequantize_row(
    acc: Array, zi: Any, si: Any, w_scale: Array, w_sum: Array, bias: Array, accumulate: bool, out: Array
) -> None:
    """``out[n] (+)= (acc[n] - zi * w_sum[n]) * si * w_scale[n] (+ bias[n])`` for one row, ``n < len(out)``
    (:func:`_signed_product`). An empty ``bias`` is none; ``accumulate`` adds onto ``out`` (a later K
    chunk) and skips the bias."""
    z = np.int32(zi)
    # One loop per case, so none branches per element (and each vectorises).
    if accumulate:
        for n in range(out.shape[0]):
            out[n] += _signed_product(acc[n], z, w_sum[n]) * (si * w_scale[n])
    elif bias.shape[0] > 0:
        for n in range(out.shape[0]):
            out[n] = _signed_product(acc[n], z, w_sum[n]) * (si * w_scale[n]) + bias[n]
    else:
        for n in range(out.shape[0]):
            out[n] = _signed_product(acc[n], z, w_sum[n]) * (si * w_scale[n])


@_serial
def _dequantize_span(
    acc: Array,
    x_scale: Array,
    x_zero: Array,
    w_scale: Array,
    w_sum: Array,
    bias: Array,
    accumulate: bool,
    out: Array,
    r0: int,
    r1: int,
) -> None:
    """Rows r0:r1 of the int32 product ``acc`` back in float32 (:func:`_dequantize_row`)."""
    for i in range(r0, r1):
        _dequantize_row(acc[i], x_zero[i], x_scale[i], w_scale, w_sum, bias, accumulate, out[i])


def _dequantize_product(
    acc: Array,
    x_scale: Array,
    x_zero: Array,
    w_scale: Array,
    w_sum: Array,
    bias: Array,
    accumulate: bool,
    out: Array,
) -> None:
    units = acc.shape[0]
    split = tasks(units)
    for i in numba.prange(split):
        _dequantize_span(
            acc, x_scale, x_zero, w_scale, w_sum, bias, accumulate, out, units * i // split, units * (i + 1) // split
        )


dequantize_product, dequantize_product_serial = twins(_dequantize_product)


@_serial
def _vnni_span(tiles: Array, out: Array, u: Array, panels: Array, groups: int, p0: int, p1: int) -> None:
    """Panels ``p0:p1`` of :func:`packrt_kernels_cpu.vnni.gemm`, 32 output columns each, into ``out`` (M, N
    padded to 32) int32 from ``u`` (M, 4 * groups) uint8, both C-contiguous: ``tiles[0]`` (8 rows) down
    the rows, then ``tiles[1]`` (one) for the last ``M % 8``; ``tiles`` holds their addresses."""
    rows, lda = u.shape
    ldo = out.shape[1]
    o, a, b = out.ctypes.data, u.ctypes.data, panels.ctypes.data
    whole = rows // 8
    full, one = tiles[0], tiles[1]
    for p in range(p0, p1):
        panel = b + p * groups * 128
        column = o + p * 128  # 32 int32 columns
        for i in range(whole):
            call_tile(full, column + i * 8 * ldo * 4, ldo, a + i * 8 * lda, lda, panel, groups)
        for r in range(whole * 8, rows):
            call_tile(one, column + r * ldo * 4, ldo, a + r * lda, lda, panel, groups)


def _vnni_tiles(tiles: Array, out: Array, u: Array, panels: Array, groups: int) -> None:
    """The panels over the pool, one task a panel."""
    units = out.shape[1] // 32
    split = tasks(units)
    for p in numba.prange(split):
        _vnni_span(tiles, out, u, panels, groups, units * p // split, units * (p + 1) // split)


vnni_tiles, vnni_tiles_serial = twins(_vnni_tiles)


@_serial
def _vnni_linear_span(
    tiles: Array,
    u: Array,
    rows: int,
    x_scale: Array,
    x_zero: Array,
    panels: Array,
    groups: int,
    w_scale: Array,
    w_sum: Array,
    bias: Array,
    out: Array,
    row0: int,
    p0: int,
    p1: int,
) -> None:
    """Panels ``p0:p1`` of :func:`packrt_kernels_cpu.vnni.linear` for the first ``rows`` rows of the uint8
    activations ``u`` (C-contiguous, K padded to ``4 * groups``), written to ``out`` rows ``row0`` on: each
    tile's 8 (or 1) rows x 32 columns of int32 product land in a small buffer and go straight back to float32
    while they are in L1, by :func:`_dequantize_row`'s arithmetic (a whole panel's 32 columns in a loop of
    fixed length, which vectorises without a remainder)."""
    lda = u.shape[1]
    n = out.shape[1]
    acc = np.empty((8, 32), np.int32)
    o, a, b = acc.ctypes.data, u.ctypes.data, panels.ctypes.data
    whole = rows // 8
    full, one = tiles[0], tiles[1]
    biased = bias.shape[0] > 0
    for p in range(p0, p1):
        panel = b + p * groups * 128
        c0, c1 = p * 32, min(p * 32 + 32, n)
        ws, wsum, bs = w_scale[c0:c1], w_sum[c0:c1], bias[c0:c1] if biased else bias
        for i in range(whole + rows - whole * 8):  # 8-row tiles, then the rows left one by one
            first = i * 8 if i < whole else whole * 8 + i - whole
            count = 8 if i < whole else 1
            call_tile(full if i < whole else one, o, 32, a + first * lda, lda, panel, groups)
            for r in range(count):
                row, got = out[row0 + first + r, c0:c1], acc[r]
                z, si = np.int32(x_zero[first + r]), x_scale[first + r]
                if c1 - c0 < 32:
                    _dequantize_row(got, z, si, ws, wsum, bs, False, row)
                elif biased:
                    for c in range(32):
                        row[c] = _signed_product(got[c], z, wsum[c]) * (si * ws[c]) + bs[c]
                else:
                    for c in range(32):
                        row[c] = _signed_product(got[c], z, wsum[c]) * (si * ws[c])


def _vnni_linear(
    tiles: Array,
    u: Array,
    x_scale: Array,
    x_zero: Array,
    panels: Array,
    groups: int,
    w_scale: Array,
    w_sum: Array,
    bias: Array,
    out: Array,
) -> None:
    """Quantized activations times the panels, one task a panel (for few rows)."""
    units = (out.shape[1] + 31) // 32
    split = tasks(units)
    for p in numba.prange(split):
        _vnni_linear_span(
            tiles, u, u.shape[0], x_scale, x_zero, panels, groups, w_scale, w_sum, bias, out, 0,
            units * p // split, units * (p + 1) // split,
        )  # fmt: skip


vnni_linear, vnni_linear_serial = twins(_vnni_linear)

ROW_CHUNK = 64  # rows a task of vnni_rows quantizes and multiplies by every panel (their uint8 stay in L1/L2)


@_serial
def _vnni_rows_span(
    tiles: Array,
    x: Array,
    panels: Array,
    groups: int,
    w_scale: Array,
    w_sum: Array,
    bias: Array,
    out: Array,
    c0: int,
    c1: int,
) -> None:
    """Chunks ``c0:c1`` of ``ROW_CHUNK`` rows of float32 ``x``: each chunk's rows quantized
    (:func:`_quantize_span`, row by row as :func:`_quantize_rows` does) into a buffer of this task's, then
    multiplied by every panel and turned back into float32 (:func:`_vnni_linear_span`)."""
    rows = x.shape[0]
    u = np.zeros((ROW_CHUNK, groups * 4), np.uint8)  # K's padding to whole groups stays zero
    scale = np.empty(ROW_CHUNK, np.float32)
    zero = np.empty(ROW_CHUNK, np.int32)
    every = (out.shape[1] + 31) // 32
    for c in range(c0, c1):
        r0 = c * ROW_CHUNK
        count = min(ROW_CHUNK, rows - r0)
        _quantize_span(x[r0 : r0 + count], u, scale, zero, 0, count)
        _vnni_linear_span(tiles, u, count, scale, zero, panels, groups, w_scale, w_sum, bias, out, r0, 0, every)


def _vnni_rows(
    tiles: Array, x: Array, panels: Array, groups: int, w_scale: Array, w_sum: Array, bias: Array, out: Array
) -> None:
    """Float32 activations quantized and multiplied a chunk of rows a task: one parallel region in all."""
    units = (x.shape[0] + ROW_CHUNK - 1) // ROW_CHUNK
    split = tasks(units)
    for t in numba.prange(split):
        _vnni_rows_span(
            tiles, x, panels, groups, w_scale, w_sum, bias, out, units * t // split, units * (t + 1) // split
        )


vnni_rows, vnni_rows_serial = twins(_vnni_rows)
