"""A convolution's geometry, validated once with torch's argument semantics, and the weight check.

``stride``, ``dilation`` take an int or an (h, w) pair; ``padding`` takes an int, an (h, w) pair, or
the strings "valid" (none) and "same" (output size = input size; stride 1 only; an odd total goes to
the bottom/right, as torch does). ``groups`` splits the channels into independent convolutions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt_base.arrays import Array, require_ndim, require_same_dtype, require_shape
from packrt_base.geometry import Conv2dGeometry, IntPair, Padding
from packrt_kernels_cpu.errors import KernelShapeError


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
