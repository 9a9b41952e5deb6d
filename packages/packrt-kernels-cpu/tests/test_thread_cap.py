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


_QUIET = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from threadpoolctl import threadpool_info
    from packrt_kernels_cpu import CpuBackend, block_tiles, blocks, float_tiles, pack_linear

    def openblas():  # numpy's own (scipy's, where numba loads it later, serves no packrt product)
        pools = threadpool_info()
        return sorted({p["num_threads"] for p in pools if p["internal_api"] == "openblas" and "numpy" in p["filepath"]})

    backend = CpuBackend()
    backend.set_num_threads(2)
    out = {"capped": openblas()}
    if sys.argv[1] == "blocks":  # a decode row on the q8 dots
        out["runs"] = block_tiles.available()
        packed = blocks.pack_block_linear(blocks.random_blocks(np.random.default_rng(0), "Q8_0", 64, 64), "Q8_0", 64)
        use = lambda: packed.forward(np.ones((1, 64), np.float32))
    else:  # a float32 linear packed as panels
        out["runs"] = float_tiles.available()
        use = lambda: pack_linear(np.ones((64, 64), np.float32))
    backend.set_num_threads(2)  # the cap given again: OpenBLAS back on 2 threads until the road is used
    out["recapped"] = openblas()
    use()
    out["used"] = openblas()
    out["reported"] = backend.get_num_threads()
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("road", ["blocks", "panels"])
def test_where_packrts_pool_carries_the_products_openblas_keeps_one_thread(road: str) -> None:
    """OpenBLAS's idle workers spin against packrt's pool: once a road whose products run on the pool is used
    (the q8 block dots, the panel tiles), numpy's OpenBLAS has one thread, and packrt still reports its cap."""
    _two_cores()
    out = _run(_QUIET, road)
    if not out["runs"]:
        pytest.skip(f"the {road} road does not run on this CPU")
    assert out["capped"] == out["recapped"] == [2], f"set_num_threads(2) did not reach OpenBLAS: {out}"
    assert out["used"] == [1], f"OpenBLAS kept {out['used']} threads beside packrt's pool on the {road} road"
    assert out["reported"] == 2
