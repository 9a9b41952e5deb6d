"""conv2d's Winograd road: F(2x2, 3x3) (Lavin and Gray, 2015) for 3x3 convolutions of stride 1 and
dilation 1, on the compiled path.

Each 2x2 block of output pixels of one output channel is ``A^T [sum over c of U_oc * V_c] A``, with
``V_c = B^T d_c B`` the transform of the 4x4 input tile ``d_c`` under the block and ``U_oc = G g_oc G^T``
the transform of the 3x3 weight: per tile and channel pair 16 multiplies instead of 36. Grouped by
the 16 transformed positions, the sum over channels is 16 GEMMs (O, C) @ (C, tiles), one batched
call a band; the transforms are adds and subtracts (and halves, in ``G``). The result differs from
the direct sum by rounding only: the transforms' coefficients are 0, +-1 and +-1/2, and the weight's
transform is computed in float64. A 32-channel 3x3 layer on 8x32x64x64: one thread 5.25 ms by
columns, 4.5 by shifted taps, 3.85 this way; two threads 3.4, 2.9, 2.1 (torch's in the same net:
3.85 and 1.87 ms).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt_base.geometry import Conv2dGeometry
from packrt_kernels_cpu import blas, fused, tiles

Array = Any

_MIN_CHANNELS = 8  # input channels a group from which the road pays: at 8 as fast as columns on one thread,
# 1.35x on two; at 3 (an RGB input) columns are 1.8x faster
_BAND_BYTES = 1 << 20  # a band's transformed input and products, 16 * (C + O) floats a tile: in L2


def applies(x: Array, geometry: Conv2dGeometry) -> bool:
    """Whether conv2d takes this road: a 3x3 kernel, stride 1, dilation 1, float32, 8 input channels
    a group or more, and MKL's batched GEMM loaded (numba too: the caller checks ``fused.handles``)."""
    return (
        geometry.kernel_size == (3, 3)
        and geometry.stride == (1, 1)
        and geometry.dilation == (1, 1)
        and x.dtype == np.float32
        and int(x.shape[1]) // geometry.groups >= _MIN_CHANNELS
        and blas.sgemm_batch() is not None
    )


def conv2d_winograd(x: Array, w_groups: Array, b: Array | None, geometry: Conv2dGeometry) -> Array:
    """The convolution of a float32 C-contiguous (N, C, H, W) ``x`` by ``w_groups`` (G, O/G, C/G * 9)
    plus ``b`` (O,) or None, as (N, O, OH, OW) float32. Bands of tile rows are shared out by
    :func:`tiles.run_tiles`, each thread's in one compiled call (``fused.winograd_tiles``)."""
    n, c, h, w = (int(s) for s in x.shape)
    oh, ow = geometry.output_size(h, w)
    g, og, _ = (int(s) for s in w_groups.shape)
    outs = g * og
    top, _, left, _ = geometry.padding
    tile_rows, tw = -(-oh // 2), -(-ow // 2)
    u = fused.winograd_weight(w_groups)
    bias = np.zeros(outs, np.float32) if b is None else np.ascontiguousarray(b, np.float32)
    band = tiles.even_band(tile_rows, _BAND_BYTES // (4 * 16 * (c + outs) * tw))
    out = np.empty((n, outs, oh, ow), np.float32)
    gemm = blas.sgemm_batch()

    def run(part: list[tiles.Tile]) -> None:
        with blas.one_thread():
            fused.winograd_tiles(x, u, bias, np.array(part, np.int64), (top, left), band, out, gemm)

    tiles.run_tiles(run, n, tile_rows, band)
    return out
