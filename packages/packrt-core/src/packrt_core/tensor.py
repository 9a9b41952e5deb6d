"""packrt's Tensor: an array on a device, with a dtype, a lineage and no autograd.

A tensor either holds storage (a numpy array on the CPU, a cupy array on CUDA) or is
*storage-free*: declared under :func:`packrt.meta_init` with a shape, dtype and device but
no bytes. Arithmetic calls the array namespace of the tensor's storage (numpy or cupy), found
through its device's backend; the promotion and shape rules live in :mod:`packrt_core.tensor_math`.

A tensor and every view made from it share one *lineage* whose version counter each
in-place write bumps; layers compare it with the version they packed from to notice a
stale pack.
"""

from __future__ import annotations

import builtins
import copy as _copy
import threading
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any, ClassVar, NamedTuple, Self

import numpy as np

from packrt_core import dispatch, publication, tensor_math
from packrt_core.device import CPU, Device, as_device
from packrt_core.dtypes import (
    as_dtype,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    from_numpy_dtype,
    int64,
)
from packrt_core.dtypes import dtype as DType  # noqa: N812 - the property `dtype` shadows the name here
from packrt_core.errors import (
    DeviceError,
    DLPackError,
    DTypeError,
    IndexingError,
    ReadOnlyError,
    ShapeError,
    StorageFreeError,
)
from packrt_core.meta import declaring
from packrt_core.placement import parse_to_args
from packrt_core.tensor_math import NUMBER, normalize_dim, shape_of

_dim = normalize_dim
_shape_of = shape_of

_DEFAULT_SHOWN = (float32, int64, bool_)
_ONE_BYTE = np.zeros(
    (), np.uint8
)  # what a storage-free tensor's shape-only views alias  # dtypes the repr leaves out, as PyTorch does
_DLPACK_DEVICE = {"cpu": 1, "cuda": 2}


# Every in-place write fetches its storage and writes it while holding this lock, and a
# packed layer swaps its pack in and drops raw storage while holding it too: so a write can
# never land in storage a pack has just dropped (its edit would be lost). Forwards never take
# it, and a pack is built outside it.
WRITES = threading.Lock()


class _Lineage:
    """The version counter a tensor shares with its views.

    An in-place write runs inside ``with lineage:``, which holds :data:`WRITES`, counts the
    write as in progress and bumps the version when it ends; a layer building a pack from the
    storage checks both (a seqlock) so it never packs half of an edit. The lineage of a tensor a
    module binds (a Parameter, a Buffer) is *published*: a write to it outside a module call is
    a publication (:mod:`packrt_core.publication`), so no forward on another thread reads it halfway.
    """

    __slots__ = ("__weakref__", "published", "version", "writers")

    def __init__(self, published: bool = False) -> None:
        self.version = 0
        self.writers = 0
        self.published = published

    def __enter__(self) -> None:
        if self.published:
            # a write does not nest in another on its thread (WRITES is not re-entrant): one flag will do
            me = publication.reader()
            me.write_begun = publication.begin()
        WRITES.acquire()
        self.writers += 1

    def __exit__(self, *exc: object) -> None:
        self.writers -= 1
        self.version += 1
        WRITES.release()
        if self.published:
            me = publication.reader()
            begun, me.write_begun = me.write_begun, False
            publication.end(begun)


class MaxResult(NamedTuple):
    """``max(dim)`` / ``min(dim)``: the extreme values and where they are."""

    values: Tensor
    indices: Tensor


def host_array(data: Any, dtype_: DType | None) -> np.ndarray:
    """A new host array holding ``data`` (nested lists, numbers, numpy arrays, tensors).

    Without ``dtype_``: Python floats give float32, ints int64, bools bool (as PyTorch);
    numpy arrays and tensors keep their dtype.
    """
    if isinstance(data, Tensor):
        host = np.array(data.cpu().numpy(), copy=True)
    else:
        try:
            host = np.array(data, copy=True)
        except (ValueError, TypeError) as err:
            raise ShapeError(f"cannot make a tensor from {type(data).__name__} data: {err}") from err
        if host.dtype == np.float64 and dtype_ is None and not isinstance(data, np.ndarray | np.generic):
            host = host.astype(np.float32)
        if host.dtype.kind in "OUSV":
            raise DTypeError(f"cannot make a tensor from {type(data).__name__} data: its elements are not numbers")
    if dtype_ is not None:
        return host.astype(dtype_.numpy)
    from_numpy_dtype(host.dtype)  # refuses complex and other dtypes packrt has no name for
    return host


