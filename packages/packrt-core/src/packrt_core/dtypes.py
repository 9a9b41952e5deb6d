"""packrt's dtypes: ten dtype objects, their names, and the promotion rule.

A dtype can be given wherever packrt takes one as a dtype object (``packrt.float16``),
a :class:`DataType` value (``DataType.FLOAT16``), or a name (``"float16"``, ``"half"``).
bfloat16 is ml_dtypes' numpy dtype, so a bfloat16 tensor is a real numpy array; ml_dtypes is imported
the first time ``bfloat16.numpy`` is read, not by ``import packrt`` (the import is most of its CPU time).
"""

from __future__ import annotations

import builtins
import difflib
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from packrt_base.arrays import bfloat16_dtype
from packrt_core.errors import DTypeError


class DataType(enum.StrEnum):
    """The canonical dtype names, as an enum (``DataType.BFLOAT16.value == "bfloat16"``)."""

    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    INT8 = "int8"
    UINT8 = "uint8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    BOOL = "bool"


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class dtype:  # noqa: N801 - lower case like numpy.dtype and torch.dtype, which users write
    """One element type. Compare with ``is`` or ``==``; there is exactly one object per type
    (``eq=False`` keeps identity comparison and hashing)."""

    name: str
    itemsize: int
    is_floating_point: bool
    is_signed: bool
    # What makes the numpy dtype, called once on the first read of ``numpy``: bfloat16's needs ml_dtypes.
    _make_numpy: Callable[[], np.dtype[Any]] = field(repr=False)
    _numpy: np.dtype[Any] | None = field(default=None, init=False, repr=False)

    @property
    def numpy(self) -> np.dtype[Any]:
        """The numpy dtype of this type's elements (for bfloat16, ml_dtypes' bfloat16)."""
        made = self._numpy
        if made is None:
            made = self._make_numpy()
            object.__setattr__(self, "_numpy", made)  # a cache on a frozen object: the value never changes
        return made

    def __repr__(self) -> str:
        return f"packrt.{self.name}"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Copies and pickles resolve back to the one object per type.
        return (as_dtype, (self.name,))

    @property
    def data_type(self) -> DataType:
        """This dtype's member of the ``DataType`` enumeration (what ``to()`` also accepts)."""
        return DataType(self.name)

    @property
    def category(self) -> int:
        """0 bool, 1 integer, 2 floating point: the order type promotion climbs."""
        return 2 if self.is_floating_point else 0 if self.name == "bool" else 1


def _declare(name: str, np_dtype: Any) -> dtype:
    as_numpy = np.dtype(np_dtype)
    made = dtype(name, as_numpy.itemsize, name in _FLOAT_NAMES, name not in ("uint8", "bool"), lambda: as_numpy)
    made.numpy  # noqa: B018 - filled now: only bfloat16 waits for its first use
    return made


def _declare_bfloat16() -> dtype:
    return dtype("bfloat16", 2, True, True, bfloat16_dtype)


_FLOAT_NAMES: Final = frozenset({"float16", "bfloat16", "float32", "float64"})

float16: Final = _declare("float16", np.float16)
bfloat16: Final = _declare_bfloat16()
float32: Final = _declare("float32", np.float32)
float64: Final = _declare("float64", np.float64)
int8: Final = _declare("int8", np.int8)
uint8: Final = _declare("uint8", np.uint8)
int16: Final = _declare("int16", np.int16)
int32: Final = _declare("int32", np.int32)
int64: Final = _declare("int64", np.int64)
bool_: Final = _declare("bool", np.bool_)

half: Final = float16
float: Final = float32
double: Final = float64
long: Final = int64

ALL_DTYPES: Final[tuple[dtype, ...]] = (
    float16,
    bfloat16,
    float32,
    float64,
    int8,
    uint8,
    int16,
    int32,
    int64,
    bool_,
)
FLOATING_DTYPES: Final = tuple(d for d in ALL_DTYPES if d.is_floating_point)

