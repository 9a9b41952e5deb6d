"""Tensor arithmetic, reductions and in-place writes (mixed into :class:`packrt_core.Tensor`).

Operands meet in PyTorch's promoted dtype (:func:`packrt_core.dtypes.promote_types`);
Python numbers are weak. Half precision reduces and multiplies in float32 and rounds
once, since numpy has no fast half-precision kernels. In-place writes keep the tensor's
shape and dtype category and bump its lineage's version.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Self

import numpy as np

from packrt_core.device import CPU, Device
from packrt_core.dtypes import (
    bfloat16,
    bool_,
    dtype,
    float16,
    float32,
    from_numpy_dtype,
    promote_types,
    promote_with_scalar,
)
from packrt_core.errors import DeviceError, DTypeError, IndexingError, ShapeError

if TYPE_CHECKING:
    from packrt_core.tensor import Tensor, _Lineage

_NUMBER = (int, float, bool, np.number, np.bool_)
_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
_HALF = (float16, bfloat16)


class MaxResult(NamedTuple):
    """``max(dim)`` / ``min(dim)``: the extreme values and where they are."""

    values: Tensor
    indices: Tensor


def _shape_of(size: Sequence[Any]) -> tuple[int, ...]:
    """``f(2, 3)`` and ``f((2, 3))`` both mean shape (2, 3)."""
    if len(size) == 1 and isinstance(size[0], tuple | list):
        size = tuple(size[0])
    try:
        shape = tuple(int(s) for s in size)
    except (TypeError, ValueError) as err:
        raise ShapeError(f"a shape is a sequence of ints, got {tuple(size)!r}") from err
    return shape


def _dim(d: int, ndim: int) -> int:
    """A dimension normalized to 0..ndim-1 (negative counts from the end)."""
    lo, hi = (-ndim, ndim - 1) if ndim else (-1, 0)
    if not lo <= d <= hi:
        raise IndexingError(f"dimension {d} is out of range for a {ndim}-d tensor (expected {lo}..{hi})")
    return d % ndim if ndim else 0


class TensorOps:
    """The computing half of Tensor; the storage half (``tensor.py``) provides what is declared here."""

    __slots__ = ()

    if TYPE_CHECKING:
        _data: Any
        _device: Device
        _dtype: dtype
        _shape: tuple[int, ...]

        @property
        def _backend(self) -> Any: ...
        @property
        def ndim(self) -> int: ...
        def numel(self) -> int: ...
        def _array(self) -> Any: ...
        def _writable(self, what: str) -> Any: ...

        _lineage: _Lineage

        @property
        def has_storage(self) -> bool: ...
        def _wrap(self, data: Any) -> Tensor: ...

    # -- arithmetic ------------------------------------------------------------------------
    def _operand(self, other: Any, what: str) -> Any:
        """The array or Python number ``other`` contributes, on this tensor's device."""
        if isinstance(other, TensorOps):
            if other._device != self._device:
                raise DeviceError(f"{what}: tensors on {self._device} and {other._device} cannot meet; move one first")
            return other._array()
        if isinstance(other, _NUMBER):
            return other
        if isinstance(other, np.ndarray) and self._device == CPU:
            return other
        return self._backend.asarray(other, None, self._device.index or 0)

    def _binary(self, op: str, other: Any, reverse: bool = False) -> Tensor:
        a = self._array()
        if isinstance(other, np.ndarray) and self._device == CPU:
            other = self._wrap(other)
        if isinstance(other, TensorOps):
            if other._device != self._device:
                raise DeviceError(f"{op}: tensors on {self._device} and {other._device} cannot meet; move one first")
            b = other._array()
            target = promote_types(self._dtype, other._dtype)
            if other._dtype is not target:
                b = b.astype(target.numpy)
            if a.shape != b.shape:
                _broadcast(a.shape, b.shape, op)
        elif isinstance(other, _NUMBER):
            target = promote_with_scalar(self._dtype, other)
            b = other
        else:
            return NotImplemented  # type: ignore[no-any-return]
        if op == "div" and not target.is_floating_point:
            target = float32  # true division of integers gives the default float, as in PyTorch
        if self._dtype is not target:
            a = a.astype(target.numpy)
        if reverse:
            a, b = b, a
        try:
            out = self._backend.binary(op, a, b)
        except OverflowError as err:
            raise DTypeError(f"{op}: the number {other!r} does not fit {target.name}") from err
        want = bool_.numpy if op in _COMPARISONS else target.numpy
        if out.dtype != want:
            out = out.astype(want)
        return self._wrap(out)

    def __add__(self, other: Any) -> Tensor:
        return self._binary("add", other)

    def __radd__(self, other: Any) -> Tensor:
        return self._binary("add", other, True)

    def __sub__(self, other: Any) -> Tensor:
        return self._binary("sub", other)

    def __rsub__(self, other: Any) -> Tensor:
        return self._binary("sub", other, True)

    def __mul__(self, other: Any) -> Tensor:
        return self._binary("mul", other)

    def __rmul__(self, other: Any) -> Tensor:
        return self._binary("mul", other, True)

    def __truediv__(self, other: Any) -> Tensor:
        return self._binary("div", other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return self._binary("div", other, True)

    def __floordiv__(self, other: Any) -> Tensor:
        return self._binary("floordiv", other)

    def __mod__(self, other: Any) -> Tensor:
        return self._binary("mod", other)

    def __pow__(self, other: Any) -> Tensor:
        return self._binary("pow", other)

    def __rpow__(self, other: Any) -> Tensor:
        return self._binary("pow", other, True)

    def __eq__(self, other: object) -> Any:
        return self._binary("eq", other)

    def __ne__(self, other: object) -> Any:
        return self._binary("ne", other)

    def __lt__(self, other: Any) -> Tensor:
        return self._binary("lt", other)

    def __le__(self, other: Any) -> Tensor:
        return self._binary("le", other)

    def __gt__(self, other: Any) -> Tensor:
        return self._binary("gt", other)

    def __ge__(self, other: Any) -> Tensor:
        return self._binary("ge", other)

    def __neg__(self) -> Tensor:
        if self._dtype is bool_:
            raise DTypeError("negation of a bool tensor is not defined: use ~t (logical not)")
        return self._wrap(self._backend.unary("neg", self._array()))

    def __pos__(self) -> Self:
        return self

    def __invert__(self) -> Tensor:
        if self._dtype is not bool_:
            raise DTypeError(f"~ is logical not and needs a bool tensor, this one is {self._dtype.name}")
        return self._wrap(self._backend.unary("not", self._array()))

    def __abs__(self) -> Tensor:
        return self._unary("abs")

    def _unary(self, op: str) -> Tensor:
        data = self._array()
        if op not in ("abs", "neg") and not self._dtype.is_floating_point:
            data = data.astype(float32.numpy)
        return self._wrap(self._backend.unary(op, data))

    def abs(self) -> Tensor:
        return self._unary("abs")

    def exp(self) -> Tensor:
        return self._unary("exp")

    def log(self) -> Tensor:
        return self._unary("log")

    def sqrt(self) -> Tensor:
        return self._unary("sqrt")

    def tanh(self) -> Tensor:
        return self._unary("tanh")

    def __matmul__(self, other: Any) -> Tensor:
        if not isinstance(other, TensorOps):
            return NotImplemented
        return _matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        if not isinstance(other, TensorOps):
            return NotImplemented
        return _matmul(other, self)

    def matmul(self, other: Tensor) -> Tensor:
        return _matmul(self, other)

    # -- reductions ------------------------------------------------------------------------
    def _axes(self, dim: int | Sequence[int] | None) -> int | tuple[int, ...] | None:
        if dim is None:
            return None
        if isinstance(dim, int):
            return _dim(dim, self.ndim)
        return tuple(_dim(d, self.ndim) for d in dim)

    def sum(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Sum (half precision accumulates in float32; integers and bools sum to int64)."""
        data = self._array()
        if self._dtype in _HALF:
            out = self._backend.reduce("sum", data.astype(np.float32), self._axes(dim), keepdim)
            return self._wrap(out.astype(self._dtype.numpy))
        if not self._dtype.is_floating_point:
            data = data.astype(np.int64)
        return self._wrap(self._backend.reduce("sum", data, self._axes(dim), keepdim))

    def mean(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        if not self._dtype.is_floating_point:
            raise DTypeError(
                f"mean() needs a floating-point tensor, this one is {self._dtype.name}: call .float() first"
            )
        data = self._array()
        if self._dtype in _HALF:
            out = self._backend.reduce("mean", data.astype(np.float32), self._axes(dim), keepdim)
            return self._wrap(out.astype(self._dtype.numpy))
        return self._wrap(self._backend.reduce("mean", data, self._axes(dim), keepdim))

    def _extreme(self, op: str, dim: int | None, keepdim: bool) -> Any:
        data = self._array()
        if self.numel() == 0:
            raise ShapeError(f"{op}() of an empty tensor (shape {self._shape}) has no value")
        if dim is None:
            return self._wrap(self._backend.reduce(op, data, None, False))
        axis = _dim(dim, self.ndim)
        arg = self._backend.reduce("arg" + op, data, axis, True)
        values = self._backend.take_along_axis(data, arg, axis)
        if not keepdim:
            values, arg = values.squeeze(axis), arg.squeeze(axis)
        return MaxResult(self._wrap(values), self._wrap(arg.astype(np.int64)))

    def max(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """The largest element, or with ``dim`` the pair (values, indices) along it."""
        return self._extreme("max", dim, keepdim)

    def min(self, dim: int | None = None, keepdim: bool = False) -> Any:
        return self._extreme("min", dim, keepdim)

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        data = self._array()
        if self.numel() == 0:
            raise ShapeError(f"argmax() of an empty tensor (shape {self._shape}) has no value")
        if dim is None:
            return self._wrap(self._backend.reduce("argmax", data.reshape(-1), 0, False).astype(np.int64))
        return self._wrap(self._backend.reduce("argmax", data, _dim(dim, self.ndim), keepdim).astype(np.int64))

    def any(self) -> Tensor:
        return self._wrap(self._backend.reduce("any", self._array(), None, False))

    def all(self) -> Tensor:
        return self._wrap(self._backend.reduce("all", self._array(), None, False))

    # -- in-place writes ---------------------------------------------------------------------
    def _inplace(self, op: str, other: Any, alpha: Any = None) -> Self:
        dst = self._writable(f"{op}_")
        src = self._operand(other, f"{op}_")
        src_dtype = other._dtype if isinstance(other, TensorOps) else None
        target = (
            promote_types(self._dtype, src_dtype)
            if src_dtype is not None
            else promote_with_scalar(self._dtype, other)
            if isinstance(other, _NUMBER)
            else from_numpy_dtype(np.asarray(src).dtype)
        )
        if op == "div" and not target.is_floating_point:
            target = float32
        if target.category > self._dtype.category:
            raise DTypeError(
                f"{op}_: the result is {target.name} and cannot be written into this "
                f"{self._dtype.name} tensor in place; use the out-of-place form"
            )
        shape = np.shape(src)
        if shape != self._shape and not _broadcasts_to(shape, self._shape):
            raise ShapeError(
                f"{op}_ would change the tensor's shape from {self._shape} to "
                f"{_broadcast(self._shape, shape, op)}: in-place results keep the shape"
            )
        if alpha is not None:
            src = self._backend.binary("mul", src, alpha)
        if src_dtype is not None and src_dtype is not self._dtype:
            src = src.astype(self._dtype.numpy)  # same category: meet in the destination's dtype
        with self._lineage:
            self._backend.inplace(op, dst, src)
        return self

    def add_(self, other: Any, *, alpha: Any = None) -> Self:
        return self._inplace("add", other, alpha)

    def sub_(self, other: Any, *, alpha: Any = None) -> Self:
        return self._inplace("sub", other, alpha)

    def mul_(self, other: Any) -> Self:
        return self._inplace("mul", other)

    def div_(self, other: Any) -> Self:
        return self._inplace("div", other)

    def copy_(self, src: Any) -> Self:
        """Write ``src``'s values into this tensor: its dtype converts, its shape must broadcast
        to this one, and it may live on another device."""
        dst = self._writable("copy_")
        if isinstance(src, TensorOps):
            values = src._array()
            if src._device != self._device:
                values = self._backend.from_host(src._backend.to_host(values), self._device.index or 0)
        else:
            values = self._operand(src, "copy_")
        shape = np.shape(values)
        if shape != self._shape and not _broadcasts_to(shape, self._shape):
            raise ShapeError(f"copy_ needs a source that broadcasts to {self._shape}, got shape {shape}")
        with self._lineage:
            self._backend.copy_into(dst, values)
        return self

    def fill_(self, value: Any) -> Self:
        """Set every element to ``value`` (a no-op on a storage-free tensor: nothing to fill)."""
        if self.has_storage:
            dst = self._writable("fill_")
            with self._lineage:
                self._backend.fill(dst, value)
        return self

    def zero_(self) -> Self:
        return self.fill_(0)

    def normal_(self, mean: float = 0.0, std: float = 1.0) -> Self:
        """Fill with normal samples (``manual_seed`` makes them reproducible); a no-op when storage-free."""
        return self._random_("normal", mean, std)

    def uniform_(self, a: float = 0.0, b: float = 1.0) -> Self:
        """Fill with samples from [a, b); a no-op when storage-free."""
        return self._random_("uniform", a, b)

    def _random_(self, kind: str, a: float, b: float) -> Self:
        if not self.has_storage:
            return self
        if not self._dtype.is_floating_point:
            raise DTypeError(f"{kind}_ needs a floating-point tensor, this one is {self._dtype.name}")
        dst = self._writable(f"{kind}_")
        with self._lineage:
            self._backend.random_(kind, dst, a, b)
        return self


def _broadcast(a: tuple[int, ...], b: tuple[int, ...], op: str) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError as err:
        raise ShapeError(f"{op}: shapes {a} and {b} do not broadcast") from err


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether an operand of ``shape`` broadcasts to exactly ``target``."""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target), strict=False))


