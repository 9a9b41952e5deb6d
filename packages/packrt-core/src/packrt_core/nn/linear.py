"""Linear: ``y = x W^T + b``, served from a pack that holds W^T for the BLAS call."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from packrt_base.kernels import Kernels, Pack
from packrt_core.creation import empty
from packrt_core.nn import checks
from packrt_core.nn.module import Module
from packrt_core.nn.packed import PackedLayer
from packrt_core.nn.parameter import Parameter
from packrt_core.tensor import Tensor

Array = Any


def uniform_weight_and_bias(
    shape: tuple[int, ...], fan_in: int, bias: bool, dtype: Any, device: Any
) -> tuple[Tensor, Tensor | None]:
    """A weight of ``shape`` and a bias (or None), uniform in ±1/sqrt(fan_in) as PyTorch
    initializes Linear and Conv2d; storage-free under meta init."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    weight = empty(*shape, dtype=dtype, device=device).uniform_(-bound, bound)
    return weight, empty(shape[0], dtype=dtype, device=device).uniform_(-bound, bound) if bias else None


def declare(layer: Module, **tensors: Tensor | None) -> None:
    """Register each of ``tensors`` as a Parameter of ``layer`` in the order given (None: an empty slot)."""
    for name, value in tensors.items():
        layer.register_parameter(name, None if value is None else Parameter(value))


def declare_weight_and_bias(
    layer: Module, shape: tuple[int, ...], fan_in: int, bias: bool, dtype: Any, device: Any
) -> None:
    """``layer.weight`` and ``layer.bias`` (or an empty slot) of :func:`uniform_weight_and_bias`."""
    weight, b = uniform_weight_and_bias(shape, fan_in, bias, dtype, device)
    declare(layer, weight=weight, bias=b)


class AffineLayer(PackedLayer):
    """The shape every ``in_features -> out_features`` layer shares (:class:`Linear`,
    :class:`~packrt_core.nn.QuantizedLinear`): the sizes, the constructor's arguments and the repr.
    A subclass declares its weights in :meth:`_declare`."""

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
        super().__init__(weight_residency)
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self._declare(bias, dtype, device)

    def _declare(self, bias: bool, dtype: Any, device: Any) -> None:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Linear(AffineLayer):
    """``y = x @ weight.T + bias`` with ``weight`` (out_features, in_features) and ``bias``
    (out_features,), initialized as PyTorch does (uniform in ±1/sqrt(in_features)).

    The pack is W^T contiguous in the compute dtype (fp16/bf16 upcast once); ``weight_residency``
    picks how the weights stay resident (default ``"packed"``: one packed copy, the raw one
    dropped). Built under :func:`packrt.meta_init` it declares storage-free weights for
    ``load_state_dict(assign=True)``.
    """

    def _declare(self, bias: bool, dtype: Any, device: Any) -> None:
        declare_weight_and_bias(self, (self.out_features, self.in_features), self.in_features, bias, dtype, device)

    def _pack(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        pack: Pack = kernels.pack_linear(arrays["weight"], arrays["bias"])
        return pack

    def _borrow(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        view: Pack = kernels.borrow_linear(arrays["weight"], arrays["bias"])
        return view

    def forward(self, x: Tensor) -> Tensor:
        checks.linear_input(type(self).__name__, x, self.in_features, self._parameters["weight"])  # type: ignore[arg-type]
        return self._serve(x)


__all__ = ["AffineLayer", "Linear", "declare", "declare_weight_and_bias", "uniform_weight_and_bias"]
