"""packrt's Tensor: an array on a device, with a dtype, a lineage and no autograd.

A tensor either holds storage (a numpy array on the CPU, a cupy array on CUDA) or is
*storage-free*: declared under :func:`packrt.meta_init` with a shape, dtype and device but
no bytes. Every computing operation goes to the kernel backend of the tensor's device.

A tensor and every view made from it share one *lineage* whose version counter each
in-place write bumps; layers compare it with the version they packed from to notice a
stale pack.
"""

from __future__ import annotations

import copy as _copy
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, Self

import numpy as np

from packrt_core import dispatch
from packrt_core.device import CPU, Device, as_device
from packrt_core.dtypes import (
    bfloat16,
    bool_,
    dtype,
    float16,
    float32,
    from_numpy_dtype,
    int64,
    promote_types,
    promote_with_scalar,
)
from packrt_core.errors import (
    DeviceError,
    DLPackError,
    DTypeError,
    IndexingError,
    ShapeError,
    StorageFreeError,
)
from packrt_core.placement import parse_to_args

_NUMBER = (int, float, bool, np.number, np.bool_)
_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
_HALF = (float16, bfloat16)
_DEFAULT_SHOWN = (float32, int64, bool_)  # dtypes the repr leaves out, as PyTorch does
_DLPACK_DEVICE = {"cpu": 1, "cuda": 2}


class _Lineage:
    """The version counter a tensor shares with its views."""

    __slots__ = ("__weakref__", "version")

    def __init__(self) -> None:
        self.version = 0


class MaxResult(NamedTuple):
    """``max(dim)``: the maxima and where they are."""

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