def _matmul(x: TensorOps, y: TensorOps) -> Tensor:
    a, b = x._array(), y._array()
    if x._device != y._device:
        raise DeviceError(f"matmul: tensors on {x._device} and {y._device} cannot meet; move one first")
    if x.ndim == 0 or y.ndim == 0:
        raise ShapeError("matmul needs tensors with at least one dimension (use * for scalars)")
    inner_b = y._shape[0] if y.ndim == 1 else y._shape[-2]
    if x._shape[-1] != inner_b:
        raise ShapeError(
            f"matmul: shapes {x._shape} and {y._shape} do not fit: {x._shape[-1]} != {inner_b} "
            "(the last dimension of the first must equal the second-to-last of the second)"
        )
    if x.ndim > 2 and y.ndim > 2:
        _broadcast(x._shape[:-2], y._shape[:-2], "matmul batch dimensions")
    target = promote_types(x._dtype, y._dtype)
    if target is bool_:
        raise DTypeError("matmul of bool tensors is not defined: cast to an integer or float dtype first")
    if x._dtype is not target:
        a = a.astype(target.numpy)
    if y._dtype is not target:
        b = b.astype(target.numpy)
    backend = x._backend
    if target in _HALF:  # numpy has no fast half GEMM: compute in float32, round once
        out = backend.matmul(a.astype(np.float32), b.astype(np.float32)).astype(target.numpy)
    else:
        out = backend.matmul(a, b)
    return x._wrap(out)
