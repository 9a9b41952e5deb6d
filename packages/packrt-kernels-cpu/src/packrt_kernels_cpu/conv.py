"""2-D convolution (cross-correlation, NCHW) as im2col + GEMM, with torch's argument semantics.

``stride``, ``dilation`` take an int or an (h, w) pair; ``padding`` takes an int, an (h, w)
pair, or the strings "valid" (none) and "same" (output size = input size; stride 1 only;
an odd total goes to the bottom/right, as torch does). ``groups`` splits the channels into
independent convolutions. Input is (N, C, H, W) or unbatched (C, H, W).

Three roads, the first that applies taken. Winograd F(2x2, 3x3) (3x3, stride 1, dilation 1, 8
input channels a group or more, MKL's GEMM, numba): see :mod:`packrt_kernels_cpu.winograd`.
Shifted taps (stride 1, 16 input channels a group or more, MKL's GEMM): one GEMM per kernel tap
over a window of the flat padded input, no columns at all (see :func:`_conv2d_shifted`). Columns
(any geometry): im2col gathers, for every kernel tap, one strided view of the padded input, so the
column matrix costs ``C * kh * kw * OH * OW`` elements per image and the product is one GEMM per
group (band by band on the compiled path). All give torch's results up to float rounding; none
loops over pixels in Python.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt_base.geometry import Conv2dGeometry, IntPair, Padding
from packrt_kernels_cpu import blas, fused, tiles, winograd
from packrt_kernels_cpu.errors import KernelShapeError
from packrt_kernels_cpu.namespace import (
    Array,
    array_namespace,
    astype,
    compute_dtype,
    require_ndim,
    require_same_dtype,
    require_shape,
)


def _pair(value: IntPair, name: str, minimum: int) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(p, int | np.integer) for p in pair):
        raise KernelShapeError(f"{name} must be an int or a pair of ints, got {value!r}")
    if min(pair) < minimum:
        raise KernelShapeError(f"{name} must be >= {minimum} in both dims, got {value!r}")
    return int(pair[0]), int(pair[1])


def conv2d_geometry(
    kernel_size: tuple[int, int],
    stride: IntPair = 1,
    padding: Padding = 0,
    dilation: IntPair = 1,
    groups: int = 1,
) -> Conv2dGeometry:
    """Validate the convolution arguments once (ValueError naming the bad one) and resolve padding."""
    sh, sw = _pair(stride, "stride", 1)
    dh, dw = _pair(dilation, "dilation", 1)
    if not isinstance(groups, int | np.integer) or groups < 1:
        raise KernelShapeError(f"groups must be a positive int, got {groups!r}")
    kh, kw = kernel_size
    if isinstance(padding, str):
        if padding == "valid":
            pads = (0, 0, 0, 0)
        elif padding == "same":
            if (sh, sw) != (1, 1):
                raise KernelShapeError(f"padding='same' needs stride 1, got stride {(sh, sw)}")
            th, tw = dh * (kh - 1), dw * (kw - 1)
            pads = (th // 2, th - th // 2, tw // 2, tw - tw // 2)
        else:
            raise KernelShapeError(f"padding must be an int, a pair, 'valid' or 'same', got {padding!r}")
    else:
        ph, pw = _pair(padding, "padding", 0)
        pads = (ph, ph, pw, pw)
    return Conv2dGeometry((int(kh), int(kw)), (sh, sw), pads, (dh, dw), int(groups))


_BAND_BYTES = 1 << 20  # the columns of one band of a banded conv2d: well inside a core's L2
_TAPS_BAND_BYTES = 2 << 20  # a shifted-taps band's padded input and output: a core's L2 (whole 64x64 images)


def im2col(x: Array, geometry: Conv2dGeometry, *, scratch: bool = False) -> tuple[Array, int, int]:
    """Columns (N, C * kh * kw, OH * OW) of an (N, C, H, W) array, plus (OH, OW).

    The column index runs over (channel, kernel row, kernel col), matching a weight reshaped
    from (O, C, kh, kw) to (O, C * kh * kw). With ``scratch=True`` the compiled path may write
    them into this thread's reused scratch buffer: the caller must be done with them before it
    asks for columns again (``conv2d_gemm`` is).
    """
    xp = array_namespace(x)
    n, c, h, w = (int(s) for s in x.shape)
    oh, ow = geometry.output_size(h, w)
    (kh, kw) = geometry.kernel_size
    if fused.handles(x):  # one parallel pass, padding read as zeros: no padded copy of the input
        return fused.im2col(x, geometry, oh, ow, scratch=scratch).reshape(n, c * kh * kw, oh * ow), oh, ow
    top, bottom, left, right = geometry.padding
    if any(geometry.padding):
        x = xp.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    (sh, sw), (dh, dw) = geometry.stride, geometry.dilation
    cols = xp.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        r0 = i * dh
        for j in range(kw):
            c0 = j * dw
            cols[:, :, i, j] = x[:, :, r0 : r0 + sh * (oh - 1) + 1 : sh, c0 : c0 + sw * (ow - 1) + 1 : sw]
    return cols.reshape(n, c * kh * kw, oh * ow), oh, ow


def conv2d_gemm(x: Array, w_groups: Array, b: Array | None, geometry: Conv2dGeometry) -> Array:
    """The convolution proper, on arrays already in the compute dtype and already validated.

    ``w_groups`` is the im2col-ready weight (groups, out/groups, in/groups * kh * kw); ``b`` is
    (out,) or None. Returns (N, out, OH, OW) in the compute dtype.
    """
    g, og, k = (int(s) for s in w_groups.shape)
    bias = None if b is None else b.reshape(g, og, 1)  # added by the GEMM on MKL's road
    if fused.handles(x):
        if winograd.applies(x, geometry):
            return winograd.conv2d_winograd(x, w_groups, b, geometry)
        if _shifts(x, w_groups, geometry):
            return _conv2d_shifted(x, w_groups, b, geometry)
        return _conv2d_banded(x, w_groups, bias, geometry)
    cols, oh, ow = im2col(x, geometry)
    n = cols.shape[0]
    cols = cols.reshape(n, g, k, oh * ow)
    # (G, Og, K) @ (N, G, K, P) -> (N, G, Og, P): the weight broadcasts over the batch
    return blas.matmul(w_groups, cols, bias).reshape(n, g * og, oh, ow)


def _conv2d_banded(x: Array, w_groups: Array, bias: Array | None, geometry: Conv2dGeometry) -> Array:
    """Image by image, band of output rows by band: each band's columns (about ``_BAND_BYTES``) are
    still in cache when the GEMM reads them, and the GEMM writes straight into its slice of the
    output. One thread, a 32-channel 3x3 layer on 8x32x64x64: 8.2 -> 5.8 ms (whole-batch columns
    and GEMM 1.5 + 6.7 ms, in bands 1.2 + 4.7). With more threads the (image, band) tiles are
    shared out, each thread running its own alone: letting each small call wake the pools instead
    took 8.8 ms on two threads. On MKL's road each thread's tiles are one compiled call
    (``fused.columns_tiles``): tile by tile from Python, the 3 -> 32 layer of the conv net took
    0.84 ms on two threads, more than on one (0.76)."""
    n, _, h, w = (int(s) for s in x.shape)
    oh, ow = geometry.output_size(h, w)
    g, og, k = (int(s) for s in w_groups.shape)
    out = np.empty((n, g, og, oh * ow), np.float32)
    band = max(1, min(oh, _BAND_BYTES // (4 * g * k * ow)))
    gemm = blas.sgemm_batch()
    if gemm is not None:
        weights, flat_bias = np.ascontiguousarray(w_groups), None if bias is None else bias.reshape(-1)

        def run_compiled(part: list[tiles.Tile]) -> None:
            with blas.one_thread():
                fused.columns_tiles(x, weights, flat_bias, np.array(part, np.int64), geometry, out, gemm)

        tiles.run_tiles(run_compiled, n, oh, band)
        return out.reshape(n, g * og, oh, ow)

    # One group (the usual case): 2-D operands, so each tile is one plain GEMM call.
    weight, plane_bias, planes = (
        (w_groups[0], None if bias is None else bias[0], out[:, 0]) if g == 1 else (w_groups, bias, out)
    )

    def run(part: list[tiles.Tile]) -> None:
        for i, r0, r1 in part:
            cols = fused.im2col(x[i : i + 1], geometry, oh, ow, scratch=True, rows=(r0, r1))
            shape = (k, (r1 - r0) * ow) if g == 1 else (g, k, (r1 - r0) * ow)
            blas.matmul(weight, cols.reshape(shape), plane_bias, out=planes[i, ..., r0 * ow : r1 * ow])

    tiles.run_tiles(run, n, oh, band)
    return out.reshape(n, g * og, oh, ow)


_SHIFT_MIN_CHANNELS = 16  # input channels per group from which taps beat columns (3 -> 32: columns 2x faster)
_SHIFT_ROADS = ("mkl",)  # numpy's matmul cannot add onto its output: a pass per tap, slower than columns


def _shifts(x: Array, w_groups: Array, geometry: Conv2dGeometry) -> bool:
    """Whether conv2d takes the shifted-taps road: stride 1, enough input channels a group, MKL's GEMM."""
    cin_per_group = int(x.shape[1]) // geometry.groups
    return (
        geometry.stride == (1, 1)
        and cin_per_group >= _SHIFT_MIN_CHANNELS
        and x.dtype == np.float32
        and blas.provider() in _SHIFT_ROADS
    )


