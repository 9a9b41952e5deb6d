"""Conv2d: a 2-D cross-correlation over (N, C, H, W) input, served from the im2col-ready weight."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from packrt_base.kernels import Kernels, Pack
from packrt_core import dispatch
from packrt_core.errors import ShapeError
from packrt_core.nn import checks
from packrt_core.nn.linear import declare_weight_and_bias
from packrt_core.nn.packed import PackedLayer
from packrt_core.tensor import Tensor

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


class Conv2d(PackedLayer):
    """2-D convolution (cross-correlation) with torch's arguments and parameter names.

    ``weight`` is (out_channels, in_channels / groups, kh, kw) and ``bias`` (out_channels,);
    both start uniform in ±1/sqrt(fan_in), fan_in = in_channels / groups * kh * kw, as
    PyTorch initializes them. ``stride``/``dilation`` take an int or an (h, w) pair;
    ``padding`` an int, a pair, "valid" or "same" (stride 1 only); ``padding_mode`` must be
    "zeros" (the only mode packrt implements). Input is (N, C, H, W) or
    unbatched (C, H, W), in the weight's dtype and on its device.

    The pack holds the weight as (groups, out/groups, in/groups * kh * kw) in the compute dtype
    (fp16/bf16 upcast once), so no forward reshapes or converts it; a forward is the device's
    ``conv2d`` kernel, which picks its own road (on the CPU: Winograd F(2x2, 3x3) for 3x3 stride-1
    layers of 8 input channels a group or more with MKL, otherwise im2col columns and GEMMs, see
    ``packrt_kernels_cpu.conv.roads``), with torch's results up to float rounding; ``weight_residency``
    picks how the weights stay resident (default ``"packed"``: one packed copy, the raw one dropped;
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
        super().__init__(weight_residency)
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
        kh, kw = self.kernel_size
        shape = (out_channels, in_channels // groups, kh, kw)
        declare_weight_and_bias(self, shape, in_channels // groups * kh * kw, bias, dtype, device)
        # Validated once here, by the backend of the weights' device, so a forward never meets a bad geometry.
        with dispatch.kernel_errors("Conv2d"):
            self.geometry = self._kernels().conv2d_geometry(
                self.kernel_size, self.stride, self.padding, self.dilation, self.groups
            )

    def _pack(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        pack: Pack = kernels.pack_conv2d(arrays["weight"], arrays["bias"], self.geometry)
        return pack

    def _borrow(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        # Reads the bound weight in place; half precision converts for the call and is freed.
        view: Pack = kernels.borrow_conv2d(arrays["weight"], arrays["bias"], self.geometry)
        return view

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        checks.require_tensor(name, x)
        if x.ndim not in (3, 4) or x.shape[-3] != self.in_channels:
            raise ShapeError(
                f"{name} expects input (N, {self.in_channels}, H, W) or ({self.in_channels}, H, W), got shape {x.shape}"
            )
        checks.matches_weights(name, x, self._parameters["weight"])  # type: ignore[arg-type]
        with dispatch.kernel_errors(name):
            self.geometry.output_size(x.shape[-2], x.shape[-1])
        return self._serve(x)

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


__all__ = ["Conv2d"]
