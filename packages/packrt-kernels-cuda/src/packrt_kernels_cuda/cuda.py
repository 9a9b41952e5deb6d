"""The CUDA backend: cupy arrays when cupy imports and a device answers."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from packrt_kernels_cpu import ArrayBackend


def _import_cupy() -> tuple[ModuleType | None, str]:
    try:
        import cupy  # type: ignore[import-not-found]
    except ImportError as err:
        return None, f"cupy is not installed ({err}); install packrt[cuda]"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as err:  # cupy raises its own CUDARuntimeError without a driver
        return None, f"cupy is installed but no CUDA device answered ({err})"
    if count == 0:
        return None, "cupy is installed but reports 0 CUDA devices"
    return cupy, ""


class CudaBackend(ArrayBackend):
    """cupy kernels for ``Device("cuda:N")``; unavailable without cupy or a GPU."""

    name = "cuda"

    def __init__(self) -> None:
        cupy, reason = _import_cupy()
        self._reason = reason
        super().__init__(cupy if cupy is not None else np)
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

    def asarray(self, data: Any, dtype: np.dtype | None, index: int = 0) -> Any:
        with self._on(index):
            return self.xp.asarray(data, dtype=dtype)

    def empty(self, shape: Any, dtype: np.dtype, index: int = 0) -> Any:
        with self._on(index):
            return self.xp.empty(tuple(shape), dtype=dtype)

    def full(self, shape: Any, value: Any, dtype: np.dtype, index: int = 0) -> Any:
        with self._on(index):
            return self.xp.full(tuple(shape), value, dtype=dtype)

    def arange(self, start: Any, stop: Any, step: Any, dtype: np.dtype, index: int = 0) -> Any:
        with self._on(index):
            return self.xp.arange(start, stop, step, dtype=dtype)

    def to_host(self, a: Any) -> np.ndarray:
        return np.asarray(self.xp.asnumpy(a))

    def from_host(self, a: np.ndarray, index: int = 0) -> Any:
        with self._on(index):
            return self.xp.asarray(a)
