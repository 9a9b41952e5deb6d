"""Layers without weights: ReLU, GELU, SiLU, Sigmoid, Softmax and Dropout.

Each wraps the function of the same name in :mod:`packrt_core.nn.functional`, holds no
parameters or buffers (so its ``state_dict()`` is empty, as in torch), and prints its
settings the way torch's layer does (``GELU(approximate='tanh')``, ``Dropout(p=0.1, inplace=False)``).
Bad settings are refused when the layer is built, not at the first forward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from packrt_core.nn import functional as F  # noqa: N812 - torch's conventional alias
from packrt_core.nn.module import Module
from packrt_core.tensor import Tensor


def _require_bool(value: Any, layer: str, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{layer}: {name} must be a bool, got {type(value).__name__} ({value!r})")
    return value


class _Elementwise(Module):
    """An elementwise activation that may overwrite its input: ``inplace=True`` writes the result
    into the input and returns it. A subclass names its function in ``_function``."""

    _function: Callable[..., Tensor]

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = _require_bool(inplace, type(self).__name__, "inplace")

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._function(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_Elementwise):
    """``max(x, 0)`` elementwise. ``inplace=True`` overwrites the input and returns it."""

    _function = staticmethod(F.relu)


class GELU(Module):
    """GELU: exact (``approximate="none"``, the default) or the tanh approximation (``"tanh"``)."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(_Elementwise):
    """SiLU (swish), ``x * sigmoid(x)``. ``inplace=True`` overwrites the input and returns it."""

    _function = staticmethod(F.silu)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` elementwise."""

    def forward(self, input: Tensor) -> Tensor:
        return F.sigmoid(input)


class Softmax(Module):
    """Softmax along ``dim``. ``dim`` must be given (torch's ``dim=None`` guess is deprecated there)."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        if dim is None or isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"Softmax: dim must be an int naming the axis to normalize over (usually -1), got {dim!r}")
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Dropout(Module):
    """Zeroes each element with probability ``p`` in training mode and scales the rest by ``1/(1-p)``.

    In eval mode (``model.eval()``, what serving uses) it is the identity and returns its input
    object unchanged. Training-mode draws come from packrt's generator (``packrt.manual_seed``).
    Note that a new Module starts in training mode, as in torch.
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not isinstance(p, int | float) or isinstance(p, bool) or not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"Dropout: p (the drop probability) must be between 0 and 1, got {p!r}")
        self.p = p
        self.inplace = _require_bool(inplace, "Dropout", "inplace")

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


__all__ = ["GELU", "Dropout", "ReLU", "SiLU", "Sigmoid", "Softmax"]
