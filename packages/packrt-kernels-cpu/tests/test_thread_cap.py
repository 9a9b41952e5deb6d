"""``CpuBackend.set_num_threads(n)`` (what ``packrt.set_num_threads`` calls) bounds every pool packrt starts.

Each case runs in a fresh interpreter (numba's pool starts once per process, and its thread count is
kept per calling thread), does pooled kernel work, and reads every thread's CPU time from the OS
(psutil) before and after. A pool thread doing a share of the work accrues CPU time whatever else
the machine runs (a descheduled worker does its share later; CPU time, unlike wall time, does not
count the wait), so the test compares threads' CPU times with each other, never with a clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

psutil = pytest.importorskip("psutil", reason="psutil counts per-thread CPU time (the test extra installs it)")

_WORK = textwrap.dedent(
    """
    import json, sys, threading, time
    import numpy as np, psutil
    mixed = len(sys.argv) > 3  # scipy imported first (its own OpenBLAS), and BLAS products in the work
    if mixed:
        import scipy.linalg.blas as scipy_blas
    from packrt_kernels_cpu import CpuBackend, fused

    cap, where = int(sys.argv[1]), sys.argv[2]
    CpuBackend().set_num_threads(cap)
    x = np.random.default_rng(0).standard_normal(1 << 22, dtype=np.float32)  # far past the pool's threshold
    a = np.random.default_rng(1).standard_normal((384, 384), dtype=np.float32)
    proc = psutil.Process()
    out = {}

    def step():
        fused.gelu(x, "none")
        if mixed:  # products both OpenBLAS builds thread (numpy's and scipy's), each past its threshold
            a @ a
            scipy_blas.sgemm(1.0, a, a)

    def cpu_by_thread():
        return {t.id: t.user_time + t.system_time for t in proc.threads()}

    def work():
        step()
        before = cpu_by_thread()
        start = time.thread_time()
        while time.thread_time() - start < 0.4:  # 0.4 s of this thread's CPU, however loaded the machine
            step()
        after = cpu_by_thread()
        out["spent"] = sorted((after[t] - before.get(t, 0.0) for t in after), reverse=True)

    fused.gelu(x, "none")  # numba loads (and compiles or reads the cache) on the main thread, as a server's would
    if where == "main":
        work()
    else:
        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
    print(json.dumps(out))
    """
)


def _run(script: str, *args: str, env: dict[str, str] | None = None) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PACKRT_NUMBA": "1", **(env or {})},
        check=False,
    )
    assert done.returncode == 0, f"the child process failed:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def _two_cores() -> None:
    if (os.cpu_count() or 1) < 2 or os.environ.get("NUMBA_NUM_THREADS") == "1":
        pytest.skip("needs numba's pool to hold two threads or more (two cores, NUMBA_NUM_THREADS unset)")


@pytest.mark.parametrize("where", ["main", "new-thread"])
def test_one_thread_cap_keeps_pooled_kernels_on_one_thread(where: str) -> None:
    """At a cap of 1 only the calling thread does kernel work, on the thread that set the cap and on any
    other (numba keeps its count per thread: a thread that never set it used the whole pool)."""
    _two_cores()
    spent = _run(_WORK, "1", where)["spent"]
    busiest, second = spent[0], spent[1] if len(spent) > 1 else 0.0
    assert busiest >= 0.3, f"the working thread accrued only {busiest:.2f} s CPU; the measurement is void"
    assert second <= 0.1 * busiest, (
        f"set_num_threads(1), work on the {where} thread: a second thread accrued {second:.2f} s CPU against the "
        f"worker's {busiest:.2f} s (threads' CPU seconds, busiest first: {spent[:4]}); a pool escaped the cap"
    )


def test_one_thread_cap_holds_with_scipy_imported_first_and_blas_products_in_the_work() -> None:
    """scipy brings an OpenBLAS of its own, loaded before packrt and started with a thread per core: at a cap
    of 1 neither it nor numpy's OpenBLAS nor numba's pool puts a second thread to work."""
    _two_cores()
    pytest.importorskip("scipy", reason="scipy is what loads the second OpenBLAS")
    spent = _run(_WORK, "1", "main", "scipy")["spent"]
    busiest, second = spent[0], spent[1] if len(spent) > 1 else 0.0
    assert busiest >= 0.3, f"the working thread accrued only {busiest:.2f} s CPU; the measurement is void"
    assert second <= 0.1 * busiest, (
        f"set_num_threads(1) with scipy imported: a second thread accrued {second:.2f} s CPU against the worker's "
        f"{busiest:.2f} s (busiest first: {spent[:4]}); a BLAS pool escaped the cap"
    )


def test_two_thread_cap_spreads_pooled_kernels_over_two_threads() -> None:
    """The measurement above can fail: at a cap of 2 a second pool thread takes a real share of the work."""
    _two_cores()
    spent = _run(_WORK, "2", "new-thread")["spent"]
    assert spent[1] >= 0.25 * spent[0], (
        f"set_num_threads(2): the second-busiest thread accrued {spent[1]:.2f} s CPU against {spent[0]:.2f} s "
        f"(busiest first: {spent[:4]}); the pool did not spread the work"
    )


_OPENMP = textwrap.dedent(
    """
    import json
    import numpy as np
    from threadpoolctl import threadpool_info
    from packrt_kernels_cpu import fused

    fused.gelu(np.ones(1 << 20, np.float32), "none")  # loads numba and starts its OpenMP pool
    print(json.dumps([p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"]))
    """
)


def test_starting_numbas_pool_keeps_omp_num_threads() -> None:
    """numba starts its pool with omp_set_num_threads(cores); the OpenMP count OMP_NUM_THREADS set stays."""
    _two_cores()
    counts = _run(_OPENMP, env={"OMP_NUM_THREADS": "1"})
    assert counts, "no OpenMP runtime was loaded after a pooled kernel ran; the check is void"
    assert all(n == 1 for n in counts), f"OMP_NUM_THREADS=1, but after numba's pool started OpenMP reports {counts}"
