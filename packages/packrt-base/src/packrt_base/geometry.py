"""A convolution's geometry, resolved once: the value ``conv2d_geometry`` returns and ``conv2d`` takes.

It is part of the kernels contract because both ends of it are kernels of possibly different
backends: packrt-core asks a device's ``conv2d_geometry`` once per layer and hands the result
to that device's ``conv2d`` and packs on every call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from packrt_base.errors import KernelShapeError

IntPair = int | Sequence[int]
Padding = int | Sequence[int] | str


@dataclass(frozen=True)
class Conv2dGeometry:
    """Everything about a convolution except the data: kernel size, stride, padding, dilation, groups.

    ``padding`` is explicit per side: (top, bottom, left, right).
    """

    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int]
    groups: int

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """(OH, OW) for an input of ``height`` x ``width``; ValueError when either would be < 1."""
        top, bottom, left, right = self.padding
        (kh, kw), (sh, sw), (dh, dw) = self.kernel_size, self.stride, self.dilation
        oh = (height + top + bottom - dh * (kh - 1) - 1) // sh + 1
        ow = (width + left + right - dw * (kw - 1) - 1) // sw + 1
        if oh < 1 or ow < 1:
            raise KernelShapeError(
                f"conv2d output would be {oh}x{ow}: the input {height}x{width} (padded by {self.padding}) "
                f"is smaller than the dilated kernel {dh * (kh - 1) + 1}x{dw * (kw - 1) + 1}; "
                f"pad the input or use a smaller kernel/dilation"
            )
        return oh, ow


__all__ = ["Conv2dGeometry", "IntPair", "Padding"]
