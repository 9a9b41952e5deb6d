"""``RemovableHandle``: what every hook registration returns, and what takes it back."""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import Protocol, Self


class SupportsRemove(Protocol):
    """Anything with an idempotent ``remove()``: a registration, or another library's handle."""

    def remove(self) -> None:
        """Undo the registration; calling it again does nothing."""


class RemovableHandle:
    """Unregisters the hooks it covers when :meth:`remove` is called.

    One handle may cover several registrations (the ready-made hooks install one hook per
    module and hand back a single handle). :meth:`remove` is idempotent: calling it again,
    or after the hooks were removed some other way, does nothing. Used as a context
    manager, the handle removes its hooks when the ``with`` block exits, also on error.

    A handle refers to the registries it registered into, not to copies of them: after
    ``copy.deepcopy(module)`` a handle made before the copy removes hooks from the original
    only (a handle copied *together with* the module follows the copy).
    """

    def __init__(self, parts: Iterable[SupportsRemove] = ()) -> None:
        self._parts: list[SupportsRemove] = list(parts)
        self._removed = False

    @classmethod
    def combine(cls, handles: Iterable[SupportsRemove]) -> RemovableHandle:
        """One handle that removes everything each of ``handles`` covers."""
        return cls(handles)

    def _adopt(self, part: SupportsRemove) -> None:
        """Cover one more registration (used while a ready-made hook installs itself)."""
        if self._removed:
            # The handle was already spent: take the new registration back at once rather
            # than leave a hook that no handle can remove.
            part.remove()
            return
        self._parts.append(part)

    @property
    def removed(self) -> bool:
        """True once :meth:`remove` has run on this handle."""
        return self._removed

    def remove(self) -> None:
        """Unregister every hook this handle covers; harmless to call more than once."""
        self._removed = True
        parts, self._parts = self._parts, []
        for part in parts:
            part.remove()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()

    def __repr__(self) -> str:
        state = "removed" if self._removed else f"{len(self._parts)} registration(s)"
        return f"<{type(self).__name__} {state}>"


__all__ = ["RemovableHandle", "SupportsRemove"]