# Tensor's operators and elementwise methods differ only in the tensor_math op they name: each is made
# here once, with the signature the checker and help() see.
def _binary_operator(op: str, *, reverse: bool = False) -> Callable[[Tensor, Any], Tensor]:
    """The operator method ``tensor <op> other`` (``other <op> tensor`` when ``reverse``)."""

    def operator(self: Tensor, other: Any) -> Tensor:
        return self._binary(op, other, reverse)

    return operator


def _operator_pair(op: str) -> tuple[Callable[[Tensor, Any], Tensor], Callable[[Tensor, Any], Tensor]]:
    """``tensor <op> other`` and its reflection, which Python calls for ``number <op> tensor``."""
    return _binary_operator(op), _binary_operator(op, reverse=True)


def _comparison(op: str) -> Callable[[Tensor, object], Any]:
    """``==`` / ``!=``: typed as object's own (any ``other``), answering with a bool tensor."""

    def compare(self: Tensor, other: object) -> Any:
        return self._binary(op, other)

    return compare


def _elementwise(op: str, what: str) -> Callable[[Tensor], Tensor]:
    """The method ``tensor.<op>()``: a new tensor of ``what``."""

    def method(self: Tensor) -> Tensor:
        return self._unary(op)

    method.__name__ = method.__qualname__ = op
    method.__doc__ = f"A new tensor of {what}."
    return method


