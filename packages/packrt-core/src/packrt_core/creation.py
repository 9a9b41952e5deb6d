"""Making tensors: from data, from numpy and DLPack, and the factory functions.

Factory functions honour :func:`packrt.meta_init`: inside it they declare storage-free
tensors. ``tensor`` and ``from_numpy`` take data you already hold, so they always keep it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt_core import dispatch
from packrt_core.device import CPU, Device, as_device
from packrt_core.dtypes import (
    ALL_DTYPES,
    as_dtype,
    bool_,
    dtype,
    float32,
    from_numpy_dtype,
    int64,
)
from packrt_core.errors import DeviceUnavailableError, DLPackError, DTypeError
from packrt_core.meta import declaring
from packrt_core.tensor import Tensor, host_array

_DLPACK_DEVICE_TYPES = {1: "cpu", 2: "cuda", 3: "cuda (pinned host memory)", 13: "cuda (managed memory)"}


def _device(device: Any) -> Device:
    return CPU if device is None else as_device(device)


def _materialize(data: np.ndarray, device: Device) -> Tensor:
    if device == CPU:
        return Tensor._make(data, CPU)
    backend = dispatch.backend_for(device)
    return Tensor._make(backend.from_host(data, device.index or 0), device)


def tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, numbers, numpy arrays, tensors).

    Without ``dtype``: Python floats give float32, ints int64, bools bool (as PyTorch);
    numpy arrays and tensors keep their dtype.
    """
    dev = _device(device)
    return _materialize(host_array(data, as_dtype(dtype) if dtype is not None else None), dev)


def from_numpy(array: np.ndarray) -> Tensor:
    """A CPU tensor sharing ``array``'s memory (zero-copy both ways)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(array).__name__}")
    from_numpy_dtype(array.dtype)
    return Tensor._make(array, CPU)


def from_dlpack(obj: Any) -> Tensor:
    """A tensor sharing the memory of any DLPack producer (a torch tensor, a numpy array...)."""
    if not hasattr(obj, "__dlpack__") or not hasattr(obj, "__dlpack_device__"):
        raise DLPackError(
            f"from_dlpack expects an object with __dlpack__ and __dlpack_device__, got {type(obj).__name__}"
        )
    dev_type, dev_index = obj.__dlpack_device__()
    name = _DLPACK_DEVICE_TYPES.get(int(dev_type), f"DLPack device type {int(dev_type)}")
    if int(dev_type) == 1:
        try:
            array = np.from_dlpack(obj)
        except (RuntimeError, BufferError, TypeError) as err:
            raise DLPackError(
                f"numpy {np.__version__} cannot import this DLPack tensor ({err}); if it is bfloat16, which numpy "
                "cannot take through DLPack, convert it on the producer's side first (for torch: t.float())"
            ) from err
        from_numpy_dtype(array.dtype)
        return Tensor._make(array, CPU)
    if int(dev_type) == 2:
        device = Device("cuda", int(dev_index))
        try:
            backend = dispatch.backend_for(device)
        except DeviceUnavailableError as err:
            raise DLPackError(f"the DLPack tensor lives on {device}, which packrt cannot reach: {err}") from err
        return Tensor._make(backend.xp.from_dlpack(obj), device)
    raise DLPackError(f"the DLPack tensor lives on {name} (index {dev_index}); packrt reaches only cpu and cuda")


def _factory(size: tuple[Any, ...], dtype_: dtype, device: Any, fill: Any) -> Tensor:
    return Tensor._allocate(size, dtype_, _device(device), fill)


def empty_like(t: Tensor, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of ``t``'s shape (and dtype and device unless given), values uninitialized;
    storage-free when ``t`` is or inside ``meta_init``."""
    return t.new_empty(t.shape, dtype=dtype, device=device)


def zeros_like(t: Tensor, *, dtype: Any = None, device: Any = None) -> Tensor:
    """Like :func:`empty_like`, filled with zeros."""
    return t.new_zeros(t.shape, dtype=dtype, device=device)


def ones_like(t: Tensor, *, dtype: Any = None, device: Any = None) -> Tensor:
    """Like :func:`empty_like`, filled with ones."""
    return t.new_ones(t.shape, dtype=dtype, device=device)


def full_like(t: Tensor, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """Like :func:`empty_like`, every element ``fill_value``."""
    return t.new_full(t.shape, fill_value, dtype=dtype, device=device)


def _dtype_or(dtype_: Any, default: dtype) -> dtype:
    return as_dtype(dtype_) if dtype_ is not None else default


def zeros(*size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of the given shape filled with zeros (float32 unless ``dtype``; storage-free inside ``meta_init``)."""
    return _factory(size, _dtype_or(dtype, float32), device, 0)


def ones(*size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of the given shape filled with ones (float32 unless ``dtype``; storage-free inside ``meta_init``)."""
    return _factory(size, _dtype_or(dtype, float32), device, 1)


def empty(*size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Uninitialized storage of the given shape (its values are whatever memory held)."""
    return _factory(size, _dtype_or(dtype, float32), device, None)


def full(size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """Every element ``fill_value``; without ``dtype`` a bool gives bool, an int int64, a float float32."""
    if dtype is None:
        dtype = bool_ if isinstance(fill_value, bool) else int64 if isinstance(fill_value, int) else float32
    return _factory((size,), as_dtype(dtype), device, fill_value)


def arange(start: Any, end: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None) -> Tensor:
    """``[start, end)`` in steps; ints give int64, any float gives float32 (without ``dtype``)."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange step must not be zero")
    if dtype is None:
        dtype = int64 if all(isinstance(v, int) for v in (start, end, step)) else float32
    dt = as_dtype(dtype)
    dev = _device(device)
    if declaring():
        n = max(0, int(np.ceil((end - start) / step)))
        return Tensor._make(None, dev, dt, shape=(n,))
    return Tensor._make(dispatch.backend_for(dev).arange(start, end, step, dt.numpy, dev.index or 0), dev, dt)


def _float_dtype(dtype_: Any, what: str) -> dtype:
    dt = _dtype_or(dtype_, float32)
    if not dt.is_floating_point:
        raise DTypeError(f"{what} draws floating-point samples; {dt.name} is not a floating-point dtype")
    return dt


def randn(*size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Standard normal samples; :func:`manual_seed` makes them reproducible."""
    return _factory(size, _float_dtype(dtype, "randn"), device, ("normal", 0.0, 1.0))


def rand(*size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Uniform samples from [0, 1); :func:`manual_seed` makes them reproducible."""
    return _factory(size, _float_dtype(dtype, "rand"), device, ("uniform", 0.0, 1.0))


__all__ = [
    "ALL_DTYPES",
    "arange",
    "empty",
    "empty_like",
    "from_dlpack",
    "from_numpy",
    "full",
    "full_like",
    "ones",
    "ones_like",
    "rand",
    "randn",
    "tensor",
    "zeros",
    "zeros_like",
]