def _conv2d_shifted(x: Array, w_groups: Array, b: Array | None, geometry: Conv2dGeometry) -> Array:
    """A stride-1 convolution as one GEMM per kernel tap, with no columns at all. Lay a band of the
    zero-padded input out flat, rows ``Wp`` wide; then output pixel ``(y, x)`` of tap ``(i, j)`` reads
    flat element ``(y + i*dh) * Wp + x + j*dw``: the whole band's products for that tap are one GEMM
    over a window of the flat rows, shifted by ``i*dh*Wp + j*dw``. The GEMMs make ``Wp - OW`` columns
    too many per row (read past the row's end), which the copy into the output drops; MKL adds each
    tap's product onto the last inside its GEMM. K is the input channels (not nine times them, as the
    columns' is), so nothing is written but the padded band (1/9 of the columns) and the output.
    One thread, a 32-channel 3x3 layer on 8x32x64x64: 6.1 ms by columns, 5.0 by taps; two threads
    3.9 -> 3.0 ms."""
    n, c, h, w = (int(s) for s in x.shape)
    oh, ow = geometry.output_size(h, w)
    g, og, _ = (int(s) for s in w_groups.shape)
    (kh, kw), (dh, dw) = geometry.kernel_size, geometry.dilation
    top, _, left, right = geometry.padding
    cg, wp, extra = c // g, w + left + right, (kw - 1) * dw
    # (G, Og, Cg, kh, kw) -> (G, kh*kw, Og, Cg): each tap's weight one contiguous (Og, Cg) matrix
    taps = np.ascontiguousarray(w_groups.reshape(g, og, cg, kh, kw).transpose(0, 3, 4, 1, 2)).reshape(g, -1, og, cg)
    offsets = [i * dh * wp + j * dw for i in range(kh) for j in range(kw)]
    out = np.empty((n, g * og, oh, ow), np.float32)
    band = tiles.even_band(oh, _TAPS_BAND_BYTES // (4 * wp * (c + g * og)))
    bias = None if b is None else b.reshape(-1, 1)

    def run(part: list[tiles.Tile]) -> None:
        for i, r0, r1 in part:
            rows, pixels = r1 - r0 + (kh - 1) * dh, (r1 - r0) * wp
            buffer = fused.scratch_f32((c * (rows * wp + extra) + g * og * pixels,))
            src = buffer[: c * (rows * wp + extra)].reshape(c, rows * wp + extra)
            acc = buffer[c * (rows * wp + extra) :].reshape(g * og, pixels)
            tiles.padded_band(x[i], src, rows, wp, r0 - top, left)
            if bias is not None:  # the GEMMs add onto it: a copy out afterwards costs twice this
                acc[...] = bias
            for gi in range(g):
                group = src[gi * cg : (gi + 1) * cg]
                blas.tap_sum(taps[gi], group, offsets, acc[gi * og : (gi + 1) * og], accumulate=bias is not None)
            out[i, :, r0:r1] = acc.reshape(g * og, r1 - r0, wp)[:, :, :ow]

    tiles.run_tiles(run, n, oh, band)
    return out


def check_conv2d_weight(w: Array, b: Array | None, groups: int, dt: np.dtype[Any], ref: str) -> None:
    """ValueError/TypeError for a weight that is not (out, in/groups, kh, kw) or a bias not (out,).

    ``dt`` is the dtype both must have, taken from the argument named ``ref``.
    """
    require_ndim(w, 4, "weight", "(out_channels, in_channels / groups, kh, kw)")
    require_same_dtype(dt, w, "weight", ref)
    require_same_dtype(dt, b, "bias", ref)
    if w.shape[0] % groups:
        raise KernelShapeError(f"weight's out_channels={w.shape[0]} must be divisible by groups={groups}")
    require_shape(b, (w.shape[0],), "bias")


def conv2d(x: Array, w: Array, b: Array | None, geometry: Conv2dGeometry) -> Array:
    """torch.nn.functional.conv2d on arrays, (N, C, H, W) or (C, H, W) * (O, C/groups, kh, kw),
    with the geometry resolved once by :func:`conv2d_geometry`. A hot-path kernel: it checks
    nothing (packrt-core's ``nn.checks.conv2d_args`` runs first)."""
    dt = np.dtype(x.dtype)
    cd = compute_dtype(dt)
    w_groups = astype(w, cd).reshape(geometry.groups, int(w.shape[0]) // geometry.groups, -1)
    bc = None if b is None else astype(b, cd)
    batched = x.ndim == 4
    xc = astype(x, cd)
    out = conv2d_gemm(xc if batched else xc[None], w_groups, bc, geometry)
    return astype(out if batched else out[0], dt)
