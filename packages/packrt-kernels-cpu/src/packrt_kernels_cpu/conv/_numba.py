"""The compiled loops behind conv2d's banded roads (the columns, Winograd F(2x2, 3x3)).

They share :mod:`packrt_kernels_cpu._numba_kernels`' decorators and constants, and this module is
imported only by the roads that :func:`packrt_kernels_cpu.conv.roads.road` takes once
:func:`packrt_kernels_cpu.fused.handles` has loaded numba, so ``import packrt`` never compiles
them. The ``*_tiles`` kernels run one thread's whole share of (image, band) tiles in one call and
call MKL's batched GEMM themselves: the GIL is released once for all of it, where a call per band
from Python would make the threads take turns at it between bands.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt_kernels_cpu._numba_kernels import _ONE, _serial

Array = Any
_ZERO = np.float32(0.0)
_ROW_MAJOR, _NO_TRANS = 101, 111  # CBLAS_LAYOUT / CBLAS_TRANSPOSE values, for the GEMMs called from here


# -- conv2d's columns: (image, channel) planes lo:hi ------------------------------------------------
@_serial
def im2col_planes(
    x: Array, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, top: int, left: int, out: Array, lo: int, hi: int
) -> None:
    """Columns ``out`` (N, C, kh, kw, OH, OW) of planes ``lo:hi`` (image * C + channel) of ``x``
    (N, C, H, W), zero where a tap reads padding: no padded copy of the input is ever made."""
    c, h, w = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = out.shape[4], out.shape[5]
    for nc in range(lo, hi):
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


@_serial
def columns_tiles(
    x: Array, w: Array, bias: Array, tiles: Array, geometry: Any, ow: int, out: Array, scratch: Array, gemm: Any
) -> None:
    """conv2d's banded columns road for one thread's (image, first output row, one past the last)
    ``tiles``, in one call: each band's columns (:func:`im2col_planes`), then the bias and one GEMM a
    group into the band's slice of ``out`` (N, G, O/G, OH * OW). ``gemm`` is MKL's
    ``cblas_sgemm_batch_strided`` (the groups are its batch), called from here. ``w`` (G, O/G, K) is
    the weight as columns take it, ``bias`` (O,) or empty, ``geometry`` the (kh, kw, sh, sw, dh, dw,
    top, left) ints, ``scratch`` float32 of at least C * kh * kw * (rows a band) * ``ow`` elements."""
    kh, kw, sh, sw, dh, dw, top, left = geometry
    channels, groups, og, k = x.shape[1], w.shape[0], w.shape[1], w.shape[2]
    plane = out.shape[3]
    for n in range(tiles.shape[0]):
        i, r0, r1 = tiles[n, 0], tiles[n, 1], tiles[n, 2]
        pixels = (r1 - r0) * ow
        cols = scratch[: channels * kh * kw * pixels]
        im2col_planes(
            x[i : i + 1], kh, kw, sh, sw, dh, dw, top - r0 * sh, left,
            cols.reshape(1, channels, kh, kw, r1 - r0, ow), 0, channels,
        )  # fmt: skip
        beta = _ZERO
        if bias.shape[0]:  # the GEMMs add their products onto the bias (beta = 1)
            for g in range(groups):
                for o in range(og):
                    out[i, g, o, r0 * ow : r1 * ow] = bias[g * og + o]
            beta = _ONE
        a, b, c = w.ctypes, cols.ctypes, out[i, :, :, r0 * ow :].ctypes
        gemm(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, og, pixels, k, _ONE, a, k, og * k, b, pixels, k * pixels,
             beta, c, plane, og * plane, groups)  # fmt: skip


@_serial
def _gather_band(plane: Array, first: int, left: int, even: Array, odd: Array) -> None:
    """Rows ``first ..`` of ``plane`` (H, W) split by column parity: ``even[r, k]`` is column
    ``2k - left`` of row ``first + r``, ``odd[r, k]`` column ``2k + 1 - left``; zero outside the plane."""
    height, width, size = plane.shape[0], plane.shape[1], even.shape[1]
    # the columns k of even (odd) that hold a column of the plane: lo .. hi - 1
    even_lo, even_hi = min(size, (left + 1) // 2), min(size, (width + left + 1) // 2)
    odd_lo, odd_hi = min(size, left // 2), min(size, (width + left) // 2)
    for r in range(even.shape[0]):
        y = first + r
        if y < 0 or y >= height:
            even[r] = 0
            odd[r] = 0
            continue
        for k in range(even_lo):
            even[r, k] = 0
        for k in range(even_lo, even_hi):
            even[r, k] = plane[y, 2 * k - left]
        for k in range(even_hi, size):
            even[r, k] = 0
        for k in range(odd_lo):
            odd[r, k] = 0
        for k in range(odd_lo, odd_hi):
            odd[r, k] = plane[y, 2 * k + 1 - left]
        for k in range(odd_hi, size):
            odd[r, k] = 0


# -- conv2d's Winograd F(2x2, 3x3) transforms: one band of 4x4 input tiles -----------------------
# Called per (image, band) tile on conv2d's own threads, so serial only. Every loop writes one
# output stream from two or three input streams: a loop writing four needs more runtime overlap
# checks than LLVM makes, and it stays scalar.
@_serial
def winograd_input(image: Array, first: int, left: int, v: Array, even: Array, odd: Array, h: Array) -> None:
    """``v[4i + j, c, t] = (B^T d B)[i, j]`` for every 4x4 tile ``d`` of a band of ``image`` (C, H, W)
    zero-padded: the band's row ``r`` is image row ``first + r``, its column ``q`` image column
    ``q - left`` (zero outside the image); tile ``t = ty * tw + tx`` covers rows ``2ty..2ty+3`` and
    columns ``2tx..2tx+3`` (``B^T`` = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]: adds
    and subtracts only). Each row's even and odd columns are gathered apart (``even``, ``odd``:
    (rows, tw + 1)), so ``d B`` reads contiguously, into ``h`` (4, rows, tw); then ``B^T`` runs down
    each column. No padded copy of the input is made."""
    channels, rows, tw = image.shape[0], even.shape[0], h.shape[2]
    for c in range(channels):
        _gather_band(image[c], first, left, even, odd)
        for r in range(rows):
            for k in range(tw):
                h[0, r, k] = even[r, k] - even[r, k + 1]
            for k in range(tw):
                h[1, r, k] = odd[r, k] + even[r, k + 1]
            for k in range(tw):
                h[2, r, k] = even[r, k + 1] - odd[r, k]
            for k in range(tw):
                h[3, r, k] = odd[r, k] - odd[r, k + 1]
        for j in range(4):
            for ty in range((rows - 2) // 2):
                q, r = ty * tw, 2 * ty
                for k in range(tw):
                    v[j, c, q + k] = h[j, r, k] - h[j, r + 2, k]
                for k in range(tw):
                    v[4 + j, c, q + k] = h[j, r + 1, k] + h[j, r + 2, k]
                for k in range(tw):
                    v[8 + j, c, q + k] = h[j, r + 2, k] - h[j, r + 1, k]
                for k in range(tw):
                    v[12 + j, c, q + k] = h[j, r + 1, k] - h[j, r + 3, k]


@_serial
def winograd_output(m: Array, bias: Array, tw: int, out: Array, partial: Array, y: Array) -> None:
    """``out[o, 2ty + a, 2tx + b] = (A^T M A)[a, b] + bias[o]`` for the products ``m`` (16, O, T) of a
    band's tiles (``A^T`` = [[1, 1, 1, 0], [0, 1, -1, -1]]); ``out`` (O, rows, cols) takes what fits
    (an odd last row or column of the output drops the tile's second). ``partial`` (8, T) and ``y``
    (4, T): scratch for ``A^T M`` and the four outputs of every tile."""
    outs, tiles = m.shape[1], m.shape[2]
    th, rows, cols = tiles // tw, out.shape[1], out.shape[2]
    pairs = cols // 2
    for o in range(outs):
        for j in range(4):
            for t in range(tiles):
                partial[j, t] = m[j, o, t] + m[4 + j, o, t] + m[8 + j, o, t]
            for t in range(tiles):
                partial[4 + j, t] = m[4 + j, o, t] - m[8 + j, o, t] - m[12 + j, o, t]
        bo = bias[o]
        for t in range(tiles):
            y[0, t] = partial[0, t] + partial[1, t] + partial[2, t] + bo
        for t in range(tiles):
            y[1, t] = partial[1, t] - partial[2, t] - partial[3, t] + bo
        for t in range(tiles):
            y[2, t] = partial[4, t] + partial[5, t] + partial[6, t] + bo
        for t in range(tiles):
            y[3, t] = partial[5, t] - partial[6, t] - partial[7, t] + bo
        for ty in range(th):
            for a in range(min(2, rows - 2 * ty)):
                q, r = ty * tw, 2 * ty + a
                for k in range(pairs):
                    out[o, r, 2 * k] = y[2 * a, q + k]
                    out[o, r, 2 * k + 1] = y[2 * a + 1, q + k]
                if cols % 2:
                    out[o, r, cols - 1] = y[2 * a, q + pairs]


@_serial
def winograd_weight(w: Array, u: Array) -> None:
    """``u[g, o, c, 4a + b] = (G k G^T)[a, b]`` for each 3x3 kernel ``k = w[g, o, 9c : 9c + 9]`` of ``w``
    (G, O/G, C/G * 9), computed in float64 and rounded once (``G`` = [[1, 0, 0], [1/2, 1/2, 1/2],
    [1/2, -1/2, 1/2], [0, 0, 1]]). Each kernel's 16 values are adjacent in ``u``: 16 planes a power of
    two apart would all map to one cache set."""
    groups, outs, channels = u.shape[0], u.shape[1], u.shape[2]
    gk = np.empty((4, 3))  # G k
    for g in range(groups):
        for o in range(outs):
            for c in range(channels):
                for j in range(3):  # G k mixes the kernel's rows, column by column
                    k0 = np.float64(w[g, o, 9 * c + j])
                    k1 = np.float64(w[g, o, 9 * c + 3 + j])
                    k2 = np.float64(w[g, o, 9 * c + 6 + j])
                    gk[0, j] = k0
                    gk[1, j] = (k0 + k1 + k2) * 0.5
                    gk[2, j] = (k0 - k1 + k2) * 0.5
                    gk[3, j] = k2
                for a in range(4):  # (G k) G^T then mixes its columns
                    r0, r1, r2 = gk[a, 0], gk[a, 1], gk[a, 2]
                    u[g, o, c, 4 * a] = r0
                    u[g, o, c, 4 * a + 1] = (r0 + r1 + r2) * 0.5
                    u[g, o, c, 4 * a + 2] = (r0 - r1 + r2) * 0.5
                    u[g, o, c, 4 * a + 3] = r2


@_serial
def winograd_tiles(
    x: Array, u: Array, bias: Array, tiles: Array, top: int, left: int, out: Array, scratch: Array, gemm: Any
) -> None:
    """conv2d's Winograd road for the (image, first tile row, one past the last) ``tiles`` of one thread,
    in one call: per band the input transform, the 16 products of each group (``gemm`` is MKL's
    ``cblas_sgemm_batch_strided``, called from here), the output transform, with the GIL released
    once for all of it. ``u`` (G, 16, O/G, C/G) is the
    transformed weight, ``out`` (N, O, OH, OW), ``scratch`` a float32 buffer of
    :func:`winograd_scratch_size` elements."""
    channels, groups, og, cg = x.shape[1], u.shape[0], u.shape[2], u.shape[3]
    outs, oh, ow = groups * og, out.shape[2], out.shape[3]
    tw = (ow + 1) // 2
    for n in range(tiles.shape[0]):
        i, t0, t1 = tiles[n, 0], tiles[n, 1], tiles[n, 2]
        rows, count = 2 * (t1 - t0) + 2, (t1 - t0) * tw
        v = scratch[: 16 * channels * count].reshape(16, channels, count)
        at = 16 * channels * count
        m = scratch[at : at + 16 * outs * count].reshape(16, outs, count)
        at += 16 * outs * count
        even = scratch[at : at + rows * (tw + 1)].reshape(rows, tw + 1)
        at += rows * (tw + 1)
        odd = scratch[at : at + rows * (tw + 1)].reshape(rows, tw + 1)
        at += rows * (tw + 1)
        h = scratch[at : at + 4 * rows * tw].reshape(4, rows, tw)
        at += 4 * rows * tw
        partial = scratch[at : at + 8 * count].reshape(8, count)
        y = scratch[at + 8 * count : at + 12 * count].reshape(4, count)
        winograd_input(x[i], 2 * t0 - top, left, v, even, odd, h)
        for g in range(groups):  # the 16 products (O/G, C/G) @ (C/G, tiles) of group g, one batched call
            a, b, c = u[g].ctypes, v[:, g * cg :].ctypes, m[:, g * og :].ctypes
            gemm(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, og, count, cg, _ONE, a, cg, og * cg, b, count, channels * count,
                 _ZERO, c, count, outs * count, 16)  # fmt: skip
        winograd_output(m, bias, tw, out[i, :, 2 * t0 : min(oh, 2 * t1)], partial, y)


def winograd_scratch_size(channels: int, outs: int, band: int, tw: int) -> int:
    """Floats :func:`winograd_tiles` needs for bands of ``band`` tile rows ``tw`` tiles wide."""
    rows, count = 2 * band + 2, band * tw
    return 16 * (channels + outs) * count + 2 * rows * (tw + 1) + 4 * rows * tw + 12 * count