_BY_NAME: Final[dict[str, dtype]] = {
    **{d.name: d for d in ALL_DTYPES},
    "half": float16,
    "float": float32,
    "double": float64,
    "long": int64,
    "int": int32,
    "short": int16,
    "byte": uint8,
    "bf16": bfloat16,
    "fp16": float16,
    "fp32": float32,
}
# bfloat16 joins on the first lookup of a kind "V" dtype (bfloat16's kind), so a lookup never imports ml_dtypes
# for an ordinary dtype.
_BY_NUMPY: Final[dict[np.dtype[Any], dtype]] = {d.numpy: d for d in ALL_DTYPES if d is not bfloat16}

DTypeLike = dtype | DataType | str


def as_dtype(value: Any) -> dtype:
    """The packrt dtype that ``value`` names: a dtype, a DataType, a name, or a numpy dtype."""
    if isinstance(value, dtype):
        return value
    if isinstance(value, str):  # DataType is a str too
        key = value.value if isinstance(value, DataType) else value
        found = _BY_NAME.get(key)
        if found is not None:
            return found
        close = difflib.get_close_matches(key, list(_BY_NAME), n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise DTypeError(f"unknown dtype name {key!r}: expected one of {', '.join(sorted(_BY_NAME))}{hint}")
    try:
        np_dtype = np.dtype(value)
    except TypeError as err:
        raise DTypeError(
            f"cannot read {value!r} (a {type(value).__name__}) as a dtype: "
            "expected a packrt dtype, a DataType, a dtype name or a numpy dtype"
        ) from err
    return from_numpy_dtype(np_dtype)


def names_of(value: dtype) -> tuple[str, ...]:
    """Every name :func:`as_dtype` reads as ``value``: the canonical name first, then its aliases in the
    table's order (``names_of(float16) == ("float16", "half", "fp16")``), for messages that list them."""
    return (value.name, *(name for name, found in _BY_NAME.items() if found is value and name != value.name))


def from_numpy_dtype(np_dtype: np.dtype[Any]) -> dtype:
    """The packrt dtype of a numpy dtype; a dtype packrt has no counterpart for is a DTypeError."""
    found = _BY_NUMPY.get(np_dtype)
    if found is None and np_dtype.kind == "V" and bfloat16.numpy not in _BY_NUMPY:
        _BY_NUMPY[bfloat16.numpy] = bfloat16
        found = _BY_NUMPY.get(np_dtype)
    if found is None:
        raise DTypeError(
            f"numpy dtype {np_dtype} has no packrt counterpart: packrt holds {', '.join(d.name for d in ALL_DTYPES)}"
        )
    return found


def promote_types(a: dtype, b: dtype) -> dtype:
    """The dtype two tensors of dtypes ``a`` and ``b`` compute in (PyTorch's rule).

    The higher category wins (bool < integer < floating point); within a category the
    wider type wins, float16 with bfloat16 meets in float32, and mixed-sign integers
    widen as numpy does.
    """
    if a is b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.is_floating_point:
        if float64 in (a, b):
            return float64
        if float32 in (a, b):
            return float32
        return float32  # float16 with bfloat16: neither holds the other
    return from_numpy_dtype(np.promote_types(a.numpy, b.numpy))


def scalar_category(value: Any) -> int:
    """The category of a Python scalar; it only lifts a tensor to a higher category."""
    if isinstance(value, bool | np.bool_):
        return 0
    if isinstance(value, int | np.integer):
        return 1
    if isinstance(value, builtins.float | np.floating):
        return 2
    raise DTypeError(f"cannot compute with a {type(value).__name__} ({value!r}): expected a tensor or a number")


def promote_with_scalar(t: dtype, value: Any) -> dtype:
    """A Python number is weak: it keeps the tensor's dtype unless its category is higher,
    in which case the default dtype of that category applies (float32, int64)."""
    cat = scalar_category(value)
    if cat <= t.category:
        return t
    return float32 if cat == 2 else int64
