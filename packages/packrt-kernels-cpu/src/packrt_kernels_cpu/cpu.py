"""The CPU backend: numpy arrays, GEMMs through ``blas`` (MKL or numpy's OpenBLAS), thread counts capped together."""

from __future__ import annotations

from threadpoolctl import threadpool_info, threadpool_limits  # type: ignore[import-untyped]

from packrt_base.backend import ArrayBackend
from packrt_kernels_cpu import blas, cpu_namespace, settings
from packrt_kernels_cpu.kernel_set import CPU_KERNELS


class CpuBackend(ArrayBackend):
    """numpy kernels for ``Device("cpu")``; always available. Its namespace is numpy's with large float32
    add, subtract and multiply on the pool (:mod:`packrt_kernels_cpu.cpu_namespace`)."""

    name = "cpu"

    def __init__(self) -> None:
        super().__init__(cpu_namespace, CPU_KERNELS)

    def set_num_threads(self, n: int) -> None:
        """Cap the BLAS thread pools (numpy's OpenBLAS, and MKL whether loaded yet or not) and the
        fused kernels' numba pool at ``n`` threads. Once a road whose products run on that pool is used
        (the panel tiles, the quantized-block dots), numpy's OpenBLAS is kept to one thread again
        (:func:`.threads.pool_carries_products`): the pool does the parallel work."""
        threadpool_limits(limits=n, user_api="blas")
        settings.update(threads=max(1, int(n)))  # MKL's and numba's pools follow (mkl, compiled)

    def get_num_threads(self) -> int:
        """The cap :meth:`set_num_threads` set; before any, the threads the BLAS pool GEMMs run on uses
        now (1 when no threaded BLAS is linked)."""
        cap = settings.current().threads
        if cap is not None:
            return cap
        pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        pools.sort(key=lambda p: p.get("internal_api") != blas.provider())  # the road's own pool first
        return int(pools[0]["num_threads"]) if pools else 1
