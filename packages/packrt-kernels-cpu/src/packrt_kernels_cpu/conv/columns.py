"""conv2d's columns roads: im2col gathers, for every kernel tap, the input pixels it reads, so a
convolution of any geometry is one GEMM a group, the weight (O/G, C/G * kh * kw) times the columns
(C/G * kh * kw, OH * OW) of each image.

- :func:`conv2d_columns`: the whole batch's columns from one strided view of the padded input per
  kernel tap, then one batched GEMM. Any float dtype, any array namespace: the reference road.
- :func:`conv2d_bands` and :func:`conv2d_tiles`: image by image, band of output rows by band, so a
  band's columns (about ``_BAND_BYTES``, inside a core's L2) are still in cache when the GEMM reads
  them, and the GEMM writes straight into its slice of the output; the compiled columns read the
  padding as zeros, so no padded copy of the input is made. ``conv2d_tiles`` runs each thread's
  bands in one compiled call that calls MKL's batched GEMM itself; ``conv2d_bands``, for a BLAS
  without that entry point, runs the compiled columns and a :func:`blas.matmul` per band from Python.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt_base.arrays import Array, array_namespace
from packrt_base.geometry import Conv2dGeometry
from packrt_kernels_cpu import blas, compiled, scratch, threads
from packrt_kernels_cpu.conv import tiles

_BAND_BYTES = 1 << 20  # the columns of one band: well inside a core's L2
_NO_BIAS = np.empty(0, np.float32)


def _compiled() -> Any:
    """The compiled loops (numba is loaded by then: these roads are taken behind ``fused.handles``, which loads it)."""
    return compiled.module("packrt_kernels_cpu.conv._numba")


def im2col(x: Array, geometry: Conv2dGeometry) -> tuple[Array, int, int]:
    """Columns (N, C * kh * kw, OH * OW) of an (N, C, H, W) array of any namespace, plus (OH, OW).

    The column index runs over (channel, kernel row, kernel col), matching a weight reshaped from
    (O, C, kh, kw) to (O, C * kh * kw).
    """
    xp = array_namespace(x)
    n, c, h, w = (int(s) for s in x.shape)
    oh, ow = geometry.output_size(h, w)
    (kh, kw), (sh, sw), (dh, dw) = geometry.kernel_size, geometry.stride, geometry.dilation
    top, bottom, left, right = geometry.padding
    if any(geometry.padding):
        x = xp.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    cols = xp.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        r0 = i * dh
        for j in range(kw):
            c0 = j * dw
            cols[:, :, i, j] = x[:, :, r0 : r0 + sh * (oh - 1) + 1 : sh, c0 : c0 + sw * (ow - 1) + 1 : sw]
    return cols.reshape(n, c * kh * kw, oh * ow), oh, ow


def band_columns(image: Array, geometry: Conv2dGeometry, rows: tuple[int, int], out: Array) -> Array:
    """The columns (1, C, kh, kw, r1 - r0, OW) of output rows ``rows = (r0, r1)`` of one float32
    C-contiguous image (1, C, H, W), compiled, written into ``out`` (that many float32 elements or more)."""
    (kh, kw), (sh, sw), (dh, dw) = geometry.kernel_size, geometry.stride, geometry.dilation
    top, _, left, _ = geometry.padding
    c = int(image.shape[1])
    _, ow = geometry.output_size(int(image.shape[2]), int(image.shape[3]))
    r0, r1 = rows
    cols = out[: c * kh * kw * (r1 - r0) * ow].reshape(1, c, kh, kw, r1 - r0, ow)
    # a band starting at output row r0 reads from input row r0 * sh - top on
    _compiled().im2col_planes(image, kh, kw, sh, sw, dh, dw, top - r0 * sh, left, cols, 0, c)
    return cols


def conv2d_columns(x: Array, w_groups: Array, b: Array | None, geometry: Conv2dGeometry) -> Array:
    """The whole batch's columns and one batched GEMM: ``w_groups`` (G, O/G, C/G * kh * kw), ``b`` (O,)
    or None, all in one float dtype; (N, O, OH, OW) in it."""
    g, og, k = (int(s) for s in w_groups.shape)
    cols, oh, ow = im2col(x, geometry)
    n = cols.shape[0]
    bias = None if b is None else b.reshape(g, og, 1)  # added by the GEMM on MKL's road
    # (G, Og, K) @ (N, G, K, P) -> (N, G, Og, P): the weight broadcasts over the batch
    return blas.matmul(w_groups, cols.reshape(n, g, k, oh * ow), bias).reshape(n, g * og, oh, ow)


def _band(w_groups: Array, oh: int, ow: int) -> int:
    """Output rows a band: its columns about ``_BAND_BYTES``."""
    g, _, k = (int(s) for s in w_groups.shape)
    return max(1, min(oh, _BAND_BYTES // (4 * g * k * ow)))


def conv2d_tiles(x: Array, w_groups: Array, b: Array | None, geometry: Conv2dGeometry, gemm: Any) -> Array:
    """Band by band, each thread's (image, band) tiles in one compiled call running ``gemm`` (MKL's
    ``cblas_sgemm_batch_strided``, :func:`blas.sgemm_batch`); float32 C-contiguous ``x`` (N, C, H, W)."""
    n, c, h, w = (int(s) for s in x.shape)
    oh, ow = geometry.output_size(h, w)
    g, og, _ = (int(s) for s in w_groups.shape)
    out = np.empty((n, g, og, oh * ow), np.float32)
    band = _band(w_groups, oh, ow)
    weights, bias = np.ascontiguousarray(w_groups), _NO_BIAS if b is None else b.reshape(-1)
    (kh, kw), (sh, sw), (dh, dw) = geometry.kernel_size, geometry.stride, geometry.dilation
    ints = (kh, kw, sh, sw, dh, dw, geometry.padding[0], geometry.padding[2])

    def run(part: list[tiles.Tile]) -> None:
        buffer = scratch.scratch_f32((c * kh * kw * max(r1 - r0 for _, r0, r1 in part) * ow,))
        with threads.on_this_thread():
            _compiled().columns_tiles(x, weights, bias, np.array(part, np.int64), ints, ow, out, buffer, gemm)

    tiles.run_tiles(run, n, oh, band)
    return out.reshape(n, g * og, oh, ow)


def conv2d_bands(x: Array, w_groups: Array, b: Array | None, geometry: Conv2dGeometry) -> Array:
    """Band by band from Python: the compiled columns of a band, then one :func:`blas.matmul` into its
    slice of the output; float32 C-contiguous ``x`` (N, C, H, W), any BLAS."""
    n, _, h, w = (int(s) for s in x.shape)
    oh, ow = geometry.output_size(h, w)
    g, og, k = (int(s) for s in w_groups.shape)
    out = np.empty((n, g, og, oh * ow), np.float32)
    bias = None if b is None else b.reshape(g, og, 1)
    # One group (the usual case): 2-D operands, so each band is one plain GEMM call.
    weight, plane_bias, planes = (
        (w_groups[0], None if bias is None else bias[0], out[:, 0]) if g == 1 else (w_groups, bias, out)
    )

    def run(part: list[tiles.Tile]) -> None:
        for i, r0, r1 in part:
            cols = band_columns(x[i : i + 1], geometry, (r0, r1), scratch.scratch_f32((g * k * (r1 - r0) * ow,)))
            shape = (k, (r1 - r0) * ow) if g == 1 else (g, k, (r1 - r0) * ow)
            blas.matmul(weight, cols.reshape(shape), plane_bias, out=planes[i, ..., r0 * ow : r1 * ow])

    tiles.run_tiles(run, n, oh, _band(w_groups, oh, ow))
    return out.reshape(n, g * og, oh, ow)
