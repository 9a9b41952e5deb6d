"""conv2d's entry point and the one place its road is chosen (:func:`road`).

The roads, the first that applies taken:

- ``"columns"``: what the compiled path does not take (float64, a strided or non-numpy array,
  ``PACKRT_NUMBA=0``, numba missing): the whole batch's im2col columns and one batched GEMM
  (:func:`columns.conv2d_columns`).
- ``"column-bands"``: float32 on the compiled path without MKL's batched GEMM (numpy's BLAS): the
  columns of a band of output rows at a time, a GEMM a band from Python (:func:`columns.conv2d_bands`).
- ``"winograd"``: a 3x3 kernel, stride 1, dilation 1 and ``_WINOGRAD_MIN_CHANNELS`` input channels a
  group or more, with MKL's batched GEMM: Winograd F(2x2, 3x3), 2.25x fewer multiplies than the
  columns' GEMM (:mod:`.winograd`). With fewer channels the transforms, which grow with the channels
  in and out while the products grow with their product, cost more than the multiplies they save.
- ``"column-tiles"``: every other float32 convolution with MKL's batched GEMM: the bands again, each
  thread's in one compiled call (:func:`columns.conv2d_tiles`).

All give torch's results up to float rounding; none loops over pixels in Python. Which road the
conv benchmark's layers take and what each costs: docs/benchmarks.md.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from packrt_base.arrays import Array, compute_dtype
from packrt_base.geometry import Conv2dGeometry
from packrt_kernels_cpu import blas, fused
from packrt_kernels_cpu.conv import columns, winograd
from packrt_kernels_cpu.namespace import astype

Road = Literal["columns", "column-bands", "winograd", "column-tiles"]
_WINOGRAD_MIN_CHANNELS = 8  # input channels a group from which Winograd is no slower than the columns


def road(x: Array, geometry: Conv2dGeometry) -> Road:
    """The road :func:`convolve` takes for input ``x`` (N, C, H, W), already in the compute dtype."""
    if not fused.handles(x):
        return "columns"
    if blas.sgemm_batch() is None:
        return "column-bands"
    if (
        geometry.kernel_size == (3, 3)
        and geometry.stride == (1, 1)
        and geometry.dilation == (1, 1)
        and int(x.shape[1]) // geometry.groups >= _WINOGRAD_MIN_CHANNELS
    ):
        return "winograd"
    return "column-tiles"


def convolve(x: Array, w_groups: Array, b: Array | None, geometry: Conv2dGeometry) -> Array:
    """The convolution proper, on arrays already in the compute dtype and already validated.

    ``x`` is (N, C, H, W); ``w_groups`` the im2col-ready weight (groups, out/groups, in/groups * kh * kw);
    ``b`` (out,) or None. Returns (N, out, OH, OW) in the compute dtype.
    """
    chosen = road(x, geometry)
    if chosen == "columns":
        return columns.conv2d_columns(x, w_groups, b, geometry)
    if chosen == "column-bands":
        return columns.conv2d_bands(x, w_groups, b, geometry)
    if chosen == "winograd":
        return winograd.conv2d_winograd(x, w_groups, b, geometry, blas.sgemm_batch())
    return columns.conv2d_tiles(x, w_groups, b, geometry, blas.sgemm_batch())


def conv2d(x: Array, w: Array, b: Array | None, geometry: Conv2dGeometry) -> Array:
    """torch.nn.functional.conv2d on arrays, (N, C, H, W) or (C, H, W) * (O, C/groups, kh, kw), with
    the geometry resolved once by :func:`conv2d_geometry`; the result in ``x``'s dtype. A hot-path
    kernel: it checks nothing (packrt-core's ``nn.checks.conv2d_args`` runs first)."""
    dt = np.dtype(x.dtype)
    cd = compute_dtype(dt)
    w_groups = astype(w, cd).reshape(geometry.groups, int(w.shape[0]) // geometry.groups, -1)
    bc = None if b is None else astype(b, cd)
    batched = x.ndim == 4
    xc = astype(x, cd)
    out = convolve(xc if batched else xc[None], w_groups, bc, geometry)
    return astype(out if batched else out[0], dt)
