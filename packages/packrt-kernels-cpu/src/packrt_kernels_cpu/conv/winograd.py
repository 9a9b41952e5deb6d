"""conv2d's Winograd road: F(2x2, 3x3) (Lavin and Gray, 2015) for 3x3 convolutions of stride 1 and
dilation 1, on the compiled path with MKL's batched GEMM.

Each 2x2 block of output pixels of one output channel is ``A^T [sum over c of U_oc * V_c] A``, with
``V_c = B^T d_c B`` the transform of the 4x4 input tile ``d_c`` under the block and ``U_oc = G g_oc G^T``
the transform of the 3x3 weight: per tile and channel pair 16 multiplies instead of 36. Grouped by
the 16 transformed positions, the sum over channels is 16 GEMMs (O, C) @ (C, tiles), one batched
call a band; the transforms are adds and subtracts (and halves, in ``G``). The result differs from
the direct sum by rounding only: the transforms' coefficients are 0, +-1 and +-1/2, and the weight's
transform is computed in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt_base.arrays import Array
from packrt_base.geometry import Conv2dGeometry
from packrt_kernels_cpu import compiled, scratch, threads
from packrt_kernels_cpu.conv import tiles

_BAND_BYTES = 1 << 20  # a band's transformed input and products, 16 * (C + O) floats a tile: in L2


def _compiled() -> Any:
    """The compiled loops (numba is loaded by then: this road is taken behind ``fused.handles``)."""
    return compiled.module("packrt_kernels_cpu.conv._numba")


def transformed_weight(w_groups: Array) -> Array:
    """The transformed weight (G, 16, O/G, C/G) float32 of a float32 conv weight ``w_groups``
    (G, O/G, C/G * 9): each 3x3 kernel's ``G k G^T``, in float64 rounded once."""
    g, og, k = (int(s) for s in w_groups.shape)
    u = np.empty((g, og, k // 9, 16), np.float32)
    _compiled().winograd_weight(np.ascontiguousarray(w_groups, np.float32), u)
    return np.ascontiguousarray(u.transpose(0, 3, 1, 2))


def conv2d_winograd(x: Array, w_groups: Array, b: Array | None, geometry: Conv2dGeometry, gemm: Any) -> Array:
    """The convolution of a float32 C-contiguous (N, C, H, W) ``x`` by ``w_groups`` (G, O/G, C/G * 9)
    plus ``b`` (O,) or None, as (N, O, OH, OW) float32. Bands of tile rows are shared out by
    :func:`tiles.run_tiles`, each thread's in one compiled call running ``gemm`` (MKL's
    ``cblas_sgemm_batch_strided``, :func:`blas.sgemm_batch`)."""
    n, c, h, w = (int(s) for s in x.shape)
    oh, ow = geometry.output_size(h, w)
    g, og, _ = (int(s) for s in w_groups.shape)
    outs = g * og
    top, _, left, _ = geometry.padding
    tile_rows, tw = -(-oh // 2), -(-ow // 2)
    u = transformed_weight(w_groups)
    bias = np.zeros(outs, np.float32) if b is None else np.ascontiguousarray(b, np.float32)
    band = tiles.even_band(tile_rows, _BAND_BYTES // (4 * 16 * (c + outs) * tw))
    out = np.empty((n, outs, oh, ow), np.float32)
    loops = _compiled()

    def run(part: list[tiles.Tile]) -> None:
        buffer = scratch.scratch_f32((loops.winograd_scratch_size(c, outs, band, tw),))
        with threads.on_this_thread():
            loops.winograd_tiles(x, u, bias, np.array(part, np.int64), top, left, out, buffer, gemm)

    tiles.run_tiles(run, n, tile_rows, band)
    return out
