"""The argument checks layers and ``nn.functional`` share: what a caller gets wrong most,
named before a kernel sees it (which input, what was expected, what came, and the fix)."""

from __future__ import annotations

from typing import Any

from packrt_core.errors import DeviceError, DTypeError, ShapeError
from packrt_core.tensor import Tensor


def require_tensor(where: str, value: Any, what: str = "a packrt Tensor") -> None:
    """TypeError unless ``value`` is a packrt Tensor."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{where} takes {what}, got {type(value).__name__}")


def require_float(fn: str, t: Tensor, name: str = "input") -> None:
    """DTypeError unless ``t`` is floating point."""
    if not t.dtype.is_floating_point:
        raise DTypeError(
            f"{fn}: {name} has dtype {t.dtype.name}; expected float16, bfloat16, float32 or float64 "
            f"(convert it with {name}.float() first)"
        )


def matches_weights(layer: str, x: Tensor, weight: Tensor, *, dtype: bool = True, what: str = "input") -> None:
    """The input shares the weights' device (and, with ``dtype``, their dtype)."""
    if dtype and x.dtype is not weight.dtype:
        raise DTypeError(
            f"{layer} holds {weight.dtype.name} weights but got {x.dtype.name} {what}: cast one to the other "
            f"(x.to({weight.dtype.name!r}) or layer.to({x.dtype.name!r}))"
        )
    if x.device != weight.device:
        raise DeviceError(f"{layer}: {what} on {x.device}, weights on {weight.device}: move one to the other")


def linear_input(layer: str, x: Any, in_features: int, weight: Tensor, *, dtype: bool = True) -> None:
    """A (..., in_features) tensor for a linear layer holding ``weight``."""
    require_tensor(layer, x)
    if x.ndim == 0 or x.shape[-1] != in_features:
        raise ShapeError(f"{layer} expects input (..., {in_features}), got shape {x.shape}")
    matches_weights(layer, x, weight, dtype=dtype)


def operands(fn: str, *named: tuple[str, Tensor | None]) -> list[Any]:
    """The storage arrays of ``named`` tensors (None stays None), after checking each is a Tensor
    on the first one's device."""
    ref_name, ref = named[0]
    arrays: list[Any] = []
    for name, value in named:
        if value is None:
            arrays.append(None)
            continue
        if not isinstance(value, Tensor):
            raise TypeError(
                f"{fn}: {name} must be a packrt Tensor, got {type(value).__name__} (make one with packrt.tensor(...))"
            )
        assert ref is not None  # the first operand is always required
        if value.device != ref.device:
            raise DeviceError(
                f"{fn}: {name} is on {value.device} but {ref_name} is on {ref.device}; move {name} to "
                f"{ref_name}'s device first ({name}.to({ref_name}.device))"
            )
        arrays.append(value._array())
    return arrays
