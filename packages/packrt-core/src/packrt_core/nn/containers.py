"""Module containers: Sequential, ModuleList, ModuleDict, and Identity.

They keep PyTorch's container API and semantics. Positional containers file their children under
the strings of their positions ("0", "1", ...) and re-number after a delete or an insert, so the
state-dict keys of a container always read ``<position>.<name>``. An index is an int, anything
with ``__index__``, or an integer-valued tensor of one element (``seq[packrt.tensor(1)]``); any
other index is a TypeError naming its type. ``ModuleDict`` is a ``collections.abc.MutableMapping``.
The parameter containers are in :mod:`packrt_core.nn.parameter_containers`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from itertools import chain
from typing import Any, Self, overload

from packrt_core.nn.module import Module
from packrt_core.tensor import Tensor


class Identity(Module):
    """Returns its input unchanged (a placeholder where a layer is optional)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return x


def as_index(idx: object, kind: str) -> int:
    """``idx`` as an int: an int, anything with ``__index__``, or an integer tensor of one element."""
    if isinstance(idx, Tensor):
        if idx.dtype.is_floating_point or idx.dtype.name == "bool" or idx.numel() != 1:
            raise TypeError(
                f"{kind} index must be an int or an integer tensor of one element; got a {idx.dtype.name} tensor "
                f"of shape {idx.shape}"
            )
        return int(idx.item())
    try:
        return operator.index(idx)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{kind} indices must be integers or slices, not {type(idx).__name__}") from None


def position(idx: object, size: int, kind: str, noun: str = "module(s)") -> int:
    """The non-negative position ``idx`` names among ``size`` entries; IndexError when out of range."""
    i = as_index(idx, kind)
    if not -size <= i < size:
        raise IndexError(f"{kind} index {i} is out of range for {size} {noun}")
    return i % size


def without_digit_names(names: Iterable[str]) -> list[str]:
    """``dir()`` of a positional container: its "0", "1", ... are not attribute names."""
    return [name for name in names if not name.isdigit()]


class _ModuleSequence(Module):
    """The list protocol Sequential and ModuleList share: children in order, numbered by position."""

    def _key_at(self, idx: object) -> str:
        keys = list(self._modules)
        return keys[position(idx, len(keys), type(self).__name__)]

    def _renumber(self, modules: list[Module | None]) -> None:
        # The registry dict stays the same object; only its keys change.
        self._modules.clear()
        for i, module in enumerate(modules):
            self._modules[str(i)] = module

    def _slice(self, idx: slice) -> Self:
        raise NotImplementedError

    @overload
    def __getitem__(self, idx: slice) -> Self: ...
    @overload
    def __getitem__(self, idx: int | Tensor) -> Module: ...
    def __getitem__(self, idx: int | slice | Tensor) -> Module | Self:
        if isinstance(idx, slice):
            return self._slice(idx)
        return self._modules[self._key_at(idx)]  # type: ignore[return-value]  # an empty slot reads as None

    def __setitem__(self, idx: int | Tensor, module: Module) -> None:
        setattr(self, self._key_at(idx), module)  # keeps the name and its place in the order

    def __delitem__(self, idx: int | slice | Tensor) -> None:
        if isinstance(idx, slice):
            for key in list(self._modules)[idx]:
                del self._modules[key]
        else:
            del self._modules[self._key_at(idx)]
        self._renumber(list(self._modules.values()))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter([m for m in self._modules.values() if m is not None])

    def __dir__(self) -> list[str]:
        return without_digit_names(super().__dir__())

    def append(self, module: Module) -> Self:
        """Add ``module`` at the end, under the next position; returns the container."""
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> Self:
        """Append every module of ``modules`` (any iterable of modules); returns the container."""
        if not isinstance(modules, Iterable):
            raise TypeError(f"{type(self).__name__}.extend takes an iterable of modules, got {type(modules).__name__}")
        for module in list(modules):  # a snapshot: extending by itself doubles it once
            self.append(module)
        return self

    def _insert_checked(self, index: object, module: Module, clamp: bool) -> None:
        kind = type(self).__name__
        if not isinstance(module, Module):
            raise TypeError(f"{kind}.insert takes a Module, got {type(module).__name__}")
        size = len(self._modules)
        i = as_index(index, kind)
        if not clamp and not -size <= i <= size:
            raise IndexError(f"{kind}.insert index {i} is out of range for {size} module(s)")
        modules = list(self._modules.values())
        modules.insert(i, module)
        self._renumber(modules)

    @overload
    def pop(self, key: slice) -> Self: ...
    @overload
    def pop(self, key: int | Tensor = -1) -> Module: ...
    def pop(self, key: int | slice | Tensor = -1) -> Module | Self:
        """Remove and return the module at ``key`` (or the container of a slice); the rest re-number."""
        value = self[key]
        del self[key]
        return value


