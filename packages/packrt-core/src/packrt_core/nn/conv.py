"""Conv2d: a 2-D cross-correlation over (N, C, H, W) input, served from the im2col-ready weight."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from packrt_core.errors import DeviceError, DTypeError, ShapeError
from packrt_core.nn.linear import declare_weight_and_bias
from packrt_core.nn.module import Module
from packrt_core.nn.residency import BoundLayer, BoundWeights
from packrt_core.tensor import Tensor
from packrt_kernels_cpu import Conv2dGeometry, PackedConv2d, conv2d, conv2d_geometry, pack_conv2d

Array = Any
IntOrPair = int | Sequence[int]


def _pair(value: IntOrPair, name: str) -> tuple[int, int]:
    """torch's ``_pair``: an int stands for the same value in both spatial dims."""
    if isinstance(value, int):
        return (value, value)
    pair = tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) for v in pair):
        raise ShapeError(f"Conv2d: {name} must be an int or a pair of ints (h, w), got {value!r}")
    return (int(pair[0]), int(pair[1]))


class BoundConv2d(BoundWeights):
    """Conv2d's serving form: the weight as (groups, out/groups, in/groups * kh * kw) in the
    compute dtype (fp16/bf16 upcast once), so a forward is im2col plus one batched GEMM."""

    def build(self, layer: Module, arrays: Mapping[str, Array | None]) -> PackedConv2d:
        g = _geometry_args(layer)
        return pack_conv2d(arrays["weight"], arrays["bias"], **g)

    def serve_packed(self, layer: Module, pack: PackedConv2d, x: Array) -> Array:
        return pack.forward(x)

    def serve_raw(self, layer: Module, arrays: Mapping[str, Array | None], x: Array) -> Array:
        # Reads the bound weight in place; half precision converts for the call and is freed.
        return conv2d(x, arrays["weight"], arrays["bias"], **_geometry_args(layer))


def _geometry_args(layer: Module) -> dict[str, Any]:
    return {
        "stride": layer.stride,
        "padding": layer.padding,
        "dilation": layer.dilation,
        "groups": layer.groups,
    }


class Conv2d(BoundLayer, Module):
    """2-D convolution (cross-correlation) with torch's arguments and parameter names.

    ``weight`` is (out_channels, in_channels / groups, kh, kw) and ``bias`` (out_channels,);
    both start uniform in ±1/sqrt(fan_in), fan_in = in_channels / groups * kh * kw, as
    PyTorch initializes them. ``stride``/``dilation`` take an int or an (h, w) pair;
    ``padding`` an int, a pair, "valid" or "same" (stride 1 only); ``padding_mode`` must be
    "zeros" (the only mode packrt implements). Input is (N, C, H, W) or
    unbatched (C, H, W), in the weight's dtype and on its device.

    Weights serve through a bound object holding the im2col-ready layout; ``weight_residency``
    picks how they stay resident (default ``"packed"``: one packed copy, the raw one dropped;
    ``"borrowed"`` convolves from the raw weight on every call).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrPair,
        stride: IntOrPair = 1,
        padding: IntOrPair | str = 0,
        dilation: IntOrPair = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        *,
        dtype: Any = None,
        device: Any = None,
        weight_residency: str | None = None,
    ) -> None:
        super().__init__()
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ShapeError(
                f"Conv2d: in_channels={in_channels} and out_channels={out_channels} must both be divisible by "
                f"groups={groups} (a positive int)"
            )
        if padding_mode != "zeros":
            raise ShapeError(f"Conv2d: padding_mode={padding_mode!r} is not supported; packrt pads with 'zeros'")
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        if min(self.kernel_size) < 1:
            raise ShapeError(f"Conv2d: kernel_size must be >= 1 in both dims, got {self.kernel_size}")
        self.stride = _pair(stride, "stride")
        self.padding: tuple[int, int] | str = padding if isinstance(padding, str) else _pair(padding, "padding")
        self.dilation = _pair(dilation, "dilation")
        self.groups = int(groups)
        self.padding_mode = padding_mode
        try:  # validated once here, so a forward never meets a bad geometry
            self.geometry: Conv2dGeometry = conv2d_geometry(
                self.kernel_size, self.stride, self.padding, self.dilation, self.groups
            )
        except ValueError as err:
            raise ShapeError(f"Conv2d: {err}") from err
        kh, kw = self.kernel_size
        shape = (out_channels, in_channels // groups, kh, kw)
        declare_weight_and_bias(self, shape, in_channels // groups * kh * kw, bias, dtype, device)
        object.__setattr__(self, "_bound", BoundConv2d(weight_residency))

    def _check_input(self, x: Tensor) -> None:
        name = type(self).__name__
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} takes a packrt Tensor, got {type(x).__name__}")
        if x.ndim not in (3, 4) or x.shape[-3] != self.in_channels:
            raise ShapeError(
                f"{name} expects input (N, {self.in_channels}, H, W) or ({self.in_channels}, H, W), got shape {x.shape}"
            )
        weight: Tensor = self._parameters["weight"]  # type: ignore[assignment]
        if x.dtype is not weight.dtype:
            raise DTypeError(
                f"{name} holds {weight.dtype.name} weights but got {x.dtype.name} input: cast one to the other "
                f"(x.to({weight.dtype.name!r}) or layer.to({x.dtype.name!r}))"
            )
        if x.device != weight.device:
            raise DeviceError(f"{name}: input on {x.device}, weights on {weight.device}: move one to the other")
        try:
            self.geometry.output_size(x.shape[-2], x.shape[-1])
        except ValueError as err:
            raise ShapeError(f"{name}: {err}") from err

    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        return x._wrap(self._bound.forward(self, x._array()))

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


__all__ = ["BoundConv2d", "Conv2d"]
