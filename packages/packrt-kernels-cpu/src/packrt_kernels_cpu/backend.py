"""The device backend packrt-core talks to: allocation, host transfer, seeding, threads, availability.

A backend carries no arithmetic of its own. It names the array namespace of its device
(``xp``: numpy's here, three of its elementwise ops threaded for large float32 arrays, see
:mod:`packrt_kernels_cpu.cpu_namespace`; cupy in packrt-kernels-cuda), which Tensor arithmetic
calls directly, and
the :class:`~packrt_kernels_cpu.kernel_set.Kernels` its layers call. Everything device-specific
that is left (which GPU an array lands on, the random generator, the BLAS pool) lives here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from packrt_kernels_cpu.kernel_set import CPU_KERNELS, Kernels

Array = Any  # numpy.ndarray on the CPU, cupy.ndarray on CUDA

# numpy's random generator draws only float32/float64; narrower floats are drawn in
# float32 and rounded once, which is what a user initialising fp16/bf16 weights expects.
_DRAW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class ArrayBackend:
    """A backend over one array namespace. ``index`` arguments select a device ordinal and
    are ignored by single-device backends."""

    name: str = "array"

    def __init__(self, xp: ModuleType, kernels: Kernels = CPU_KERNELS) -> None:
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
        except ImportError:  # psutil comes with packrt-core, not with this package
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
