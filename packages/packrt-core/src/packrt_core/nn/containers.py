"""Containers: Sequential, ModuleList, ModuleDict, and Identity."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, overload

from packrt_core.nn.module import Module


class Identity(Module):
    """Returns its input unchanged (a placeholder where a layer is optional)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return x


def _index(i: int, n: int, kind: str) -> int:
    if not -n <= i < n:
        raise IndexError(f"{kind} index {i} is out of range for {n} module(s)")
    return i % n


class Sequential(Module):
    """Calls its children in order, each on the previous one's output.

    ``Sequential(a, b, c)`` names them "0", "1", "2"; ``Sequential({"enc": a, "dec": b})``
    (any mapping) keeps the given names.
    """

    def __init__(self, *modules: Module | Mapping[str, Module]) -> None:
        super().__init__()
        first = modules[0] if len(modules) == 1 else None
        if isinstance(first, Mapping):
            for name, module in first.items():
                self.add_module(name, module)
            return
        for i, item in enumerate(modules):
            if not isinstance(item, Module):
                raise TypeError(
                    f"Sequential takes modules (or one mapping of them); argument {i} is a {type(item).__name__}"
                )
            self.add_module(str(i), item)

    def forward(self, x: Any) -> Any:
        for module in self._modules.values():
            if module is not None:
                x = module(x)
        return x

    @overload
    def __getitem__(self, idx: int) -> Module: ...
    @overload
    def __getitem__(self, idx: slice) -> Sequential: ...
    def __getitem__(self, idx: int | slice) -> Module | Sequential:
        items = list(self._modules.items())
        if isinstance(idx, slice):
            return Sequential(dict(items[idx]))  # type: ignore[arg-type]
        module = items[_index(idx, len(items), "Sequential")][1]
        assert module is not None
        return module

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(m for m in self._modules.values() if m is not None)

    def append(self, module: Module) -> Sequential:
        self.add_module(str(len(self._modules)), module)
        return self


class ModuleList(Module):
    """A list of modules, registered under "0", "1", ... so their tensors are walked and saved."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _renumber(self, modules: list[Module]) -> None:
        self._modules.clear()
        for i, module in enumerate(modules):
            self.add_module(str(i), module)

    @overload
    def __getitem__(self, idx: int) -> Module: ...
    @overload
    def __getitem__(self, idx: slice) -> ModuleList: ...
    def __getitem__(self, idx: int | slice) -> Module | ModuleList:
        modules = list(self)
        if isinstance(idx, slice):
            return ModuleList(modules[idx])
        return modules[_index(idx, len(modules), "ModuleList")]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(str(_index(idx, len(self), "ModuleList")), module)

    def __delitem__(self, idx: int | slice) -> None:
        modules = list(self)
        if isinstance(idx, slice):
            del modules[idx]
        else:
            del modules[_index(idx, len(modules), "ModuleList")]
        self._renumber(modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter([m for m in self._modules.values() if m is not None])

    def append(self, module: Module) -> ModuleList:
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> None:
        modules = list(self)
        modules.insert(index, module)
        self._renumber(modules)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleList has no forward: iterate over it and call its modules")


class ModuleDict(Module):
    """A dict of modules, registered under their keys in insertion order."""

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        module = self._modules.get(key)
        if module is None:
            raise KeyError(f"ModuleDict has no module {key!r}; it has {', '.join(map(repr, self._modules)) or 'none'}")
        return module

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        self[key]
        del self._modules[key]

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._modules))

    def keys(self) -> list[str]:
        return list(self._modules)

    def values(self) -> list[Module]:
        return [m for m in self._modules.values() if m is not None]

    def items(self) -> list[tuple[str, Module]]:
        return [(k, m) for k, m in self._modules.items() if m is not None]

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for key, module in pairs:
            self[key] = module

    def pop(self, key: str) -> Module:
        module = self[key]
        del self._modules[key]
        return module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleDict has no forward: index it and call its modules")
