"""2-D convolution (cross-correlation, NCHW) with torch's argument semantics: :func:`conv2d`, the
geometry it takes (:func:`conv2d_geometry`), and the pieces the conv packs use.

Input is (N, C, H, W) or unbatched (C, H, W); the weight (O, C / groups, kh, kw). The road a call
takes (Winograd F(2x2, 3x3) or im2col columns, whole-batch or band by band) is chosen in one place,
:func:`packrt_kernels_cpu.conv.roads.road`, which says when each applies.
"""

from packrt_base.geometry import Conv2dGeometry
from packrt_kernels_cpu.conv.columns import im2col
from packrt_kernels_cpu.conv.geometry import check_conv2d_weight, conv2d_geometry
from packrt_kernels_cpu.conv.roads import conv2d, convolve, road

__all__ = ["Conv2dGeometry", "check_conv2d_weight", "conv2d", "conv2d_geometry", "convolve", "im2col", "road"]
