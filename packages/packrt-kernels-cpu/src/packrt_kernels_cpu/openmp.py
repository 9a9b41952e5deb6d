"""The OpenMP runtime (libgomp) that numba's thread pool and MKL's threads share: how its idle workers
wait, and keeping the thread counts other libraries set.

libgomp reads its waiting policy from the environment once, when it loads, so the policy has to be in
``os.environ`` before numba's pool or MKL first starts; that is the one environment write packrt makes,
and only where the user chose nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

# GOMP_SPINCOUNT packrt sets: a waiting thread spins this many pauses (~0.1 ms on Zen 4), then sleeps. Long enough
# that a decode step's workers are still spinning when its next kernel starts; short enough that on a loaded
# machine a thread waiting for a descheduled partner burns little CPU (MiniLM int8 at 2 threads, load ~20:
# 1.2x its quiet CPU per call, 1.6x at 20000).
OPENMP_SPIN = "5000"


def prefer_short_openmp_spin() -> None:
    """Let idle OpenMP workers spin briefly before sleeping (``GOMP_SPINCOUNT=5000``), unless the user set
    ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``. libgomp's default long spin makes its workers compete with
    OpenBLAS's and the caller's on a small machine; sleeping at once makes each of a forward's many
    kernels wake its workers from sleep. docs/benchmarks.md has the measurements."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN


@contextlib.contextmanager
def thread_counts_kept() -> Iterator[None]:
    """Put every loaded OpenMP runtime's thread count for the calling thread back as it was before the
    block. numba starts its pool with ``omp_set_num_threads(NUMBA_NUM_THREADS)``, the core count by
    default, which overwrites the count torch (sharing libgomp) or ``OMP_NUM_THREADS=1`` had set. A
    runtime the block loaded itself takes ``OMP_NUM_THREADS`` where that is set (what it would have
    read), else stays as it is."""
    before = {lib.filepath: lib.num_threads for lib in ThreadpoolController().select(user_api="openmp").lib_controllers}
    try:
        yield
    finally:
        env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
        for lib in ThreadpoolController().select(user_api="openmp").lib_controllers:
            want = before.get(lib.filepath, int(env) if env.isdigit() and int(env) > 0 else None)
            if want is not None and lib.num_threads != want:
                lib.set_num_threads(want)


__all__ = ["OPENMP_SPIN", "prefer_short_openmp_spin", "thread_counts_kept"]
