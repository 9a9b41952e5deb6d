"""conv2d's banded roads share out their work here: (image, band of output rows) tiles run on the
calling thread or, with more threads allowed, as contiguous runs of tiles on a small pool of
Python threads, each run single-threaded (its compiled kernels serial, its GEMMs on one MKL
thread): a band is too little work for a parallel region of its own to pay for waking a pool, and
two pools woken at once contend for the same cores. The tiles of one call are the same
computations whatever the thread count, so the bits are too.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from packrt_kernels_cpu import blas, threads

Tile = tuple[int, int, int]  # a banded road's unit of work: (image, first output row, one past the last)


def run_tiles(run: Any, images: int, rows: int, band: int) -> None:
    """``run(part)`` over every (image, band of output rows) tile: on the calling thread, or with more
    threads allowed as contiguous runs of tiles, one a thread (see :func:`_share_out`)."""
    tiles: list[Tile] = [(i, r0, min(rows, r0 + band)) for i in range(images) for r0 in range(0, rows, band)]
    shares = min(len(tiles), blas.num_threads())
    if shares == 1:
        run(tiles)
    else:
        bounds = [len(tiles) * s // shares for s in range(shares + 1)]
        _share_out(run, [tiles[bounds[s] : bounds[s + 1]] for s in range(shares)])


def even_band(rows: int, most: int) -> int:
    """A band height of at most ``most`` rows that splits ``rows`` into as few bands as ``most`` would,
    of near-equal height (64 rows at most 62: two bands of 32, not 62 and 2)."""
    band = max(1, min(rows, most))
    return -(-rows // -(-rows // band))


def _share_out(run: Any, parts: list[Any]) -> None:
    """``run(part)`` for every part at once: the first on the calling thread, the rest on the pool, each
    single-threaded (its numba kernels serial, its GEMMs on one MKL thread); the first error is raised."""

    def alone(part: Any) -> None:
        with threads.on_this_thread():
            run(part)

    pool = _pool(len(parts) - 1)
    pending = [pool.submit(alone, part) for part in parts[1:]]
    try:
        alone(parts[0])
    finally:
        for job in pending:
            job.result()


_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """The process's conv2d worker pool of ``workers`` threads (made once per size, then reused)."""
    with _pools_lock:
        if workers not in _pools:
            _pools[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="packrt-conv2d")
        return _pools[workers]