class Tensor:
    """An n-dimensional array on a device. Make one with ``packrt.tensor``, the factory
    functions or ``packrt.from_numpy``; ``Tensor(t)`` shares ``t``'s storage."""

    __slots__ = ("__weakref__", "_data", "_device", "_dtype", "_lineage", "_shape")
    __array_ufunc__ = None  # ndarray <op> Tensor defers to the Tensor's reflected op

    _data: Any
    _device: Device
    _dtype: DType
    _lineage: _Lineage
    _shape: tuple[int, ...]
    _not_copied: ClassVar[frozenset[str]] = frozenset()  # subclass state a deep copy leaves behind

    def __init__(self, data: Any) -> None:
        if isinstance(data, Tensor):
            self._adopt(data)
        else:
            self._adopt(Tensor._make(host_array(data, None), CPU))

    # -- construction (internal) ---------------------------------------------------
    @classmethod
    def _make(
        cls,
        data: Any,
        device: Device,
        dtype_: DType | None = None,
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

    @classmethod
    def _allocate(cls, size: Any, dt: DType, dev: Device, fill: Any, *, storage: bool = True) -> Tensor:
        """The one tensor factory (``packrt.zeros`` and friends, ``Tensor.new_*``): ``size`` checked; a
        storage-free tensor inside ``meta_init`` or when ``storage`` is False; else the device backend's
        array, uninitialised (``fill`` None), a random draw (``fill`` a ``(kind, a, b)`` tuple) or filled."""
        shape = _shape_of(size)
        if any(n < 0 for n in shape):
            raise ShapeError(f"a shape cannot have negative sizes, got {shape}")
        if not storage or declaring():
            return Tensor._make(None, dev, dt, shape=shape)
        backend = dispatch.backend_for(dev)
        index = dev.index or 0
        if fill is None:
            return Tensor._make(backend.empty(shape, dt.numpy, index), dev, dt)
        if isinstance(fill, tuple):
            kind, a, b = fill
            return Tensor._make(backend.random(kind, shape, dt.numpy, a, b, index), dev, dt)
        return Tensor._make(backend.full(shape, fill, dt.numpy, index), dev, dt)

    def _adopt(self, other: Tensor) -> None:
        self._data = other._data
        self._device = other._device
        self._dtype = other._dtype
        self._lineage = other._lineage
        self._shape = other._shape

    def _publish_writes(self) -> None:
        """A module binds this tensor: its writes (and those through its views) publish from now on."""
        self._lineage.published = True

    def _wrap(self, data: Any) -> Tensor:
        """A new tensor (own lineage) on this tensor's device."""
        return Tensor._make(data, self._device)

    def _view(self, data: Any) -> Tensor:
        """A view sharing this tensor's lineage when ``data`` shares its memory."""
        shares = bool(self._xp.may_share_memory(data, self._data))
        return Tensor._make(data, self._device, self._dtype, self._lineage if shares else None)

    def _rebind(self, data: Any, device: Device | None = None) -> None:
        """Point this object at new storage (a new lineage): how a Parameter keeps its identity
        through a move or a cast."""
        self._data = data
        if device is not None:
            self._device = device
        self._dtype = from_numpy_dtype(data.dtype)
        self._shape = tuple(data.shape)
        self._lineage = _Lineage(self._lineage.published)

    def _declare(self, shape: tuple[int, ...], dtype_: DType, device: Device) -> None:
        """Make this object storage-free with the given geometry (a new lineage)."""
        self._data = None
        self._shape = shape
        self._dtype = dtype_
        self._device = device
        self._lineage = _Lineage(self._lineage.published)

    # -- storage ---------------------------------------------------------------------
    @property
    def _backend(self) -> dispatch.DeviceBackend:
        return dispatch.backend_for(self._device)

    @property
    def _xp(self) -> ModuleType:
        """The array namespace of this tensor's storage (numpy on the CPU, cupy on CUDA)."""
        return dispatch.backend_for(self._device).xp

    def _array(self) -> Any:
        """The storage, or StorageFreeError when there is none to read."""
        data = self._data
        if data is None:
            raise StorageFreeError(
                f"cannot read a storage-free tensor (shape {self._shape}, {self._dtype.name}, declared under "
                "meta_init): give it values with load_state_dict(..., assign=True) or storage with to_empty()"
            )
        return data

    def _check_writable(self, what: str) -> None:
        """StorageFreeError without storage, ReadOnlyError for a read-only view: what an
        in-place write checks before it takes :data:`WRITES`."""
        data = self._data
        if data is None and not self.has_storage:
            raise StorageFreeError(
                f"{what} cannot write into a storage-free tensor (shape {self._shape}, {self._dtype.name}): "
                "bind its value with load_state_dict(..., assign=True) or give it storage with to_empty()"
            )
        # cupy's flags have no "writeable": a device array is always writable
        if data is not None and not getattr(data.flags, "writeable", True):
            raise ReadOnlyError(
                f"{what} cannot write into a read-only tensor (a view made by expand(), or of a read-only "
                "array): clone() it first"
            )

    def _write_target(self) -> Any:
        """The storage to write into; called inside ``with self._lineage:`` (a Parameter whose
        pack holds its values gets real storage back first)."""
        return self._data

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
        """Bytes of storage this tensor holds: 0 when storage-free (or while a pack holds its values)."""
        return 0 if self._data is None else int(self._data.nbytes)

    # -- geometry ----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dimension, as a tuple (known even for a storage-free tensor)."""
        return self._shape

    @property
    def dtype(self) -> DType:
        """The element type, a packrt ``dtype`` such as ``packrt.float32``."""
        return self._dtype

    @property
    def device(self) -> Device:
        """The ``Device`` the storage lives on (``cpu`` or ``cuda:<n>``)."""
        return self._device

    @property
    def ndim(self) -> int:
        """The number of dimensions (0 for a scalar tensor)."""
        return len(self._shape)

    def dim(self) -> int:
        """The number of dimensions, as PyTorch's ``dim()``; the same as ``ndim``."""
        return len(self._shape)

    def size(self, dim: int | None = None) -> Any:
        """The shape tuple, or with ``dim`` the size of that one dimension (negative counts from the end)."""
        return self._shape if dim is None else self._shape[_dim(dim, self.ndim)]

    def numel(self) -> int:
        """The number of elements (the product of the shape; 1 for a scalar)."""
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Logical size in bytes (numel x itemsize), as numpy reports it, storage or not."""
        return self.numel() * self._dtype.itemsize

    def element_size(self) -> int:
        """Bytes per element of the dtype."""
        return self._dtype.itemsize

    def is_floating_point(self) -> bool:
        """True for the float16, bfloat16, float32 and float64 dtypes."""
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
                    "bfloat16 tensors cannot leave through DLPack: numpy (packrt's CPU storage) cannot "
                    "export bfloat16; convert first with .float(), or share through .numpy()"
                ) from err
            raise DLPackError(f"DLPack export of a {self._dtype.name} tensor on {self._device} failed: {err}") from err

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._data is not None:
            return tuple(self._data.__dlpack_device__())
        return (_DLPACK_DEVICE[self._device.type], self._device.index or 0)

    def tolist(self) -> Any:
        """The values as nested Python lists (a scalar tensor gives a plain number); copies to the host first."""
        return self._backend.to_host(self._array()).tolist()

    def item(self) -> Any:
        """The one value of a one-element tensor as a Python number; any other shape is a ``ShapeError``."""
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

    def _placed(self, device: Device, dtype_: DType) -> Any:
        """This tensor's storage converted to ``dtype_`` on ``device``: always new storage
        (None for a storage-free tensor, which re-declares there)."""
        if not self.has_storage:
            return None
        data = self._array()
        src = self._backend
        if device == self._device:
            return data.astype(dtype_.numpy, copy=True) if dtype_ is not self._dtype else data.copy()
        dst = dispatch.backend_for(device)
        host = src.to_host(data)
        if dtype_ is not self._dtype:
            host = host.astype(dtype_.numpy)
        return dst.from_host(host, device.index or 0)

    def new_empty(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        """A tensor of ``size`` with uninitialized values, in this tensor's dtype and device unless
        given; storage-free when this tensor is (or inside ``meta_init``), as PyTorch's meta tensors."""
        return self._new(size, dtype, device, None)

    def new_zeros(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        """Like :meth:`new_empty`, filled with zeros."""
        return self._new(size, dtype, device, 0)

    def new_ones(self, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
        """Like :meth:`new_empty`, filled with ones."""
        return self._new(size, dtype, device, 1)

    def new_full(self, size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
        """Like :meth:`new_empty`, every element ``fill_value``."""
        return self._new((size,), dtype, device, fill_value)

    def _new(self, size: tuple[Any, ...], dtype_: Any, device: Any, fill: Any) -> Tensor:
        dt = as_dtype(dtype_) if dtype_ is not None else self._dtype
        dev = as_device(device) if device is not None else self._device
        return Tensor._allocate(size, dt, dev, fill, storage=self.has_storage)

    def cpu(self) -> Tensor:
        """This tensor on the CPU: ``self`` when it is already there, otherwise a copy."""
        return self.to(CPU)

    def cuda(self, device: int | Device | str | None = None) -> Tensor:
        """This tensor on a GPU (the first, or the given index or device): ``self`` when already there, else a copy."""
        return self.to(Device("cuda") if device is None else as_device(device))

    def float(self) -> Tensor:
        """This tensor as float32: ``self`` when it already is, otherwise a converted copy."""
        return self.to(float32)

    def half(self) -> Tensor:
        """This tensor as float16: ``self`` when it already is, otherwise a converted copy."""
        return self.to(float16)

    def bfloat16(self) -> Tensor:
        """This tensor as bfloat16: ``self`` when it already is, otherwise a converted copy."""
        return self.to(bfloat16)

    def double(self) -> Tensor:
        """This tensor as float64: ``self`` when it already is, otherwise a converted copy."""
        return self.to(float64)

    def clone(self) -> Tensor:
        """A copy with its own storage and lineage (storage-free stays storage-free)."""
        if not self.has_storage:
            return Tensor._make(None, self._device, self._dtype, shape=self._shape)
        return self._wrap(self._array().copy())

    def detach(self) -> Tensor:
        """A plain tensor sharing this one's storage and lineage."""
        return Tensor._make(self._data, self._device, self._dtype, self._lineage, self._shape)

    def contiguous(self) -> Tensor:
        """``self`` when the storage is already C-contiguous (or absent), otherwise a C-contiguous copy."""
        if not self.has_storage:
            return self
        data = self._array()
        if data.flags.c_contiguous:
            return self
        return self._wrap(self._xp.ascontiguousarray(data))

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new._data = self._array().copy() if self.has_storage else None
        new._device = self._device
        new._dtype = self._dtype
        new._shape = self._shape
        new._lineage = _Lineage(self._lineage.published)  # a copied model's weights are bound in the copy
        state = getattr(self, "__dict__", None)
        if state:
            kept = {k: v for k, v in state.items() if k not in self._not_copied}
            new.__dict__.update(_copy.deepcopy(kept, memo))
        return new

    # -- shape and views -----------------------------------------------------------------
    # Shape-only operations also work on storage-free tensors (as on PyTorch's meta tensors):
    # they run on a zero-byte stand-in of the tensor's shape, and the result is declared
    # storage-free with the shape numpy computed. Reading values still raises.
    def _layout(self) -> Any:
        """The storage, or for a storage-free tensor a stand-in of its shape whose elements all
        alias one byte (numpy computes every view of it without allocating)."""
        if self.has_storage:
            return self._array()
        return np.broadcast_to(_ONE_BYTE, self._shape)

    def _shaped(self, out: Any, shares: bool = True) -> Tensor:
        """A tensor over ``out`` (a view of :meth:`_layout`): storage-free when this one is."""
        if not self.has_storage:
            return Tensor._make(None, self._device, self._dtype, shape=tuple(out.shape))
        return Tensor._make(out, self._device, self._dtype, self._lineage if shares else None)

    def reshape(self, *shape: Any) -> Tensor:
        """The same elements in a new shape: a view when the layout allows, else a copy."""
        data = self._layout()
        target = _shape_of(shape)
        try:
            out = data.reshape(target)
            return self._view(out) if self.has_storage else self._shaped(out)
        except ValueError as err:
            raise ShapeError(
                f"cannot reshape a tensor of shape {self._shape} ({self.numel()} elements) into {target}"
            ) from err

    def view(self, *shape: Any) -> Tensor:
        """Like reshape, but always a view: a layout that would need a copy is a ShapeError."""
        data = self._layout()
        target = _shape_of(shape)
        try:
            out = data.view()
            out.shape = target
        except (ValueError, AttributeError) as err:
            raise ShapeError(
                f"view{target} is impossible for a tensor of shape {self._shape} and strides "
                f"{data.strides} without a copy: use reshape() or contiguous().view()"
            ) from err
        return self._shaped(out)

    def flatten(self) -> Tensor:
        """The elements as one dimension: a view when the layout allows, else a copy (as ``reshape(-1)``)."""
        return self.reshape(-1)

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """A view with dimensions ``dim0`` and ``dim1`` swapped (it shares this tensor's storage)."""
        data = self._layout()
        a, b = _dim(dim0, self.ndim), _dim(dim1, self.ndim)
        return self._shaped(data.swapaxes(a, b))

    def permute(self, *dims: Any) -> Tensor:
        """A view with the dimensions in the given order; anything but a permutation of them is a ``ShapeError``."""
        data = self._layout()
        order = tuple(_dim(d, self.ndim) for d in _shape_of(dims))
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(f"permute{tuple(dims)} is not a permutation of the {self.ndim} dimensions")
        return self._shaped(data.transpose(order))

    @property
    def T(self) -> Tensor:  # noqa: N802 - numpy's and torch's name
        """A view with every dimension reversed (the transpose of a matrix)."""
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self) -> Tensor:  # noqa: N802
        """A view with the last two dimensions swapped (a batch of transposed matrices)."""
        return self.transpose(-2, -1)

    def unsqueeze(self, dim: int) -> Tensor:
        """A view with a new dimension of size 1 inserted at ``dim`` (negative counts from the end)."""
        data = self._layout()
        d = _dim(dim, self.ndim + 1)
        return self._shaped(data.reshape((*self._shape[:d], 1, *self._shape[d:])))

    def squeeze(self, dim: int | None = None) -> Tensor:
        """Drop size-1 dimensions (all of them, or ``dim`` when it has size 1; otherwise unchanged)."""
        data = self._layout()
        if dim is None:
            shape = tuple(s for s in self._shape if s != 1)
        else:
            d = _dim(dim, self.ndim)
            shape = self._shape if self._shape[d] != 1 else self._shape[:d] + self._shape[d + 1 :]
        return self._shaped(data.reshape(shape))

    def expand(self, *sizes: Any) -> Tensor:
        """A read-only broadcast view; -1 keeps a dimension's size."""
        data = self._layout()
        target = list(_shape_of(sizes))
        offset = len(target) - self.ndim
        if offset < 0:
            raise ShapeError(f"expand{tuple(target)} has fewer dimensions than the tensor's shape {self._shape}")
        for i, s in enumerate(self._shape):
            if target[offset + i] == -1:
                target[offset + i] = s
            elif s != 1 and s != target[offset + i]:
                raise ShapeError(f"cannot expand shape {self._shape} to {tuple(target)}: dimension {i} has size {s}")
        xp = self._xp if self.has_storage else np
        return self._shaped(xp.broadcast_to(data, tuple(target)))

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

    def _out_of_range(self, index: Any, err: IndexError) -> IndexingError:
        return IndexingError(f"index {index!r} is out of range for a tensor of shape {self._shape}: {err}")

    def __getitem__(self, index: Any) -> Tensor:
        data = self._layout()
        idx, basic = self._index(index)
        try:
            out = data[idx]
        except IndexError as err:
            raise self._out_of_range(index, err) from err
        return self._shaped(out, shares=basic)

    def __setitem__(self, index: Any, value: Any) -> None:
        self._check_writable("index assignment")
        idx, _ = self._index(index)
        src = self._operand(value, "index assignment")
        try:
            with self._lineage:
                self._write_target()[idx] = src
        except IndexError as err:
            raise self._out_of_range(index, err) from err
        except ValueError as err:
            raise ShapeError(
                f"cannot assign a value of shape {np.shape(src)} to tensor{list(self._shape)}[{index!r}]: {err}"
            ) from err

    # -- arithmetic (the rules live in tensor_math) ----------------------------------------
    def _operand(self, other: Any, what: str) -> Any:
        """The array or Python number ``other`` contributes, on this tensor's device."""
        if isinstance(other, Tensor):
            if other._device != self._device:
                raise DeviceError(f"{what}: tensors on {self._device} and {other._device} cannot meet; move one first")
            return other._array()
        if isinstance(other, NUMBER):
            return other
        if isinstance(other, np.ndarray) and self._device == CPU:
            return other
        return self._backend.asarray(other, None, self._device.index or 0)

    def _binary(self, op: str, other: Any, reverse: bool = False) -> Tensor:
        a = self._array()
        if isinstance(other, np.ndarray) and self._device == CPU:
            other = self._wrap(other)
        if isinstance(other, Tensor):
            if other._device != self._device:
                raise DeviceError(f"{op}: tensors on {self._device} and {other._device} cannot meet; move one first")
            if reverse:
                return other._binary(op, self)
            out = tensor_math.binary(self._xp, op, a, self._dtype, other._array(), other._dtype)
        elif isinstance(other, NUMBER):
            out = tensor_math.binary(self._xp, op, a, self._dtype, other, None, reverse)
        else:
            return NotImplemented  # type: ignore[no-any-return]
        return self._wrap(out)

    # the operators: each hands its tensor_math op name to _binary
    __add__, __radd__ = _operator_pair("add")
    __sub__, __rsub__ = _operator_pair("subtract")
    __mul__, __rmul__ = _operator_pair("multiply")
    __truediv__, __rtruediv__ = _operator_pair("divide")
    __floordiv__, __rfloordiv__ = _operator_pair("floor_divide")
    __mod__, __rmod__ = _operator_pair("remainder")
    __pow__, __rpow__ = _operator_pair("pow")
    __and__, __rand__ = _operator_pair("bitwise_and")
    __or__, __ror__ = _operator_pair("bitwise_or")
    __xor__, __rxor__ = _operator_pair("bitwise_xor")
    __eq__ = _comparison("equal")
    __ne__ = _comparison("not_equal")
    __lt__ = _binary_operator("less")
    __le__ = _binary_operator("less_equal")
    __gt__ = _binary_operator("greater")
    __ge__ = _binary_operator("greater_equal")

    def __neg__(self) -> Tensor:
        if self._dtype is bool_:
            raise DTypeError("negation of a bool tensor is not defined: use ~t (logical not)")
        return self._unary("negative")

    def __pos__(self) -> Self:
        return self

    def __invert__(self) -> Tensor:
        if self._dtype is not bool_:
            raise DTypeError(f"~ is logical not and needs a bool tensor, this one is {self._dtype.name}")
        return self._unary("logical_not")

    def _unary(self, op: str) -> Tensor:
        return self._wrap(tensor_math.unary(self._xp, op, self._array(), self._dtype))

    abs = _elementwise("abs", "the absolute values")
    __abs__ = abs
    exp = _elementwise("exp", "e raised to each element")
    log = _elementwise("log", "the natural logarithm of each element")
    sqrt = _elementwise("sqrt", "the square root of each element")
    tanh = _elementwise("tanh", "the hyperbolic tangent of each element")

    def __matmul__(self, other: Any) -> Tensor:
        if not isinstance(other, Tensor):
            return NotImplemented
        return self.matmul(other)

    def __rmatmul__(self, other: Any) -> Tensor:
        if not isinstance(other, Tensor):
            return NotImplemented
        return other.matmul(self)

    def matmul(self, other: Tensor) -> Tensor:
        """The matrix product ``self @ other`` with numpy's broadcasting of batch dimensions; both on one device."""
        a, b = self._array(), other._array()
        if self._device != other._device:
            raise DeviceError(f"matmul: tensors on {self._device} and {other._device} cannot meet; move one first")
        return self._wrap(tensor_math.matmul(self._xp, a, self._dtype, b, other._dtype))

    # -- reductions ------------------------------------------------------------------------
    def _axes(self, dim: int | Sequence[int] | None) -> int | tuple[int, ...] | None:
        if dim is None:
            return None
        if isinstance(dim, int):
            return _dim(dim, self.ndim)
        return tuple(_dim(d, self.ndim) for d in dim)

    def sum(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Sum (half precision accumulates in float32; integers and bools sum to int64)."""
        out = tensor_math.reduce(self._xp, "sum", self._array(), self._dtype, self._axes(dim), keepdim)
        return self._wrap(out)

    def mean(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """The mean over all elements or over ``dim``; a non-float tensor is a ``DTypeError`` (call ``.float()``)."""
        if not self._dtype.is_floating_point:
            raise DTypeError(
                f"mean() needs a floating-point tensor, this one is {self._dtype.name}: call .float() first"
            )
        return self._wrap(tensor_math.reduce(self._xp, "mean", self._array(), self._dtype, self._axes(dim), keepdim))

    def _extreme(self, op: str, dim: int | None, keepdim: bool) -> Any:
        data = self._array()
        if self.numel() == 0:
            raise ShapeError(f"{op}() of an empty tensor (shape {self._shape}) has no value")
        xp = self._xp
        if dim is None:
            return self._wrap(getattr(xp, op)(data))
        axis = _dim(dim, self.ndim)
        arg = getattr(xp, "arg" + op)(data, axis=axis, keepdims=True)
        values = xp.take_along_axis(data, arg, axis=axis)
        if not keepdim:
            values, arg = values.squeeze(axis), arg.squeeze(axis)
        return MaxResult(self._wrap(values), self._wrap(arg.astype(np.int64)))

    def max(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """The largest element, or with ``dim`` the pair (values, indices) along it."""
        return self._extreme("max", dim, keepdim)

    def min(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """The smallest element, or with ``dim`` the pair (values, indices) along it; empty is a ``ShapeError``."""
        return self._extreme("min", dim, keepdim)

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        """The int64 index of the largest element (of the flattened tensor, or along ``dim``)."""
        data = self._array()
        if self.numel() == 0:
            raise ShapeError(f"argmax() of an empty tensor (shape {self._shape}) has no value")
        if dim is None:
            return self._wrap(self._xp.argmax(data.reshape(-1), axis=0).astype(np.int64))
        return self._wrap(self._xp.argmax(data, axis=_dim(dim, self.ndim), keepdims=keepdim).astype(np.int64))

    def any(self) -> Tensor:
        """A 0-d bool tensor: True when any element is nonzero."""
        return self._wrap(self._xp.any(self._array()))

    def all(self) -> Tensor:
        """A 0-d bool tensor: True when every element is nonzero."""
        return self._wrap(self._xp.all(self._array()))

    # -- in-place writes ---------------------------------------------------------------------
    def _inplace(self, op: str, label: str, other: Any, alpha: Any = None) -> Self:
        self._check_writable(label)
        src = self._operand(other, label)
        src_dtype = other._dtype if isinstance(other, Tensor) else None
        xp = self._xp
        src = tensor_math.inplace_source(xp, op, label, self._shape, self._dtype, src, src_dtype, alpha)
        with self._lineage:
            dst = self._write_target()
            getattr(xp, op)(dst, src, out=dst, casting="same_kind")
        return self

    def add_(self, other: Any, *, alpha: Any = None) -> Self:
        """Add ``other`` (times ``alpha``) in place and return ``self``; the result keeps this tensor's dtype."""
        return self._inplace("add", "add_", other, alpha)

    def sub_(self, other: Any, *, alpha: Any = None) -> Self:
        """Subtract ``other`` (times ``alpha``) in place and return ``self``; the result keeps this tensor's dtype."""
        return self._inplace("subtract", "sub_", other, alpha)

    def mul_(self, other: Any) -> Self:
        """Multiply by ``other`` in place and return ``self``; the result keeps this tensor's dtype."""
        return self._inplace("multiply", "mul_", other)

    def div_(self, other: Any) -> Self:
        """Divide by ``other`` in place (true division) and return ``self``; the result keeps this tensor's dtype."""
        return self._inplace("divide", "div_", other)

    def copy_(self, src: Any) -> Self:
        """Write ``src``'s values into this tensor: its dtype converts, its shape must broadcast
        to this one, and it may live on another device."""
        self._check_writable("copy_")
        if isinstance(src, Tensor):
            values = src._array()
            if src._device != self._device:
                values = self._backend.from_host(src._backend.to_host(values), self._device.index or 0)
        else:
            values = self._operand(src, "copy_")
        shape = tuple(np.shape(values))
        if shape != self._shape and not tensor_math.broadcasts_to(shape, self._shape):
            raise ShapeError(f"copy_ needs a source that broadcasts to {self._shape}, got shape {shape}")
        with self._lineage:
            self._xp.copyto(self._write_target(), values, casting="unsafe")
        return self

    def fill_(self, value: Any) -> Self:
        """Set every element to ``value`` (a no-op on a storage-free tensor: nothing to fill)."""
        if self.has_storage:
            self._check_writable("fill_")
            with self._lineage:
                self._write_target().fill(value)
        return self

    def zero_(self) -> Self:
        """Set every element to zero in place and return ``self`` (a no-op when storage-free)."""
        return self.fill_(0)

    def normal_(self, mean: builtins.float = 0.0, std: builtins.float = 1.0) -> Self:
        """Fill with normal samples (``manual_seed`` makes them reproducible); a no-op when storage-free."""
        return self._random_("normal", mean, std)

    def uniform_(self, a: builtins.float = 0.0, b: builtins.float = 1.0) -> Self:
        """Fill with samples from [a, b); a no-op when storage-free."""
        return self._random_("uniform", a, b)

    def _random_(self, kind: str, a: builtins.float, b: builtins.float) -> Self:
        if not self.has_storage:
            return self
        if not self._dtype.is_floating_point:
            raise DTypeError(f"{kind}_ needs a floating-point tensor, this one is {self._dtype.name}")
        self._check_writable(f"{kind}_")
        draws = self._backend.random(kind, self._shape, self._dtype.numpy, a, b, self._device.index or 0)
        with self._lineage:
            self._write_target()[...] = draws
        return self

    # -- repr ------------------------------------------------------------------------------
    def __repr__(self) -> str:
        extras = []
        free = not self.has_storage
        if free:
            body = "..."
            extras.append(f"size={self._shape}")
        else:
            host = self._backend.to_host(self._array())
            body = np.array2string(host, separator=", ", prefix="tensor(", threshold=1000)
        if self._device != CPU:
            extras.append(f"device='{self._device}'")
        if self._dtype not in _DEFAULT_SHOWN or (free and self._dtype is not float32):
            extras.append(f"dtype={self._dtype!r}")
        if free:
            extras.append("storage_free=True")
        return "tensor(" + ", ".join([body, *extras]) + ")"
