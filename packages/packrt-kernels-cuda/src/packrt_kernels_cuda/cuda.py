"""The CUDA backend: cupy arrays and the CUDA ``Kernels`` when cupy imports and a device answers."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from packrt_base.backend import ArrayBackend
from packrt_kernels_cuda.kernels import CUDA_KERNELS

INSTALL_HINT = "pip install packrt[cuda] (CUDA 13 driver) or packrt-kernels-cuda[cuda12] (CUDA 12 driver)"


def _import_cupy() -> tuple[ModuleType | None, str]:
    """cupy and "" when a CUDA device answers; otherwise None and which of the two is missing."""
    try:
        import cupy  # type: ignore[import-not-found]
    except ModuleNotFoundError:
        return None, f"cupy is not installed: {INSTALL_HINT}"
    except Exception as err:  # a broken install (missing CUDA libraries) raises anything
        return (
            None,
            f"cupy is installed but does not import ({type(err).__name__}: {err}); reinstall it: {INSTALL_HINT}",
        )
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as err:  # cupy raises its own CUDARuntimeError without a driver
        return None, f"cupy imports but no CUDA device answered: {type(err).__name__}: {err}"
    if count == 0:
        return None, "cupy imports but no CUDA device answered: the driver reports 0 CUDA devices"
    return cupy, ""


class CudaBackend(ArrayBackend):
    """cupy arrays and :data:`~packrt_kernels_cuda.kernels.CUDA_KERNELS` for ``Device("cuda:N")``;
    unavailable (with the reason) without cupy or a GPU."""

    name = "cuda"

    def __init__(self) -> None:
        cupy, reason = _import_cupy()
        self._reason = reason
        super().__init__(cupy if cupy is not None else np, CUDA_KERNELS)
        self._available = cupy is not None

    def is_available(self) -> bool:
        return self._available

    def device_count(self) -> int:
        if not self._available:
            return 0
        return int(self.xp.cuda.runtime.getDeviceCount())

    def unavailable_reason(self) -> str:
        return self._reason

    def _on(self, index: int) -> Any:
        return self.xp.cuda.Device(index)

    def asarray(self, data: Any, dtype: np.dtype[Any] | None, index: int = 0) -> Any:
        with self._on(index):
            return self.xp.asarray(data, dtype=dtype)

    def empty(self, shape: Any, dtype: np.dtype[Any], index: int = 0) -> Any:
        with self._on(index):
            return self.xp.empty(tuple(shape), dtype=dtype)

    def full(self, shape: Any, value: Any, dtype: np.dtype[Any], index: int = 0) -> Any:
        with self._on(index):
            return self.xp.full(tuple(shape), value, dtype=dtype)

    def arange(self, start: Any, stop: Any, step: Any, dtype: np.dtype[Any], index: int = 0) -> Any:
        with self._on(index):
            return self.xp.arange(start, stop, step, dtype=dtype)

    def to_host(self, a: Any) -> np.ndarray:
        return np.asarray(self.xp.asnumpy(a))

    def from_host(self, a: np.ndarray, index: int = 0) -> Any:
        with self._on(index):
            return self.xp.asarray(a)

    def free_memory(self, index: int = 0) -> int:
        """Bytes a new pack can take on GPU ``index``: what the driver reports free
        (``cudaMemGetInfo``) plus what cupy's memory pool holds cached but unused."""
        if not self._available:
            return 0
        with self._on(index):
            free, _total = self.xp.cuda.runtime.memGetInfo()
            cached = int(self.xp.get_default_memory_pool().free_bytes())
        return int(free) + cached

    def synchronize(self, index: int = 0) -> None:
        """Wait for every kernel queued on GPU ``index``."""
        if self._available:
            with self._on(index):
                self.xp.cuda.Device(index).synchronize()
