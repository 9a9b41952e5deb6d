"""Parameter and Buffer: tensors a module registers as learned weights or as state."""

from __future__ import annotations

from packrt_core.tensor import Tensor


def _adopt_or_empty(obj: Tensor, data: Tensor | None, kind: str) -> None:
    if data is None:
        from packrt_core.creation import empty

        data = empty(0)
    if not isinstance(data, Tensor):
        raise TypeError(f"{kind} wraps a packrt Tensor, got {type(data).__name__}: make one with packrt.tensor(...)")
    obj._adopt(data)


class Parameter(Tensor):
    """A tensor a module owns as a weight. ``Parameter(t)`` shares ``t``'s storage.

    Assigning one to a module attribute registers it; it then shows in ``parameters()``
    and ``state_dict()``. packrt has no autograd, so there is no ``requires_grad``.
    """

    def __init__(self, data: Tensor | None = None) -> None:
        _adopt_or_empty(self, data, "Parameter")

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class Buffer(Tensor):
    """Module state that is not a weight (a mask, a lookup table). ``Buffer(t)`` shares ``t``'s storage.

    Its own ``persistent`` flag decides whether it appears in ``state_dict()``, and wins
    over the ``persistent=`` argument of ``register_buffer``.
    """

    persistent: bool

    def __init__(self, data: Tensor | None = None, *, persistent: bool = True) -> None:
        _adopt_or_empty(self, data, "Buffer")
        self.persistent = persistent

    def __repr__(self) -> str:
        return "Buffer containing:\n" + super().__repr__()