class Tensor:
    """An n-dimensional array on a device. Make one with ``packrt.tensor``, the factory
    functions or ``packrt.from_numpy``; ``Tensor(t)`` shares ``t``'s storage."""

    __slots__ = ("__weakref__", "_data", "_device", "_dtype", "_lineage", "_shape")
    __array_priority__ = 1000  # ndarray <op> Tensor defers to the Tensor's reflected op

    _data: Any
    _device: Device
    _dtype: dtype
    _lineage: _Lineage
    _shape: tuple[int, ...]

    def __init__(self, data: Any) -> None:
        if isinstance(data, Tensor):
            self._adopt(data)
        else:
            from packrt_core.creation import tensor

            self._adopt(tensor(data))

    # -- construction (internal) ---------------------------------------------------
    @classmethod
    def _make(
        cls,
        data: Any,
        device: Device,
        dtype_: dtype | None = None,
        lineage: _Lineage | None = None,
        shape: tuple[int, ...] | None = None,
    ) -> Self:
        """Wrap an array (or declare a storage-free tensor when ``data`` is None)."""
        obj = cls.__new__(cls)
        obj._data = data
        obj._device = device
        obj._dtype = dtype_ if dtype_ is not None else from_numpy_dtype(data.dtype)
        obj._lineage = lineage if lineage is not None else _Lineage()
        obj._shape = tuple(data.shape) if data is not None else (shape or ())
        return obj

    def _adopt(self, other: Tensor) -> None:
        self._data = other._data
        self._device = other._device
        self._dtype = other._dtype
        self._lineage = other._lineage
        self._shape = other._shape

    def _wrap(self, data: Any) -> Tensor:
        """A new tensor (own lineage) on this tensor's device."""
        return Tensor._make(data, self._device)

    def _view(self, data: Any) -> Tensor:
        """A view sharing this tensor's lineage when ``data`` shares its memory."""
        shares = self._backend.shares_memory(data, self._data)
        return Tensor._make(data, self._device, self._dtype, self._lineage if shares else None)

    def _rebind(self, data: Any, device: Device | None = None) -> None:
        """Point this object at new storage (a new lineage): how a Parameter keeps its identity
        through a move or a cast."""
        self._data = data
        if device is not None:
            self._device = device
        self._dtype = from_numpy_dtype(data.dtype)
        self._shape = tuple(data.shape)
        self._lineage = _Lineage()

    def _declare(self, shape: tuple[int, ...], dtype_: dtype, device: Device) -> None:
        """Make this object storage-free with the given geometry (a new lineage)."""
        self._data = None
        self._shape = shape
        self._dtype = dtype_
        self._device = device
        self._lineage = _Lineage()

    # -- storage ---------------------------------------------------------------------
    @property
    def _backend(self) -> Any:
        return dispatch.backend_for(self._device)

    def _array(self) -> Any:
        """The storage, or StorageFreeError when there is none to read."""
        data = self._data
        if data is None:
            raise StorageFreeError(
                f"cannot read a storage-free tensor (shape {self._shape}, {self._dtype.name}, declared under "
                "meta_init): give it values with load_state_dict(..., assign=True) or storage with to_empty()"
            )
        return data

    def _writable(self, what: str) -> Any:
        data = self._data
        if data is None:
            raise StorageFreeError(
                f"{what} cannot write into a storage-free tensor (shape {self._shape}, {self._dtype.name}): "
                "bind its value with load_state_dict(..., assign=True) or give it storage with to_empty()"
            )
        if not data.flags.writeable:
            raise StorageFreeError(
                f"{what} cannot write into a read-only tensor (a view made by expand(), or of a read-only "
                "array): clone() it first"
            )
        return data

    def _bump(self) -> None:
        self._lineage.version += 1

    @property
    def _version(self) -> int:
        """How many in-place writes this tensor's lineage has seen."""
        return self._lineage.version

    @property
    def has_storage(self) -> bool:
        """False for a storage-free tensor declared under meta init."""
        return self._data is not None

    @property
    def storage_nbytes(self) -> int:
        """Bytes of storage this tensor holds: 0 when storage-free."""
        return 0 if self._data is None else int(self._data.nbytes)

    # -- geometry ----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> dtype:
        return self._dtype

    @property
    def device(self) -> Device:
        return self._device

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def dim(self) -> int:
        return len(self._shape)

    def size(self, dim: int | None = None) -> Any:
        return self._shape if dim is None else self._shape[_dim(dim, self.ndim)]

    def numel(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Logical size in bytes (numel x itemsize), as numpy reports it, storage or not."""
        return self.numel() * self._dtype.itemsize

    def element_size(self) -> int:
        return self._dtype.itemsize

    def is_floating_point(self) -> bool:
        return self._dtype.is_floating_point

    def data_ptr(self) -> int:
        """Address of the first element (0 when storage-free); equal pointers mean shared storage."""
        if self._data is None:
            return 0
        if self._device == CPU:
            return int(self._data.__array_interface__["data"][0])
        return int(self._data.data.ptr)

    # -- conversion --------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The CPU storage as a numpy array, zero-copy: writes through either side show in the other."""
        if self._device != CPU:
            raise DeviceError(f"numpy() needs a cpu tensor, this one is on {self._device}: call .cpu() first")
        return self._array()  # type: ignore[no-any-return]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        data = self._array()
        if self._device != CPU:
            if copy is False:
                raise ValueError(f"a tensor on {self._device} cannot become a numpy array without a copy")
            data = self._backend.to_host(data)
        if dtype is not None and np.dtype(dtype) != data.dtype:
            if copy is False:
                raise ValueError(f"converting {self._dtype.name} to {np.dtype(dtype)} needs a copy")
            return data.astype(dtype)  # type: ignore[no-any-return]
        return data.copy() if copy else data  # type: ignore[no-any-return]

    def __dlpack__(
        self, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: bool | None = None
    ) -> Any:
        data = self._array()
        try:
            if stream is None and max_version is None and dl_device is None and copy is None:
                return data.__dlpack__()
            return data.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
        except BufferError as err:
            if self._dtype is bfloat16:
                raise DLPackError(
                    "bfloat16 tensors cannot leave through DLPack: numpy (packrt's CPU storage) cannot export "
                    "bfloat16; convert first with .float(), or share through .numpy()"
                ) from err
            raise DLPackError(f"DLPack export of a {self._dtype.name} tensor on {self._device} failed: {err}") from err

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._data is not None:
            return tuple(self._data.__dlpack_device__())  # type: ignore[return-value]
        return (_DLPACK_DEVICE[self._device.type], self._device.index or 0)

    def tolist(self) -> Any:
        return self._backend.to_host(self._array()).tolist()

    def item(self) -> Any:
        if self.numel() != 1:
            raise ShapeError(f"item() needs a tensor with exactly one element, this one has shape {self._shape}")
        return self._backend.to_host(self._array()).reshape(()).item()

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self._shape[0]):
            yield self[i]

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ShapeError(f"the truth value of a tensor of shape {self._shape} is ambiguous: use .any() or .all()")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __hash__(self) -> int:
        return id(self)

    # -- placement and casts -----------------------------------------------------------
    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(other)`` or keywords; returns
        ``self`` when nothing changes (unless ``copy=True``), else a new tensor."""
        target = parse_to_args(args, kwargs)
        device = target.device if target.device is not None else self._device
        dtype_ = target.dtype if target.dtype is not None else self._dtype
        if device == self._device and dtype_ is self._dtype and not target.copy:
            return self
        return Tensor._make(self._placed(device, dtype_), device, dtype_, shape=self._shape)

    def _placed(self, device: Device, dtype_: dtype) -> Any:
        """This tensor's storage converted to ``dtype_`` on ``device``: always new storage
        (None for a storage-free tensor, which re-declares there)."""
        data = self._data
        if data is None:
            return None
        src = self._backend
        if device == self._device:
            return src.astype(data, dtype_.numpy) if dtype_ is not self._dtype else src.copy(data)
        dst = dispatch.backend_for(device)
        host = src.to_host(data)
        if dtype_ is not self._dtype:
            host = host.astype(dtype_.numpy)
        return dst.from_host(host, device.index or 0)

    def cpu(self) -> Tensor:
        return self.to(CPU)

    def cuda(self, device: int | Device | str | None = None) -> Tensor:
        return self.to(Device("cuda") if device is None else as_device(device))

    def float(self) -> Tensor:
        return self.to(float32)

    def half(self) -> Tensor:
        return self.to(float16)

    def bfloat16(self) -> Tensor:
        return self.to(bfloat16)

    def double(self) -> Tensor:
        from packrt_core.dtypes import float64

        return self.to(float64)

    def clone(self) -> Tensor:
        """A copy with its own storage and lineage (storage-free stays storage-free)."""
        if self._data is None:
            return Tensor._make(None, self._device, self._dtype, shape=self._shape)
        return self._wrap(self._backend.copy(self._data))

    def detach(self) -> Tensor:
        """A plain tensor sharing this one's storage and lineage."""
        return Tensor._make(self._data, self._device, self._dtype, self._lineage, self._shape)

    def contiguous(self) -> Tensor:
        data = self._array()
        if data.flags.c_contiguous:
            return self
        return self._wrap(self._backend.ascontiguous(data))

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        data = None if self._data is None else self._backend.copy(self._data)
        new._data = data
        new._device = self._device
        new._dtype = self._dtype
        new._shape = self._shape
        new._lineage = _Lineage()
        state = getattr(self, "__dict__", None)
        if state:
            new.__dict__.update(_copy.deepcopy(state, memo))
        return new

    # -- shape and views -----------------------------------------------------------------
    def reshape(self, *shape: Any) -> Tensor:
        """The same elements in a new shape: a view when the layout allows, else a copy."""
        data = self._array()
        target = _shape_of(shape)
        try:
            return self._view(data.reshape(target))
        except ValueError as err:
            raise ShapeError(f"cannot reshape a tensor of shape {self._shape} ({self.numel()} elements) "
                             f"into {target}") from err

    def view(self, *shape: Any) -> Tensor:
        """Like reshape, but always a view: a layout that would need a copy is a ShapeError."""
        data = self._array()
        target = _shape_of(shape)
        try:
            out = data.view()
            out.shape = target
        except (ValueError, AttributeError) as err:
            raise ShapeError(f"view{target} is impossible for a tensor of shape {self._shape} and strides "
                             f"{data.strides} without a copy: use reshape() or contiguous().view()") from err
        return Tensor._make(out, self._device, self._dtype, self._lineage)

    def flatten(self) -> Tensor:
        return self.reshape(-1)

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        data = self._array()
        a, b = _dim(dim0, self.ndim), _dim(dim1, self.ndim)
        return Tensor._make(data.swapaxes(a, b), self._device, self._dtype, self._lineage)

    def permute(self, *dims: Any) -> Tensor:
        data = self._array()
        order = tuple(_dim(d, self.ndim) for d in _shape_of(dims))
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(f"permute{tuple(dims)} is not a permutation of the {self.ndim} dimensions")
        return Tensor._make(data.transpose(order), self._device, self._dtype, self._lineage)

    @property
    def T(self) -> Tensor:  # noqa: N802 - numpy's and torch's name
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self) -> Tensor:  # noqa: N802
        return self.transpose(-2, -1)

    def unsqueeze(self, dim: int) -> Tensor:
        data = self._array()
        d = _dim(dim, self.ndim + 1)
        return Tensor._make(data.reshape(self._shape[:d] + (1,) + self._shape[d:]), self._device, self._dtype,
                            self._lineage)

    def squeeze(self, dim: int | None = None) -> Tensor:
        """Drop size-1 dimensions (all of them, or ``dim`` when it has size 1; otherwise unchanged)."""
        data = self._array()
        if dim is None:
            shape = tuple(s for s in self._shape if s != 1)
        else:
            d = _dim(dim, self.ndim)
            shape = self._shape if self._shape[d] != 1 else self._shape[:d] + self._shape[d + 1:]
        return Tensor._make(data.reshape(shape), self._device, self._dtype, self._lineage)

    def expand(self, *sizes: Any) -> Tensor:
        """A read-only broadcast view; -1 keeps a dimension's size."""
        data = self._array()
        target = list(_shape_of(sizes))
        offset = len(target) - self.ndim
        if offset < 0:
            raise ShapeError(f"expand{tuple(target)} has fewer dimensions than the tensor's shape {self._shape}")
        for i, s in enumerate(self._shape):
            if target[offset + i] == -1:
                target[offset + i] = s
            elif s != 1 and s != target[offset + i]:
                raise ShapeError(f"cannot expand shape {self._shape} to {tuple(target)}: dimension {i} has size {s}")
        out = self._backend.xp.broadcast_to(data, tuple(target))
        return Tensor._make(out, self._device, self._dtype, self._lineage)

    def _index(self, index: Any) -> Any:
        """A tensor-free index; reports whether it is basic (numpy returns a view for those)."""
        items = index if isinstance(index, tuple) else (index,)
        basic = True
        converted = []
        for item in items:
            if isinstance(item, Tensor):
                if item._device != self._device:
                    raise DeviceError(f"index tensor is on {item._device}, the indexed tensor on {self._device}")
                converted.append(item._array())
                basic = False
            elif item is None or item is Ellipsis or isinstance(item, int | slice | np.integer):
                converted.append(item)
            else:
                basic = False
                converted.append(item)
        if basic and Ellipsis not in converted:
            converted.append(Ellipsis)  # keeps a 0-d result an array view instead of a scalar copy
        return tuple(converted), basic

    def __getitem__(self, index: Any) -> Tensor:
        data = self._array()
        idx, basic = self._index(index)
        try:
            out = data[idx]
        except IndexError as err:
            raise IndexingError(f"index {index!r} is out of range for a tensor of shape {self._shape}: {err}") from err
        return Tensor._make(out, self._device, self._dtype, self._lineage if basic else None)

    def __setitem__(self, index: Any, value: Any) -> None:
        data = self._writable("index assignment")
        idx, _ = self._index(index)
        src = self._operand(value, "index assignment")
        try:
            self._backend.setitem(data, idx, src)
        except IndexError as err:
            raise IndexingError(f"index {index!r} is out of range for a tensor of shape {self._shape}: {err}") from err
        except ValueError as err:
            raise ShapeError(f"cannot assign a value of shape {np.shape(src)} to tensor{list(self._shape)}"
                             f"[{index!r}]: {err}") from err
        self._bump()

    # -- arithmetic ------------------------------------------------------------------------
    def _operand(self, other: Any, what: str) -> Any:
        """The array or Python number ``other`` contributes, on this tensor's device."""
        if isinstance(other, Tensor):
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
        if isinstance(other, Tensor):
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
            return NotImplemented
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
        return Tensor._make(out, self._device)

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

    def __eq__(self, other: object) -> Any:  # type: ignore[override]
        return self._binary("eq", other)

    def __ne__(self, other: object) -> Any:  # type: ignore[override]
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

    def __pos__(self) -> Tensor:
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
        if not isinstance(other, Tensor):
            return NotImplemented
        return _matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        if not isinstance(other, Tensor):
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
            raise DTypeError(f"mean() needs a floating-point tensor, this one is {self._dtype.name}: call .float() first")
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
    def _inplace(self, op: str, other: Any, alpha: Any = None) -> Tensor:
        dst = self._writable(f"{op}_")
        src = self._operand(other, f"{op}_")
        src_dtype = other._dtype if isinstance(other, Tensor) else None
        target = (promote_types(self._dtype, src_dtype) if src_dtype is not None
                  else promote_with_scalar(self._dtype, other) if isinstance(other, _NUMBER)
                  else from_numpy_dtype(np.asarray(src).dtype))
        if op == "div" and not target.is_floating_point:
            target = float32
        if target.category > self._dtype.category:
            raise DTypeError(f"{op}_: the result is {target.name} and cannot be written into this "
                             f"{self._dtype.name} tensor in place; use the out-of-place form")
        shape = np.shape(src)
        if shape != self._shape and _broadcast(self._shape, shape, f"{op}_") != self._shape:
            raise ShapeError(f"{op}_ would change the tensor's shape from {self._shape} to "
                             f"{_broadcast(self._shape, shape, op)}: in-place results keep the shape")
        if alpha is not None:
            src = self._backend.binary("mul", src, alpha)
        if src_dtype is not None and src_dtype is not self._dtype:
            src = src.astype(self._dtype.numpy)  # same category: meet in the destination's dtype
        self._backend.inplace(op, dst, src)
        self._bump()
        return self

    def add_(self, other: Any, *, alpha: Any = None) -> Tensor:
        return self._inplace("add", other, alpha)

    def sub_(self, other: Any, *, alpha: Any = None) -> Tensor:
        return self._inplace("sub", other, alpha)

    def mul_(self, other: Any) -> Tensor:
        return self._inplace("mul", other)

    def div_(self, other: Any) -> Tensor:
        return self._inplace("div", other)

    def copy_(self, src: Any) -> Tensor:
        """Write ``src``'s values into this tensor: its dtype converts, its shape must broadcast
        to this one, and it may live on another device."""
        dst = self._writable("copy_")
        if isinstance(src, Tensor):
            values = src._array()
            if src._device != self._device:
                values = self._backend.from_host(src._backend.to_host(values), self._device.index or 0)
        else:
            values = self._operand(src, "copy_")
        shape = np.shape(values)
        if shape != self._shape and _broadcast(self._shape, shape, "copy_") != self._shape:
            raise ShapeError(f"copy_ needs a source that broadcasts to {self._shape}, got shape {shape}")
        self._backend.copy_into(dst, values)
        self._bump()
        return self

    def fill_(self, value: Any) -> Tensor:
        """Set every element to ``value`` (a no-op on a storage-free tensor: nothing to fill)."""
        if self._data is not None:
            self._backend.fill(self._writable("fill_"), value)
            self._bump()
        return self

    def zero_(self) -> Tensor:
        return self.fill_(0)

    def normal_(self, mean: float = 0.0, std: float = 1.0) -> Tensor:
        """Fill with normal samples (packrt.manual_seed makes them reproducible); a no-op when storage-free."""
        return self._random_("normal", mean, std)

    def uniform_(self, a: float = 0.0, b: float = 1.0) -> Tensor:
        """Fill with samples from [a, b); a no-op when storage-free."""
        return self._random_("uniform", a, b)

    def _random_(self, kind: str, a: float, b: float) -> Tensor:
        if self._data is None:
            return self
        if not self._dtype.is_floating_point:
            raise DTypeError(f"{kind}_ needs a floating-point tensor, this one is {self._dtype.name}")
        self._backend.random_(kind, self._writable(f"{kind}_"), a, b)
        self._bump()
        return self

    # -- repr ------------------------------------------------------------------------------
    def __repr__(self) -> str:
        extras = []
        if self._data is None:
            body = "..."
            extras.append(f"size={self._shape}")
        else:
            host = self._backend.to_host(self._data)
            body = np.array2string(host, separator=", ", prefix="tensor(", threshold=1000)
        if self._device != CPU:
            extras.append(f"device='{self._device}'")
        if self._dtype not in _DEFAULT_SHOWN or (self._data is None and self._dtype is not float32):
            extras.append(f"dtype={self._dtype!r}")
        if self._data is None:
            extras.append("storage_free=True")
        return "tensor(" + ", ".join([body, *extras]) + ")"


def _broadcast(a: tuple[int, ...], b: tuple[int, ...], op: str) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError as err:
        raise ShapeError(f"{op}: shapes {a} and {b} do not broadcast") from err


def _matmul(x: Tensor, y: Tensor) -> Tensor:
    a, b = x._array(), y._array()
    if x._device != y._device:
        raise DeviceError(f"matmul: tensors on {x._device} and {y._device} cannot meet; move one first")
    if x.ndim == 0 or y.ndim == 0:
        raise ShapeError("matmul needs tensors with at least one dimension (use * for scalars)")
    inner_b = y._shape[0] if y.ndim == 1 else y._shape[-2]
    if x._shape[-1] != inner_b:
        raise ShapeError(f"matmul: shapes {x._shape} and {y._shape} do not fit: {x._shape[-1]} != {inner_b} "
                         "(the last dimension of the first must equal the second-to-last of the second)")
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
    return Tensor._make(out, x._device)
