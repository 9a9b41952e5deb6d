"""QuantizedLinear: a linear layer with an int8 weight and one float32 scale per output channel.

``y = (x @ (q * scale)^T) + bias`` computed through int8: each row of a float32 (or half) input is
quantized onto uint8 at run time (dynamic quantization), multiplied by the int8 weight into int32,
and dequantized with both scales and the bias in one pass. No float copy of the weight is ever
resident. float64 inputs keep activations in floating point (weight-only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from packrt_base.kernels import Kernels, Pack
from packrt_core import dispatch
from packrt_core.creation import empty
from packrt_core.dtypes import as_dtype, float32, int8
from packrt_core.errors import DTypeError, StateDictError
from packrt_core.nn import checks
from packrt_core.nn.linear import AffineLayer, Linear, declare, uniform_weight_and_bias
from packrt_core.nn.packed import PackedLayer
from packrt_core.tensor import Tensor

Array = Any


# What each declared tensor must hold; copy mode converts anything else except the int8 weight.
_EXPECTED = {"weight": int8, "scale": float32, "bias": float32}


class QuantizedLinear(AffineLayer):
    """``y = (x @ weight.T) * scale + bias`` with ``weight`` int8 (out_features, in_features),
    ``scale`` float32 (out_features,) and ``bias`` float32 (out_features,) or None.

    Dynamic int8: a float32, float16 or bfloat16 input is quantized per row (asymmetric uint8,
    its range widened to hold 0), multiplied in int32 and dequantized to float32, then rounded
    once to the input's dtype. Each output differs from ``x @ (q * scale)^T + bias`` by at most
    half its row's activation step (``(max(0, row) - min(0, row)) / 255``) times the L1 norm of
    its dequantized weight row. float64 inputs keep activations in float64 (weight-only int8).
    The output has the input's dtype.

    A fresh layer holds a PyTorch-style Linear initialization (uniform in
    ±1/sqrt(in_features)) quantized per output channel; :meth:`from_float` quantizes an
    existing :class:`~packrt_core.nn.Linear`. The int8 weight cannot change dtype: ``to(dtype)``,
    ``half()``, ``float()`` and the other casts raise DTypeError on a tree holding this layer,
    and leave the whole tree as it was. Default residency ``"packed"``: the pack is the int8
    matrix, the scales and the bias, contiguous and owned; ``borrowed`` serves from the bound
    arrays themselves (no copy).
    """

    declared = ("weight", "scale", "bias")

    def _declare(self, bias: bool, dtype: Any, device: Any) -> None:
        """PyTorch's Linear initialization in float32, quantized per output channel on its device
        (storage-free int8 and float32 declarations under meta init)."""
        if dtype is not None and as_dtype(dtype) is not float32:
            raise DTypeError(
                f"QuantizedLinear keeps an int8 weight with float32 scale and bias; dtype={dtype!r} cannot apply "
                "(leave dtype=None; inputs of any floating dtype are accepted)"
            )
        shape = (self.out_features, self.in_features)
        w, b = uniform_weight_and_bias(shape, self.in_features, bias, float32, device)
        if w.has_storage:
            q, s = dispatch.kernels_for(w.device).quantize_per_channel(w._array())
            weight, scale = w._wrap(q), w._wrap(s)
        else:  # meta init: storage-free declarations for load_state_dict(assign=True)
            weight, scale = empty(*shape, dtype=int8, device=device), empty(shape[0], dtype=float32, device=device)
        declare(self, weight=weight, scale=scale, bias=b)

    def _pack(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        pack: Pack = kernels.pack_quantized_linear(arrays["weight"], arrays["scale"], arrays["bias"])
        return pack

    def _borrow(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        view: Pack = kernels.borrow_quantized_linear(arrays["weight"], arrays["scale"], arrays["bias"])
        return view

    def _pack_nbytes(self) -> int:
        return sum(p.nbytes for _, p in self._declared_params())

    @classmethod
    def from_float(cls, linear: Linear, *, weight_residency: str | None = None) -> QuantizedLinear:
        """A QuantizedLinear of ``linear``'s weight (symmetric int8, one float32 scale per
        output row, ``|w - q * scale| <= scale / 2``), with its bias as float32, on its device.
        ValueError when the weight holds NaN or infinity."""
        if not isinstance(linear, Linear):
            raise TypeError(f"QuantizedLinear.from_float takes a packrt.nn.Linear, got {type(linear).__name__}")
        weight: Tensor = linear._parameters["weight"]  # type: ignore[assignment]
        try:
            q, s = dispatch.kernels_for(weight.device).quantize_per_channel(weight._array())
        except ValueError as err:
            raise ValueError(f"QuantizedLinear.from_float: cannot quantize the Linear's weight: {err}") from err
        bias = linear._parameters.get("bias")
        fresh = cls.__new__(cls)
        PackedLayer.__init__(fresh, weight_residency)
        fresh.in_features, fresh.out_features = linear.in_features, linear.out_features
        b = None if bias is None else bias.to(float32).clone()
        declare(fresh, weight=weight._wrap(q), scale=weight._wrap(s), bias=b)
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
        checks.linear_input(name, x, self.in_features, self._parameters["weight"], dtype=False)  # type: ignore[arg-type]
        if not x.dtype.is_floating_point:
            raise DTypeError(
                f"{name} takes floating-point input (weight-only int8), got {x.dtype.name}: cast it with x.float()"
            )
        return self._serve(x)


__all__ = ["QuantizedLinear"]
