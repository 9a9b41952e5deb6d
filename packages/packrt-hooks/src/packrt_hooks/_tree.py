"""What the ready-made hooks share: the duck-typed module tree and walks over outputs.

A ready-made hook accepts any object whose ``named_modules()`` yields ``(dotted_name,
module)`` pairs and whose modules offer ``register_forward_hook`` and
``register_forward_pre_hook`` with the keyword flags of the packrt ``Module`` contract.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from packrt_hooks.errors import UnknownModuleError
from packrt_hooks.handle import SupportsRemove


class HookableModule(Protocol):
    """The part of the ``Module`` interface a ready-made hook registers through."""

    def register_forward_pre_hook(
        self, hook: Callable[..., Any], *, prepend: bool = ..., with_kwargs: bool = ...
    ) -> SupportsRemove: ...

    def register_forward_hook(
        self,
        hook: Callable[..., Any],
        *,
        prepend: bool = ...,
        with_kwargs: bool = ...,
        always_call: bool = ...,
    ) -> SupportsRemove: ...


class ModuleTree(Protocol):
    """A root module: ``named_modules()`` walks it, itself first under the name ``""``."""

    def named_modules(self) -> Any: ...


class _Installs(Protocol):
    def _install(self, name: str, module: HookableModule) -> None: ...
    def remove(self) -> None: ...


def walk_modules(root: ModuleTree) -> list[tuple[str, HookableModule]]:
    """Every ``(dotted_name, module)`` of the tree, in the tree's own order.

    Raises TypeError when ``root`` has no ``named_modules`` or a module cannot take hooks.
    """
    walker = getattr(root, "named_modules", None)
    if not callable(walker):
        raise TypeError(
            f"a ready-made hook needs a module tree with named_modules(), got {type(root).__name__}; "
            "pass the root module of the model"
        )
    found: list[tuple[str, HookableModule]] = []
    for name, module in walker():
        for method in ("register_forward_pre_hook", "register_forward_hook"):
            if not callable(getattr(module, method, None)):
                raise TypeError(
                    f"module {display_name(name)} ({type(module).__name__}) has no {method}(); "
                    "ready-made hooks install on modules that implement the forward-hook interface"
                )
        found.append((name, module))
    return found


def install_everywhere(result: _Installs, root: ModuleTree) -> None:
    """Install ``result``'s hooks on every module of the tree; on any failure remove what was
    installed, so a ready-made hook is on every module or on none."""
    try:
        for name, submodule in walk_modules(root):
            result._install(name, submodule)  # noqa: SLF001 - this package's own installer
    except BaseException:
        result.remove()
        raise


def pick_modules(modules: list[tuple[str, HookableModule]], names: list[str]) -> list[tuple[str, HookableModule]]:
    """The modules at the dotted ``names``, in the order given.

    Raises :class:`UnknownModuleError` naming the first unknown path and the closest known ones.
    """
    by_name = dict(modules)
    picked: list[tuple[str, HookableModule]] = []
    for name in names:
        if name not in by_name:
            known = [n for n in by_name if n]
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            hint = (
                f"did you mean {', '.join(repr(c) for c in close)}?"
                if close
                else f"known paths start with {', '.join(repr(n) for n in known[:5]) or 'nothing'}"
            )
            raise UnknownModuleError(
                f"no module at path {name!r} in this model; {hint} (use the dotted names that named_modules() yields)"
            )
        picked.append((name, by_name[name]))
    return picked


def display_name(name: str, *, quote: bool = True) -> str:
    """A dotted module path as messages (quoted) and tables show it; the root's name is empty."""
    if not name:
        return "(root)"
    return repr(name) if quote else name


def is_array_like(value: object) -> bool:
    """True for tensors and arrays: objects that carry both ``shape`` and ``dtype``."""
    return hasattr(value, "shape") and hasattr(value, "dtype")


def iter_leaves(value: object, location: str = "output") -> Iterator[tuple[str, object]]:
    """Each non-container leaf of ``value`` with where it sits (``output[0]['logits']``).

    Tuples, lists and dicts are walked (dicts in their own order); anything else,
    arrays included, is a leaf.
    """
    if is_array_like(value):
        yield location, value
    elif isinstance(value, tuple | list):
        for index, item in enumerate(value):
            yield from iter_leaves(item, f"{location}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from iter_leaves(item, f"{location}[{key!r}]")
    else:
        yield location, value


def dtype_name(dtype: object) -> str:
    """``float32`` for numpy, torch and packrt dtypes alike."""
    name = getattr(dtype, "name", None)
    text = name if isinstance(name, str) else str(dtype)
    return text.rsplit(".", 1)[-1]


__all__ = [
    "HookableModule",
    "ModuleTree",
    "display_name",
    "dtype_name",
    "is_array_like",
    "iter_leaves",
    "pick_modules",
    "install_everywhere",
    "walk_modules",
]
