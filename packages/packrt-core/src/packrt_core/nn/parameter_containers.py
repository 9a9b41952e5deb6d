"""Parameter containers: ParameterList and ParameterDict, with PyTorch's API and semantics.

A tensor put into either becomes a :class:`Parameter` sharing its storage (a Parameter stays the
object it is); any other value is kept as a plain attribute, as PyTorch keeps it. ParameterList
files its entries under "0", "1", ...; ParameterDict under its string keys, in insertion order,
and is a ``collections.abc.MutableMapping``. Neither is called: index them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, Self, overload

from packrt_core.nn.containers import KeyedContainer, pairs_of, position, without_digit_names
from packrt_core.nn.module import Module
from packrt_core.nn.parameter import Parameter
from packrt_core.tensor import Tensor


def _as_parameter(value: Any) -> Any:
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


def _describe(value: Any) -> str:
    """One repr line for an entry: ``Parameter containing: [float32 of size 2x3]`` or its type."""
    if isinstance(value, Tensor):
        kind = "Parameter" if isinstance(value, Parameter) else "Tensor"
        size = "x".join(str(dim) for dim in value.shape)
        where = "" if value.device.type == "cpu" else f" ({value.device})"
        return f"{kind} containing: [{value.dtype.name} of size {size}{where}]"
    return f"Object of type: {type(value).__name__}"


class ParameterList(Module):
    """A list of parameters, registered under "0", "1", ... so they are walked and saved.

    ``append`` / ``extend`` / ``+=`` take any values: tensors become Parameters, other values stay
    plain attributes. Index, slice (a new ParameterList), assign and iterate as a list.
    """

    _size: int

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__()
        object.__setattr__(self, "_size", 0)
        if values is not None:
            self.extend(values)

    def _key(self, idx: object) -> str:
        return str(position(idx, self._size, "ParameterList", "value(s)"))

    @overload
    def __getitem__(self, idx: slice) -> Self: ...
    @overload
    def __getitem__(self, idx: int | Tensor) -> Any: ...
    def __getitem__(self, idx: int | slice | Tensor) -> Any:
        if isinstance(idx, slice):
            return type(self)([getattr(self, str(i)) for i in range(*idx.indices(self._size))])
        return getattr(self, self._key(idx))

    def __setitem__(self, idx: int | Tensor, value: Any) -> None:
        setattr(self, self._key(idx), _as_parameter(value))

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return iter([getattr(self, str(i)) for i in range(self._size)])

    def __dir__(self) -> list[str]:
        return without_digit_names(super().__dir__())

    def append(self, value: Any) -> Self:
        """Add ``value`` at the end (a tensor becomes a Parameter); returns the list."""
        setattr(self, str(self._size), _as_parameter(value))
        object.__setattr__(self, "_size", self._size + 1)  # only once the value is filed
        return self

    def extend(self, values: Iterable[Any]) -> Self:
        """Append every value of ``values``; a tensor is one value, not an iterable of rows."""
        if not isinstance(values, Iterable) or isinstance(values, Tensor):
            raise TypeError(
                f"ParameterList.extend takes an iterable of values, got {type(values).__name__}: "
                "use append() for a single tensor"
            )
        for value in list(values):
            self.append(value)
        return self

    def __iadd__(self, values: Iterable[Any]) -> Self:
        return self.extend(values)

    def extra_repr(self) -> str:
        return "\n".join(f"({i}): {_describe(value)}" for i, value in enumerate(self))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("ParameterList is not called: index it or iterate over it and use its parameters")


class ParameterDict(KeyedContainer, Module, MutableMapping[str, Any]):
    """A dict of parameters under string keys, in insertion order; a ``MutableMapping``.

    A tensor value becomes a Parameter; any other value stays a plain attribute. ``update``
    takes a mapping or an iterable of (key, value) pairs; as in PyTorch, a plain ``dict`` that is
    neither an ``OrderedDict`` nor a ParameterDict is added in sorted key order. ``|`` and ``|=``
    merge, ``copy()`` is shallow, ``popitem()`` takes the last entry, ``fromkeys`` builds one.
    """

    _keys: dict[str, None]

    def __init__(self, parameters: Any = None) -> None:
        super().__init__()
        object.__setattr__(self, "_keys", {})
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _checked(key: object) -> str:
        if not isinstance(key, str):
            raise TypeError(f"ParameterDict keys must be str, got {type(key).__name__}")
        return key

    def __getitem__(self, key: str) -> Any:
        if self._checked(key) not in self._keys:
            known = ", ".join(map(repr, self._keys)) or "none"
            raise KeyError(f"ParameterDict has no entry {key!r}; it has {known}")
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, self._checked(key), _as_parameter(value))
        self._keys[key] = None

    def __delitem__(self, key: str) -> None:
        self[key]  # the KeyError that names what there is
        del self._keys[key]
        delattr(self, key)

    def _key_order(self) -> Mapping[str, Any]:
        return self._keys

    def get(self, key: str, default: Any = None) -> Any:
        """The value under ``key``, or ``default`` when there is none."""
        return self[key] if key in self else default  # noqa: SIM401 - this is get() itself

    def setdefault(self, key: str, default: Any = None) -> Any:
        """The value under ``key``; first files ``default`` there when the key is absent."""
        if key not in self:
            self[key] = default
        return self[key]

    def popitem(self) -> tuple[str, Any]:
        """Remove and return the last (key, value) pair; KeyError when empty."""
        if not self._keys:
            raise KeyError("popitem(): the ParameterDict is empty")
        key = next(reversed(self._keys))
        return key, self.pop(key)

    def clear(self) -> None:
        """Remove every entry."""
        for key in list(self._keys):
            del self[key]

    def copy(self) -> ParameterDict:
        """A new ParameterDict holding the same values (the Parameter objects are shared)."""
        return ParameterDict(OrderedDict((key, self[key]) for key in self._keys))

    @classmethod
    def fromkeys(cls, keys: Iterable[str], default: Any = None) -> ParameterDict:
        """A ParameterDict with ``default`` under every key of ``keys``."""
        return cls([(key, default) for key in keys])

    def update(self, parameters: Any = (), /, **kwargs: Any) -> None:
        """Add or replace entries from a mapping or an iterable of (key, value) pairs, then from
        the keyword arguments. A plain dict is added in sorted key order, as PyTorch does."""
        pairs = pairs_of(parameters, "ParameterDict")
        if isinstance(parameters, Mapping) and not isinstance(parameters, OrderedDict | ParameterDict):
            pairs.sort(key=lambda pair: pair[0])
        for key, value in [*pairs, *kwargs.items()]:
            self[key] = value

    def __or__(self, other: ParameterDict) -> ParameterDict:
        merged = self.copy()
        merged.update(other)
        return merged

    def __ror__(self, other: ParameterDict) -> ParameterDict:
        merged = other.copy()
        merged.update(self)
        return merged

    def __ior__(self, other: ParameterDict) -> Self:
        self.update(other)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"({key}): {_describe(self[key])}" for key in self._keys)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("ParameterDict is not called: index it by key and use its parameters")


__all__ = ["ParameterDict", "ParameterList"]
