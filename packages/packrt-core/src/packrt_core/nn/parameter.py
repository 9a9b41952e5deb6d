"""Parameter and Buffer: tensors a module registers as learned weights or as state.

A Parameter can also *lend out* its storage: when a packed layer keeps only its serving
form, each declared Parameter drops its raw array and keeps a source that rebuilds the
values on demand. Reads rebuild (sharing nothing); the first in-place write restores real
storage, so the next forward sees a changed lineage and repacks. This is Parameter's
business alone: a plain Tensor always either holds storage or is storage-free.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from packrt_core.creation import empty
from packrt_core.tensor import Tensor


class ValueSource(Protocol):
    """What gives a dropped Parameter its values back (a layer's pack)."""

    def rebuild(self) -> Any: ...


def _adopt_or_empty(obj: Tensor, data: Tensor | None, kind: str) -> None:
    if data is None:
        data = empty(0)
    if not isinstance(data, Tensor):
        raise TypeError(f"{kind} wraps a packrt Tensor, got {type(data).__name__}: make one with packrt.tensor(...)")
    obj._adopt(data)
    obj._publish_writes()


class Parameter(Tensor):
    """A tensor a module owns as a weight. ``Parameter(t)`` shares ``t``'s storage.

    Assigning one to a module attribute registers it; it then shows in ``parameters()``
    and ``state_dict()``. packrt has no autograd, so there is no ``requires_grad``.
    """

    _source: ValueSource | None = None  # set while a layer's pack holds the values instead
    # A deep copy owns its values (rebuilt from the pack); the pack stays with the layer.
    _not_copied: ClassVar[frozenset[str]] = frozenset({"_source"})

    def __init__(self, data: Tensor | None = None) -> None:
        _adopt_or_empty(self, data, "Parameter")

    def _adopt(self, other: Tensor) -> None:
        super()._adopt(other)
        if isinstance(other, Parameter) and other._source is not None:
            self._source = other._source

    # -- lending storage to a pack ----------------------------------------------------------
    # A reader on another thread (a state_dict, a forward of another layer) may look while a
    # pack drops or restores the storage: the source is set before the storage goes and the
    # storage is back before the source goes, so at every moment one of the two answers.
    def _drop(self, source: ValueSource) -> None:
        """Release the raw storage while ``source.rebuild()`` can give its values back.
        Neither this nor a later read counts as a write (the lineage's version stays)."""
        self._source = source
        self._data = None

    def _restore(self) -> Any:
        """Bring dropped storage back (a no-op when the parameter holds its storage)."""
        source = self._source
        if self._data is None and source is not None:
            self._data = source.rebuild()
            self._source = None
        return self._data

    def _array(self) -> Any:
        while True:  # each pass that finds neither saw a drop or a restore land between its reads
            data = self._data
            if data is not None:
                return data
            source = self._source
            if source is not None:
                return source.rebuild()
            if self._data is None and self._source is None:
                return super()._array()  # storage-free: StorageFreeError

    def _write_target(self) -> Any:
        return self._restore()  # under WRITES: a pack cannot drop it again before the write lands

    @property
    def has_storage(self) -> bool:
        """False for a storage-free parameter; True while a pack holds its values."""
        return self._data is not None or self._source is not None

    def detach(self) -> Tensor:
        """A plain tensor sharing this one's storage and lineage (while a pack holds the values,
        a tensor rebuilt from it, sharing nothing)."""
        if self._data is None and self._source is not None:
            return self._wrap(self._array())
        return super().detach()

    def _rebind(self, data: Any, device: Any = None) -> None:
        self._source = None
        super()._rebind(data, device)

    def _declare(self, shape: tuple[int, ...], dtype_: Any, device: Any) -> None:
        self._source = None
        super()._declare(shape, dtype_, device)

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
