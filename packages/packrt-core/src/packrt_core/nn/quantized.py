"""QuantizedLinear: a linear layer with an int8 weight and one float32 scale per output channel.

Weight-only quantization: ``y = (x @ q^T) * scale + bias`` with activations kept in floating
point. The scale multiplies the (batch, out) product rather than the weight, so no float copy
of the weight is ever resident; the int8 rows are converted block by block during a forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from packrt_core.creation import empty, tensor
from packrt_core.dtypes import as_dtype, float32, int8
from packrt_core.errors import DeviceError, DTypeError, ShapeError, StateDictError
from packrt_core.meta import declaring
from packrt_core.nn.linear import Linear
from packrt_core.nn.module import Module
from packrt_core.nn.parameter import Parameter
from packrt_core.nn.residency import BoundLayer, BoundWeights
from packrt_core.tensor import Tensor
from packrt_kernels_cpu import PackedQuantizedLinear, pack_quantized_linear, quantize_per_channel
from packrt_kernels_cpu.quantize import DEFAULT_SCRATCH_BYTES

Array = Any


class BoundQuantizedLinear(BoundWeights):
    """QuantizedLinear's serving form: the int8 matrix, the scales and the bias, contiguous
    and owned. Borrowed serves from the bound arrays themselves (no copy)."""

    declared = ("weight", "scale", "bias")

    def build(self, layer: Module, arrays: Mapping[str, Array | None]) -> PackedQuantizedLinear:
        return pack_quantized_linear(arrays["weight"], arrays["scale"], arrays["bias"])

    def serve_packed(self, layer: Module, pack: PackedQuantizedLinear, x: Array) -> Array:
        return pack.forward(x)

    def serve_raw(self, layer: Module, arrays: Mapping[str, Array | None], x: Array) -> Array:
        # The pack class copies nothing when constructed directly: a view over the bound arrays.
        view = PackedQuantizedLinear(arrays["weight"], arrays["scale"], arrays["bias"], DEFAULT_SCRATCH_BYTES)
        return view.forward(x)

    def pack_nbytes(self, layer: Module) -> int:
        return sum(p.nbytes for _, p in self._params(layer))


# What each declared tensor must hold; copy mode converts anything else except the int8 weight.
_EXPECTED = {"weight": int8, "scale": float32, "bias": float32}


class QuantizedLinear(BoundLayer, Module):
    """``y = (x @ weight.T) * scale + bias`` with ``weight`` int8 (out_features, in_features),
    ``scale`` float32 (out_features,) and ``bias`` float32 (out_features,) or None.

    Weight-only int8: the input stays floating point and the output has the input's dtype.
    float32 and float64 inputs compute in their own precision; float16 and bfloat16 inputs
    compute in float32 and round once at the end (numpy has no fast half GEMM).

    A fresh layer holds a PyTorch-style Linear initialization (uniform in
    ±1/sqrt(in_features)) quantized per output channel; :meth:`from_float` quantizes an
    existing :class:`~packrt_core.nn.Linear`. The int8 weight cannot change dtype: ``to(dtype)``,
    ``half()``, ``float()`` and the other casts raise DTypeError on a tree holding this layer,
    and leave the whole tree as it was. Default residency ``"packed"``.
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
        if dtype is not None and as_dtype(dtype) is not float32:
            raise DTypeError(
                f"QuantizedLinear keeps an int8 weight with float32 scale and bias; dtype={dtype!r} cannot apply "
                "(leave dtype=None; inputs of any floating dtype are accepted)"
            )
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        if declaring():  # meta init: storage-free declarations for load_state_dict(assign=True)
            weight = empty(out_features, in_features, dtype=int8, device=device)
            scale = empty(out_features, dtype=float32, device=device)
            b = empty(out_features, dtype=float32, device=device) if bias else None
        else:
            bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
            w = empty(out_features, in_features, dtype=float32).uniform_(-bound, bound)
            q, s = quantize_per_channel(w.numpy())
            weight, scale = tensor(q, device=device), tensor(s, device=device)
            b = empty(out_features, dtype=float32, device=device).uniform_(-bound, bound) if bias else None
        self.weight = Parameter(weight)
        self.scale = Parameter(scale)
        if b is not None:
            self.bias = Parameter(b)
        else:
            self.register_parameter("bias", None)
        object.__setattr__(self, "_bound", BoundQuantizedLinear(weight_residency))

    @classmethod
    def from_float(cls, linear: Linear, *, weight_residency: str | None = None) -> QuantizedLinear:
        """A QuantizedLinear of ``linear``'s weight (symmetric int8, one float32 scale per
        output row, ``|w - q * scale| <= scale / 2``), with its bias as float32, on its device.
        ValueError when the weight holds NaN or infinity."""
        if not isinstance(linear, Linear):
            raise TypeError(f"QuantizedLinear.from_float takes a packrt.nn.Linear, got {type(linear).__name__}")
        weight: Tensor = linear._parameters["weight"]  # type: ignore[assignment]
        try:
            q, s = quantize_per_channel(weight.cpu().numpy())
        except ValueError as err:
            raise ValueError(f"QuantizedLinear.from_float: cannot quantize the Linear's weight: {err}") from err
        device = weight.device
        bias = linear._parameters.get("bias")
        fresh = cls.__new__(cls)
        Module.__init__(fresh)
        fresh.in_features, fresh.out_features = linear.in_features, linear.out_features
        fresh.weight = Parameter(tensor(q, device=device))
        fresh.scale = Parameter(tensor(s, device=device))
        if bias is not None:
            fresh.bias = Parameter(bias.to(float32).clone())
        else:
            fresh.register_parameter("bias", None)
        object.__setattr__(fresh, "_bound", BoundQuantizedLinear(weight_residency))
        return fresh

    # -- Module hooks --------------------------------------------------------------------------
    def _check_placement(self, path: str, device: Any, dtype: Any) -> None:
        if dtype is not None:
            raise DTypeError(
                f"{path or '<root>'} ({type(self).__name__}): int8 weights cannot change dtype, so the tree cannot be "
                f"cast to {dtype.name}; nothing was changed. Cast the other layers one by one, or quantize "
                "after casting"
            )

    def _prepare_load(
        self, path: str, incoming: Mapping[str, Tensor], assign: bool, pack: bool, residency: str | None
    ) -> Callable[[], None] | None:
        prefix = f"{path}." if path else ""
        problems = []
        for name, value in incoming.items():
            expected = _EXPECTED.get(name)
            if expected is None:
                continue
            # Copy mode converts on the way, which would silently truncate a float weight to int8.
            strict = name == "weight" or assign
            if strict and value.dtype is not expected:
                problems.append(
                    f"{prefix}{name}: QuantizedLinear expects {expected.name}, the checkpoint has {value.dtype.name}"
                    + (" (quantize a float Linear with QuantizedLinear.from_float)" if name == "weight" else "")
                )
        if problems:
            raise StateDictError("; ".join(problems))
        return super()._prepare_load(path, incoming, assign, pack, residency)

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} takes a packrt Tensor, got {type(x).__name__}")
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ShapeError(f"{name} expects input (..., {self.in_features}), got shape {x.shape}")
        if not x.dtype.is_floating_point:
            raise DTypeError(
                f"{name} takes floating-point input (weight-only int8), got {x.dtype.name}: cast it with x.float()"
            )
        weight: Tensor = self._parameters["weight"]  # type: ignore[assignment]
        if x.device != weight.device:
            raise DeviceError(f"{name}: input on {x.device}, weights on {weight.device}: move one to the other")
        return x._wrap(self._bound.forward(self, x._array()))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


__all__ = ["BoundQuantizedLinear", "QuantizedLinear"]
