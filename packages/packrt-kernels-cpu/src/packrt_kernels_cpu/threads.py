"""Keeping a thread's work on that thread: the one context manager for callers that spread work over
threads of their own (conv2d's images on a thread pool), where packrt's pools would only wake to contend.

Within :func:`on_this_thread`, on the calling thread only: every compiled kernel runs its serial twin
(no parallel region), the compiled GEMV leaves the row to the BLAS, and every MKL GEMM the thread
starts, from Python or from compiled code, runs on one MKL thread (``MKL_Set_Num_Threads_Local``).
Other threads keep the cap ``set_num_threads`` set.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

from packrt_kernels_cpu import mkl, settings

_local = threading.local()  # .serial: True inside on_this_thread


def serial() -> bool:
    """Whether the calling thread is inside :func:`on_this_thread`."""
    return getattr(_local, "serial", False)


@contextlib.contextmanager
def on_this_thread() -> Iterator[None]:
    """Run the block's kernels and GEMMs on the calling thread alone (see the module docstring)."""
    previous = serial()
    # MKL's road decided (and MKL loaded if it is the road) first; off its road MKL may still serve
    # conv2d's batches (mkl.batch_handle), and then its per-thread count must follow too.
    library = mkl.handle() or mkl.loaded_handle()
    before = None if library is None else library.set_local_threads(1)
    _local.serial = True
    try:
        yield
    finally:
        _local.serial = previous
        if library is not None:
            library.set_local_threads(before)


def pool_carries_products() -> None:
    """Say that a road whose products run on packrt's pool is in use (the panel tiles, the block dots):
    numpy's OpenBLAS is then kept to one thread, set once under each settings (a new thread cap, which
    gives OpenBLAS its count again, is followed by this again at the next such road). OpenBLAS's idle
    workers spin for up to 2^28 cycles after a threaded call, taking the cores packrt's pool needs: at 2
    threads a SmolLM2 decode ran 88-110 tokens/s with OpenBLAS on two threads, 124 with it on one, and a
    MiniLM forward no faster than on one thread. MKL, which shares the pool's OpenMP runtime, keeps its
    count."""
    now = settings.current()
    if _quieted and _quieted[0] is now:
        return
    _quieted[:] = [now]
    for library in ThreadpoolController().select(internal_api="openblas").lib_controllers:
        library.set_num_threads(1)


_quieted: list[settings.Settings] = []  # the settings under which OpenBLAS was last set to one thread


__all__ = ["on_this_thread", "pool_carries_products", "serial"]
