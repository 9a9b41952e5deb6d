"""The process-wide knobs: the random seed every backend draws from, and the CPU thread cap."""

from __future__ import annotations

from packrt_core import dispatch
from packrt_core.device import CPU


def manual_seed(seed: int) -> None:
    """Seed every backend's generator: the same seed gives the same draws."""
    dispatch.get_backend("cpu")
    for backend in dispatch.loaded_backends():
        backend.manual_seed(int(seed))


def set_num_threads(n: int) -> None:
    """Cap the threads CPU kernels use: the BLAS pool and the fused kernels' pool alike."""
    if int(n) < 1:
        raise ValueError(f"set_num_threads needs at least 1 thread, got {n}")
    dispatch.backend_for(CPU).set_num_threads(int(n))


def get_num_threads() -> int:
    """Threads the CPU kernels' BLAS pool uses now."""
    return int(dispatch.backend_for(CPU).get_num_threads())


__all__ = ["get_num_threads", "manual_seed", "set_num_threads"]
