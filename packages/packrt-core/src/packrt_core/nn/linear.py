"""Linear: ``y = x W^T + b``, served through a bound object that packs W for the BLAS call."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from packrt_core.creation import empty
from packrt_core.errors import DeviceError, DTypeError, ShapeError
from packrt_core.nn.module import Module
from packrt_core.nn.parameter import Parameter
from packrt_core.nn.residency import BoundLayer, BoundWeights
from packrt_core.tensor import Tensor
from packrt_kernels_cpu import PackedLinear, linear_borrowed, pack_linear

Array = Any


def check_input(layer: str, x: Tensor, in_features: int, weight: Tensor) -> None:
    """The mistakes a caller makes most, named before a kernel sees them."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{layer} takes a packrt Tensor, got {type(x).__name__}")
    if x.ndim == 0 or x.shape[-1] != in_features:
        raise ShapeError(f"{layer} expects input (..., {in_features}), got shape {x.shape}")
    if x.dtype is not weight.dtype:
        raise DTypeError(
            f"{layer} holds {weight.dtype.name} weights but got {x.dtype.name} input: cast one to the other "
            f"(x.to({weight.dtype.name!r}) or layer.to({x.dtype.name!r}))"
        )
    if x.device != weight.device:
        raise DeviceError(f"{layer}: input on {x.device}, weights on {weight.device}: move one to the other")


def declare_weight_and_bias(
    layer: Module, shape: tuple[int, ...], fan_in: int, bias: bool, dtype: Any, device: Any
) -> None:
    """``layer.weight`` of ``shape`` and ``layer.bias`` (or an empty slot), uniform in
    ±1/sqrt(fan_in) as PyTorch initializes Linear and Conv2d; storage-free under meta init."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    layer.weight = Parameter(empty(*shape, dtype=dtype, device=device).uniform_(-bound, bound))
    if bias:
        layer.bias = Parameter(empty(shape[0], dtype=dtype, device=device).uniform_(-bound, bound))
    else:
        layer.register_parameter("bias", None)


class BoundLinear(BoundWeights):
    """Linear's serving form: W^T contiguous in the compute dtype (fp16/bf16 upcast once)."""

    def build(self, layer: Module, arrays: Mapping[str, Array | None]) -> PackedLinear:
        return pack_linear(arrays["weight"], arrays["bias"])

    def serve_packed(self, layer: Module, pack: PackedLinear, x: Array) -> Array:
        return pack.forward(x)

    def serve_raw(self, layer: Module, arrays: Mapping[str, Array | None], x: Array) -> Array:
        return linear_borrowed(x, arrays["weight"], arrays["bias"])


class Linear(BoundLayer, Module):
    """``y = x @ weight.T + bias`` with ``weight`` (out_features, in_features) and ``bias``
    (out_features,), initialized as PyTorch does (uniform in ±1/sqrt(in_features)).

    Weights serve through a bound object; ``weight_residency`` picks how they stay resident
    (default ``"packed"``: one packed copy, the raw one dropped). Built under
    :func:`packrt.meta_init` it declares storage-free weights for ``load_state_dict(assign=True)``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        dtype: Any = None,
        device: Any = None,
        weight_residency: str | None = None,
    ) -> None:
        super().__init__()
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        declare_weight_and_bias(self, (out_features, in_features), in_features, bias, dtype, device)
        object.__setattr__(self, "_bound", BoundLinear(weight_residency))

    def forward(self, x: Tensor) -> Tensor:
        weight: Tensor = self._parameters["weight"]  # type: ignore[assignment]
        check_input(type(self).__name__, x, self.in_features, weight)
        return x._wrap(self._bound.forward(self, x._array()))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
