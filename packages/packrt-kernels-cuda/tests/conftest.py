"""Fixtures of the CUDA tests: each GPU test skips, with the reason, where cupy or a GPU is missing."""

from __future__ import annotations

from types import ModuleType

import pytest

from packrt_kernels_cuda import CudaBackend


@pytest.fixture(scope="session")
def cuda_backend() -> CudaBackend:
    """The CUDA backend where it is available; otherwise the test skips saying which part is missing."""
    backend = CudaBackend()
    if not backend.is_available():
        pytest.skip(f"needs a CUDA GPU: {backend.unavailable_reason()}")
    return backend


@pytest.fixture(scope="session")
def cp(cuda_backend: CudaBackend) -> ModuleType:
    """cupy, on a machine where a GPU answers."""
    return cuda_backend.xp
