"""Fail when a public name of a packrt package has no docstring (run by ``nox -s docs``).

The public names are what the API reference renders: each package's ``__all__`` (a module
without one: its own non-underscore functions and classes), every public module reached
that way, and the public methods, properties, class methods and static methods of every
public class (its own and those it inherits from this project's classes). A method that
overrides a documented one inherits that docstring, as ``inspect.getdoc`` reads it.
Constants and other data carry no docstring of their own and are not checked.

    python docs/_check_docstrings.py            # every package
    python docs/_check_docstrings.py packrt_io  # some of them
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from collections.abc import Iterator

PACKAGES = (
    "packrt",
    "packrt_core",
    "packrt_io",
    "packrt_hooks",
    "packrt_kernels_cpu",
    "packrt_kernels_cuda",
    "packrt_base",
    "packrt_ray",
    "packrt_conformance",
)


def _ours(obj: object, roots: tuple[str, ...]) -> bool:
    module = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
    return isinstance(module, str) and module.split(".")[0] in roots


def _public_names(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", None) == module.__name__
    ]


def _members(cls: type, roots: tuple[str, ...]) -> Iterator[tuple[type, str, object]]:
    """(defining class, name, member) for the public members ``cls`` has, nearest definition first."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        if not _ours(klass, roots):
            continue
        for name, raw in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(raw, (staticmethod, classmethod)):
                raw = raw.__func__
            if inspect.isfunction(raw) or isinstance(raw, property):
                yield klass, name, raw


def _doc(owner: type | None, name: str, obj: object) -> str | None:
    if owner is not None:  # inspect.getdoc finds an overridden method's docstring on the base
        try:
            return inspect.getdoc(getattr(owner, name))
        except AttributeError:
            pass
    return inspect.getdoc(obj) if not isinstance(obj, property) else obj.__doc__


def missing(roots: tuple[str, ...] = PACKAGES) -> list[str]:
    """Dotted paths of the public names without a docstring, each once."""
    found: list[str] = []
    done: set[int] = set()
    reported: set[str] = set()

    def visit_class(path: str, cls: type) -> None:
        if id(cls) in done:
            return
        done.add(id(cls))
        if not (cls.__doc__ or "").strip():
            found.append(f"{path} (class)")
        for klass, name, member in _members(cls, roots):
            where = f"{klass.__module__}.{klass.__qualname__}.{name}"
            if where in reported:  # an inherited member is reported once, where it is defined
                continue
            kind = "property" if isinstance(member, property) else "method"
            if not (_doc(cls, name, member) or "").strip():
                reported.add(where)
                found.append(f"{where} ({kind}; public as {path}.{name})")

    def visit_module(module: types.ModuleType) -> None:
        if id(module) in done:
            return
        done.add(id(module))
        if not (module.__doc__ or "").strip():
            found.append(f"{module.__name__} (module)")
        for name in _public_names(module):
            try:
                value = getattr(module, name)
            except AttributeError:
                found.append(f"{module.__name__}.{name} (in __all__ but not defined)")
                continue
            path = f"{module.__name__}.{name}"
            if isinstance(value, types.ModuleType):
                if _ours(value, roots):
                    visit_module(value)
            elif inspect.isclass(value):
                if _ours(value, roots):
                    visit_class(path, value)
            elif (
                (inspect.isfunction(value) or inspect.isbuiltin(value))
                and _ours(value, roots)
                and id(value) not in done
            ):
                done.add(id(value))
                if not (inspect.getdoc(value) or "").strip():
                    found.append(f"{path} (function)")

    for root in roots:
        visit_module(importlib.import_module(root))
    return found


def main(argv: list[str]) -> int:
    """Print every public name without a docstring; exit 1 when there is one."""
    roots = tuple(argv) or PACKAGES
    names = missing(roots)
    for name in names:
        print(f"no docstring: {name}")
    if names:
        print(f"{len(names)} public name(s) without a docstring: add a one-line docstring stating the rule")
        return 1
    print(f"docstrings: every public name of {', '.join(roots)} has one")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
