"""The device backend packrt-core talks to: the Protocol every backend meets, and its array-namespace base.

A backend carries no arithmetic of its own. It names the array namespace of its device (``xp``:
numpy's on the CPU, cupy on CUDA), which Tensor arithmetic calls directly, and the
:class:`~packrt_base.kernels.Kernels` its layers call. Everything device-specific that is left
(which GPU an array lands on, the random generator, the thread pools, free memory) lives on the
backend. :class:`ArrayBackend` serves all of it from one namespace; packrt-kernels-cpu's
``CpuBackend`` and packrt-kernels-cuda's ``CudaBackend`` start from it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from packrt_base.kernels import Kernels

Array = Any  # numpy.ndarray on the CPU, cupy.ndarray on CUDA

# numpy's random generator draws only float32/float64; narrower floats are drawn in
# float32 and rounded once, which is what a user initialising fp16/bf16 weights expects.
_DRAW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@runtime_checkable
class DeviceBackend(Protocol):
    """What packrt-core needs from a device: its namespace and kernels, allocation, host
    transfer, seeding, threads, availability and free memory (what ``auto`` residency compares
    a pack with). ``index`` selects a device ordinal."""

    name: str
    xp: ModuleType
    kernels: Kernels

    def is_available(self) -> bool:
        """Whether this backend can serve tensors here."""
        ...

    def unavailable_reason(self) -> str:
        """Why the backend is unavailable, for error messages ('' when it is available)."""
        ...

    def device_count(self) -> int:
        """How many devices of this type answer."""
        ...

    def free_memory(self, index: int = 0) -> int:
        """Bytes a new pack can take on device ``index``."""
        ...

    def asarray(self, data: Any, dtype: np.dtype[Any] | None, index: int = 0) -> Any:
        """``data`` as an array on device ``index``, converted to ``dtype`` when given."""
        ...

    def empty(self, shape: Sequence[int], dtype: np.dtype[Any], index: int = 0) -> Any:
        """An uninitialized array of ``shape`` and ``dtype`` on device ``index``."""
        ...

    def full(self, shape: Sequence[int], value: Any, dtype: np.dtype[Any], index: int = 0) -> Any:
        """An array of ``shape`` and ``dtype`` on device ``index`` with every element ``value``."""
        ...

    def arange(self, start: Any, stop: Any, step: Any, dtype: np.dtype[Any], index: int = 0) -> Any:
        """Evenly spaced values in [start, stop) by ``step``, as ``dtype``, on device ``index``."""
        ...

    def to_host(self, a: Any) -> np.ndarray:
        """The array as a numpy array in host memory."""
        ...

    def from_host(self, a: np.ndarray, index: int = 0) -> Any:
        """A numpy array placed on device ``index``."""
        ...

    def manual_seed(self, seed: int) -> None:
        """Seed the generator ``random`` draws from, so later samples repeat."""
        ...

    def random(self, kind: str, shape: Sequence[int], dtype: np.dtype[Any], a: float, b: float, index: int = 0) -> Any:
        """Samples of ``kind`` ("normal": mean a, std b; "uniform": [a, b)) on device ``index``."""
        ...

    def set_num_threads(self, n: int) -> None:
        """Cap the thread pools this backend computes with at ``n``."""
        ...

    def get_num_threads(self) -> int:
        """The thread count this backend computes with."""
        ...


class ArrayBackend:
    """A backend over one array namespace and its kernels (a :class:`DeviceBackend`). ``index``
    arguments select a device ordinal and are ignored by single-device backends."""

    name: str = "array"

    def __init__(self, xp: ModuleType, kernels: Kernels) -> None:
        self.xp = xp
        self.kernels = kernels
        self._generator = np.random.default_rng()

    # -- availability --------------------------------------------------------------
    def is_available(self) -> bool:
        """Whether this backend can serve tensors here (the CPU always can)."""
        return True

    def device_count(self) -> int:
        """How many devices of this type answer (1 for the CPU)."""
        return 1

    def unavailable_reason(self) -> str:
        """Why the backend is unavailable, for error messages ('' when it is available)."""
        return ""

    def free_memory(self, index: int = 0) -> int:
        """Bytes a new pack can take on this device: host memory available (psutil's reading, or
        the kernel's free pages where psutil is not installed). GPU backends read their device."""
        try:
            import psutil
        except ImportError:  # psutil comes with packrt-core, not with packrt-base
            try:
                return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
            except (AttributeError, ValueError, OSError):
                return 0
        return int(psutil.virtual_memory().available)

    # -- allocation and transfer ---------------------------------------------------
    def asarray(self, data: Any, dtype: np.dtype[Any] | None, index: int = 0) -> Array:
        """``data`` as an array of this namespace on device ``index``, converted to ``dtype`` when given."""
        return self.xp.asarray(data, dtype=dtype)

    def empty(self, shape: Sequence[int], dtype: np.dtype[Any], index: int = 0) -> Array:
        """An uninitialized array of ``shape`` and ``dtype`` on device ``index``."""
        return self.xp.empty(tuple(shape), dtype=dtype)

    def full(self, shape: Sequence[int], value: Any, dtype: np.dtype[Any], index: int = 0) -> Array:
        """An array of ``shape`` and ``dtype`` on device ``index`` with every element ``value``."""
        return self.xp.full(tuple(shape), value, dtype=dtype)

    def arange(self, start: Any, stop: Any, step: Any, dtype: np.dtype[Any], index: int = 0) -> Array:
        """Evenly spaced values in [start, stop) by ``step``, as ``dtype``, on device ``index``."""
        return self.xp.arange(start, stop, step, dtype=dtype)

    def to_host(self, a: Array) -> np.ndarray:
        """The array as a numpy array in host memory (the array itself on the CPU: no copy)."""
        return np.asarray(a)

    def from_host(self, a: np.ndarray, index: int = 0) -> Array:
        """A numpy array placed on device ``index`` (the array itself on the CPU: no copy)."""
        return self.xp.asarray(a)

    # -- random --------------------------------------------------------------------
    def manual_seed(self, seed: int) -> None:
        """Seed the generator ``random`` draws from, so later samples repeat."""
        self._generator = np.random.default_rng(seed)

    def random(
        self, kind: str, shape: Sequence[int], dtype: np.dtype[Any], a: float, b: float, index: int = 0
    ) -> Array:
        """Samples of ``kind`` ("normal": mean a, std b; "uniform": [a, b)), drawn on the host."""
        draw = dtype if dtype in _DRAW_DTYPES else np.dtype(np.float32)
        if kind == "normal":
            out = self._generator.standard_normal(tuple(shape), dtype=draw)
            out *= b
            out += a
        else:
            out = self._generator.random(tuple(shape), dtype=draw)
            out *= b - a
            out += a
        return self.from_host(out.astype(dtype, copy=False), index)

    # -- threads -------------------------------------------------------------------
    def set_num_threads(self, n: int) -> None:
        """Single-pool namespaces have nothing to cap."""

    def get_num_threads(self) -> int:
        """The thread count this backend computes with (one pool: always 1)."""
        return 1


__all__ = ["ArrayBackend", "DeviceBackend"]
