"""``HookRegistry``: an ordered set of hooks that one call site runs.

A module keeps one registry for its forward pre-hooks and one for its forward hooks.
The registry stores its entries as an immutable tuple that every change replaces, so a
call that started iterating keeps the tuple it started with: a hook that removes itself
or registers another one while it runs changes the *next* call, never the current one,
and no call has to copy anything to get that guarantee.
"""

from __future__ import annotations

import copy
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from packrt_hooks.handle import RemovableHandle

Hook = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class HookEntry:
    """One registration: the hook and the flags it was registered with.

    ``key`` identifies the registration inside its registry (registering the same
    function twice gives two entries with two keys).
    """

    key: int
    hook: Hook
    with_kwargs: bool = False
    always_call: bool = False


def _weakly(callback: Callable[[], None] | None) -> Callable[[], None] | weakref.WeakMethod[Any] | None:
    """A bound method as a weak reference (its owner usually holds the registry: no cycle);
    any other callable as it is."""
    if isinstance(callback, types.MethodType):
        return weakref.WeakMethod(callback)
    return callback


class _Registration:
    """The part of a handle that takes one entry back out of one registry."""

    __slots__ = ("key", "registry")

    def __init__(self, registry: HookRegistry, key: int) -> None:
        self.registry = registry
        self.key = key

    def remove(self) -> None:
        self.registry.remove(self.key)


class HookRegistry:
    """Hooks in the order they run: registration order, with ``prepend=True`` ones first.

    ``bool(registry)`` is True when at least one hook is registered. ``on_change`` (optional)
    is called after every registration and removal, so an owner can keep a single flag that
    its call path tests instead of asking each registry on every call. A bound-method
    ``on_change`` is held weakly: the registry never keeps its owner alive, so an owner that
    holds its registries is freed by reference counting, without waiting for the cyclic GC.
    ``always_call`` is stored for every entry, but only forward hooks honour it (see
    :func:`~packrt_hooks.call_with_hooks`).
    """

    __slots__ = ("_entries", "_lock", "_next_key", "_on_change")

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self._entries: tuple[HookEntry, ...] = ()
        self._on_change = _weakly(on_change)
        # Changes are read-modify-write of the tuple; the lock keeps two threads that register
        # at once from losing one entry. Calls only read the tuple and never take it.
        self._lock = threading.Lock()
        # Keys are unique per registry and never reused, so a stale handle can never
        # remove a later registration that happens to sit where its own used to be.
        self._next_key = 0

    def add(
        self,
        hook: Hook,
        *,
        prepend: bool = False,
        with_kwargs: bool = False,
        always_call: bool = False,
    ) -> RemovableHandle:
        """Register ``hook``; it runs after every hook already here, or before them all with
        ``prepend=True``. Returns the handle that unregisters it.

        Raises TypeError when ``hook`` is not callable.
        """
        if not callable(hook):
            raise TypeError(
                f"a hook must be callable, got {type(hook).__name__} {hook!r}; "
                "pass a function or another object with __call__"
            )
        with self._lock:
            entry = HookEntry(self._next_key, hook, bool(with_kwargs), bool(always_call))
            self._next_key += 1
            self._entries = (entry, *self._entries) if prepend else (*self._entries, entry)
        self._changed()
        return RemovableHandle((_Registration(self, entry.key),))

    def remove(self, key: int) -> bool:
        """Unregister the entry with ``key``; returns whether it was still registered."""
        with self._lock:
            kept = tuple(entry for entry in self._entries if entry.key != key)
            if len(kept) == len(self._entries):
                return False
            self._entries = kept
        self._changed()
        return True

    def clear(self) -> None:
        """Unregister every hook (handles made earlier then do nothing)."""
        with self._lock:
            self._entries = ()
        self._changed()

    def _changed(self) -> None:
        callback = self._callback()
        if callback is not None:
            callback()

    def _callback(self) -> Callable[[], None] | None:
        """The live ``on_change`` (None when there is none, or its owner is gone)."""
        held = self._on_change
        return held() if isinstance(held, weakref.WeakMethod) else held

    @property
    def entries(self) -> tuple[HookEntry, ...]:
        """The registered entries in run order; a snapshot that later changes do not touch."""
        return self._entries

    @property
    def hooks(self) -> tuple[Hook, ...]:
        """The registered hooks in run order."""
        return tuple(entry.hook for entry in self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[HookEntry]:
        return iter(self._entries)

    def __copy__(self) -> HookRegistry:
        # A shallow copy shares the hook objects but not the registry: removing through
        # either side's handles leaves the other side's hooks registered.
        new = HookRegistry(self._callback())
        new._entries = self._entries
        new._next_key = self._next_key
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> HookRegistry:
        new = HookRegistry()
        memo[id(self)] = new
        # Hooks go through deepcopy with the shared memo, so a hook that is a bound method
        # of the module being copied ends up bound to the copy; plain functions and
        # closures are atomic to deepcopy and stay shared.
        new._entries = tuple(
            HookEntry(e.key, copy.deepcopy(e.hook, memo), e.with_kwargs, e.always_call) for e in self._entries
        )
        new._next_key = self._next_key
        # A bound-method callback follows the copied owner, as bound-method hooks do.
        new._on_change = _weakly(copy.deepcopy(self._callback(), memo))
        return new

    def __getstate__(self) -> dict[str, Any]:
        return {"entries": self._entries, "next_key": self._next_key, "on_change": self._callback()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self._entries = tuple(state["entries"])
        self._next_key = int(state["next_key"])
        self._on_change = _weakly(state.get("on_change"))

    def __repr__(self) -> str:
        names = ", ".join(describe_hook(entry.hook) for entry in self._entries)
        return f"HookRegistry([{names}])"


def describe_hook(hook: object) -> str:
    """A short, readable name for ``hook`` for error messages (``module.qualname``)."""
    qualname = getattr(hook, "__qualname__", None)
    if isinstance(qualname, str):
        module = getattr(hook, "__module__", None)
        return f"{module}.{qualname}" if isinstance(module, str) else qualname
    return repr(hook)


__all__ = ["Hook", "HookEntry", "HookRegistry", "describe_hook"]