class Sequential(_ModuleSequence):
    """Calls its children in order, each on the previous one's output.

    ``Sequential(a, b, c)`` names them "0", "1", "2"; ``Sequential({"enc": a, "dec": b})``
    (any mapping that is not itself a module) keeps the given names. It is a list of modules
    too: index, slice (a slice keeps the names), assign, delete, ``append``, ``insert``,
    ``extend``, ``pop``, ``+`` / ``+=`` with another Sequential, ``*`` / ``*=`` with a positive
    int. A delete or an insert re-numbers every child "0", "1", ..., as PyTorch does.
    """

    def __init__(self, *modules: Module | Mapping[str, Module]) -> None:
        super().__init__()
        first = modules[0] if len(modules) == 1 else None
        if isinstance(first, Mapping) and not isinstance(first, Module):
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

    def _slice(self, idx: slice) -> Self:
        return type(self)(dict(list(self._modules.items())[idx]))  # type: ignore[arg-type]

    def insert(self, index: int, module: Module) -> Self:
        """Put ``module`` at ``index`` (negative counts from the end); IndexError past either end."""
        self._insert_checked(index, module, clamp=False)
        return self

    def _other(self, other: object, op: str) -> Sequential:
        if not isinstance(other, Sequential):
            raise TypeError(
                f"Sequential {op} takes another Sequential, got {type(other).__name__}: wrap the modules in "
                "Sequential(...), or use extend() for any iterable of modules"
            )
        return other

    def __add__(self, other: Sequential) -> Sequential:
        joined = Sequential()
        for module in chain(self, self._other(other, "+")):
            joined.append(module)
        return joined

    def __iadd__(self, other: Sequential) -> Self:
        return self.extend(list(self._other(other, "+=")))

    @staticmethod
    def _factor(other: object) -> int:
        if not isinstance(other, int):
            raise TypeError(f"Sequential * takes an int, got {type(other).__name__}")
        if other <= 0:
            raise ValueError(f"Sequential * takes a positive int, got {other}: the result would have no modules")
        return other

    def __mul__(self, other: int) -> Sequential:
        times = self._factor(other)
        repeated = Sequential()
        for _ in range(times):
            repeated.extend(self)
        return repeated

    def __rmul__(self, other: int) -> Sequential:
        return self.__mul__(other)

    def __imul__(self, other: int) -> Self:
        modules = list(self)
        for _ in range(self._factor(other) - 1):
            self.extend(modules)
        return self


class ModuleList(_ModuleSequence):
    """A list of modules, registered under "0", "1", ... so their tensors are walked and saved.

    The whole list protocol: index, slice (a new ModuleList), assign, delete, ``append``,
    ``insert``, ``extend``, ``pop``, ``+`` / ``+=`` with any iterable of modules. It has no
    forward: iterate over it and call its modules.
    """

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _slice(self, idx: slice) -> Self:
        return type(self)(list(self)[idx])

    def insert(self, index: int, module: Module) -> None:
        """Put ``module`` before position ``index``, as ``list.insert`` does."""
        self._insert_checked(index, module, clamp=True)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        return ModuleList(chain(self, other))

    def __iadd__(self, modules: Iterable[Module]) -> Self:
        return self.extend(modules)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleList has no forward: iterate over it and call its modules")


class KeyedContainer:
    """What ModuleDict and ParameterDict share: an identity object (a Mapping would compare contents and
    be unhashable; a module is an identity object) whose keys are those of the dict :meth:`_key_order`
    gives, in insertion order; iteration walks a snapshot, so the container may change meanwhile."""

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def _key_order(self) -> Mapping[str, Any]:
        raise NotImplementedError

    def __contains__(self, key: object) -> bool:
        return key in self._key_order()

    def __len__(self) -> int:
        return len(self._key_order())

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._key_order()))

    def __reversed__(self) -> Iterator[str]:
        return reversed(list(self._key_order()))


class ModuleDict(KeyedContainer, Module, MutableMapping[str, Module]):
    """A dict of modules, registered under their keys in insertion order; a ``MutableMapping``.

    ``update`` takes a mapping (a ModuleDict included) or an iterable of (key, module) pairs;
    ``keys()`` / ``values()`` / ``items()`` are views in insertion order; ``pop``, ``popitem``,
    ``setdefault``, ``get`` and ``clear`` behave as a dict's. Two ModuleDicts are equal only
    when they are the same object, as modules are. It has no forward: index it and call its
    modules.
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        if key not in self._modules:
            known = ", ".join(map(repr, self._modules)) or "none"
            raise KeyError(f"ModuleDict has no module {key!r}; it has {known}")
        return self._modules[key]  # type: ignore[return-value]  # an empty slot reads as None

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        self[key]  # the KeyError that names what there is
        del self._modules[key]

    def _key_order(self) -> Mapping[str, Any]:
        return self._modules

    def clear(self) -> None:
        """Remove every module."""
        self._modules.clear()

    def update(self, modules: Any = (), /, **kwargs: Module) -> None:
        """Add or replace modules from a mapping (a ModuleDict too) or an iterable of (key, module)
        pairs, then from the keyword arguments; insertion order is kept."""
        for key, module in pairs_of(modules, "ModuleDict"):
            self[key] = module
        for key, module in kwargs.items():
            self[key] = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleDict has no forward: index it and call its modules")


def pairs_of(values: Any, kind: str) -> list[tuple[Any, Any]]:
    """The (key, value) pairs of a mapping, or of an iterable of pairs, checked as ``dict.update`` does."""
    if isinstance(values, Mapping) or hasattr(values, "keys"):
        return [(key, values[key]) for key in values.keys()]  # noqa: SIM118 - a keys()-and-getitem object
    if not isinstance(values, Iterable):
        raise TypeError(
            f"{kind}.update takes a mapping or an iterable of (key, value) pairs, got {type(values).__name__}"
        )
    pairs = []
    for j, item in enumerate(values):
        if not isinstance(item, Iterable):
            raise TypeError(f"{kind}.update: element #{j} is a {type(item).__name__}; a (key, value) pair is expected")
        pair = tuple(item)
        if len(pair) != 2:
            raise ValueError(f"{kind}.update: element #{j} has length {len(pair)}; a (key, value) pair has length 2")
        pairs.append((pair[0], pair[1]))
    return pairs


__all__ = ["Identity", "ModuleDict", "ModuleList", "Sequential"]
