"""The CPU backend: numpy arrays, BLAS through numpy, thread count through threadpoolctl."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits  # type: ignore[import-untyped]

from packrt_kernels_cpu import fused
from packrt_kernels_cpu.backend import ArrayBackend


class CpuBackend(ArrayBackend):
    """numpy kernels for ``Device("cpu")``; always available."""

    name = "cpu"

    def __init__(self) -> None:
        super().__init__(np)

    def set_num_threads(self, n: int) -> None:
        """Cap the BLAS thread pool (the one GEMM and friends run on) and the fused kernels'
        numba pool at ``n`` threads."""
        threadpool_limits(limits=n, user_api="blas")
        fused.set_num_threads(n)

    def get_num_threads(self) -> int:
        """Threads the BLAS pool uses now (1 when numpy links no threaded BLAS)."""
        pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        return int(pools[0]["num_threads"]) if pools else 1
