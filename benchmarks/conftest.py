"""Session set-up for the benchmark suites: the machine facts every ratio depends on.

The BLAS that actually runs decides most of the matmul ratios, so it is recorded twice: in
the JSON's ``machine_info`` (``threadpool_info`` in full, thread counts, the OPENBLAS_*
overrides seen) and, briefly, in each benchmark's ``extra_info["blas"]``. ``nox -s
benchmarks`` unsets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for its own run: they pin an
older kernel on this machine and would make numpy (and packrt, which runs on numpy) look slow.
"""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import threadpoolctl  # type: ignore[import-untyped]
from bench_support import MODEL_RECORDS, CoreUse, apply_thread_cap

OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


@functools.cache
def blas_summary() -> str:
    """One line naming each BLAS numpy loaded: library, version, kernel (architecture), threading layer."""
    parts = []
    for pool in threadpoolctl.threadpool_info():
        if pool.get("user_api") != "blas":
            continue
        arch = pool.get("architecture", "?")
        parts.append(f"{pool['internal_api']} {pool.get('version')} {arch} ({pool.get('threading_layer')})")
    return "; ".join(parts) or "no BLAS found"


def _packrt_gemm_road() -> str:
    """The road packrt's GEMMs take in this run: "mkl" (packrt-kernels-cpu[mkl]) or "numpy" (OpenBLAS)."""
    try:
        from packrt_kernels_cpu import blas
    except ImportError:
        return "packrt not installed"
    return blas.provider()


def _torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_facts() -> dict[str, Any]:
    torch = _torch_or_none()
    if torch is None:
        return {"torch": None}
    return {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    np.ones((2, 2)) @ np.ones((2, 2))  # make sure the BLAS is loaded before it is described
    machine_info["packrt_gemm"] = _packrt_gemm_road()  # loads MKL when packrt takes that road
    machine_info["cpu_count"] = os.cpu_count()
    machine_info["platform"] = platform.platform()
    machine_info["numpy"] = np.__version__
    machine_info["blas"] = blas_summary()
    machine_info["bench_threads"] = config.getoption("--bench-threads") or os.cpu_count()
    machine_info["threadpool_info"] = threadpoolctl.threadpool_info()
    machine_info["openblas_overrides"] = {k: os.environ[k] for k in OPENBLAS_OVERRIDES if k in os.environ}
    machine_info.update(_torch_facts())


def pytest_report_header(config: pytest.Config) -> list[str]:
    set_vars = [f"{k}={os.environ[k]}" for k in OPENBLAS_OVERRIDES if k in os.environ]
    lines = [f"packrt GEMM road: {_packrt_gemm_road()}; blas: {blas_summary()}"]
    if set_vars:
        lines.append(
            f"warning: {' '.join(set_vars)} pins an older OpenBLAS kernel; numpy ratios are pessimistic "
            f"(nox -s benchmarks unsets them for its run)"
        )
    return lines


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--bench-threads",
        type=int,
        default=None,
        help="cap numpy's BLAS pool and torch's intra-op threads at N for the whole run (default: "
        "leave both at their own default, one per core); 1 gives steadier ratios on a busy machine",
    )
    parser.addoption(
        "--ab-gate",
        action="store_true",
        help="also run the A/B gate's end-to-end tests (test_ab.py, marked ab_gate: about a minute each; "
        "nox -s benchmarks_ab_gate runs them)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the ``ab_gate`` tests unless ``--ab-gate``: each runs the whole A/B twice over, minutes on two cores."""
    if config.getoption("--ab-gate"):
        return
    skip = pytest.mark.skip(reason="the A/B gate's end-to-end test runs with --ab-gate (nox -s benchmarks_ab_gate)")
    for item in items:
        if "ab_gate" in item.keywords:
            item.add_marker(skip)


def bench_threads(config: pytest.Config) -> int:
    """The --bench-threads cap, or the core count when none was given."""
    return int(config.getoption("--bench-threads") or os.cpu_count() or 1)


@pytest.fixture(scope="session", autouse=True)
def _thread_cap(request: pytest.FixtureRequest) -> Iterator[None]:
    """Apply --bench-threads to both sides alike, so a ratio never compares 1 thread with 2."""
    n = request.config.getoption("--bench-threads")
    if n is None:
        yield
        return
    if n < 1:
        raise pytest.UsageError(f"--bench-threads must be >= 1, got {n}")
    torch = _torch_or_none()
    old = torch.get_num_threads() if torch else None
    apply_thread_cap(n)
    with threadpoolctl.threadpool_limits(limits=n):
        yield
    if torch and old:
        torch.set_num_threads(old)


@pytest.fixture(autouse=True)
def _reapply_thread_cap(request: pytest.FixtureRequest) -> None:
    """Set the cap again before every case: a numba parallel kernel resets torch's OpenMP threads (bench_support)."""
    if request.config.getoption("--bench-threads") is not None:
        apply_thread_cap(request.config.getoption("--bench-threads"))


@functools.cache
def _core_checked_class() -> type:
    """pytest-benchmark's fixture class, with the process's CPU/wall ratio measured around the timed calls.

    The ratio lands in ``extra_info["cpu_per_wall"]``; at one thread a ratio above
    ``bench_support.CORE_LIMIT`` fails the case (a pool escaped the cap). pytest-benchmark's own
    calibration runs on the calling thread, so it only pulls the ratio towards 1. A subclass, not
    a wrapper: the plugin refuses a ``benchmark`` that is not its own fixture type.
    """
    from pytest_benchmark.fixture import BenchmarkFixture

    class CoreCheckedBenchmark(BenchmarkFixture):  # type: ignore[misc]
        core_threads = 1

        def _checked(self, run: Callable[[], Any]) -> Any:
            with CoreUse() as use:
                result = run()
            self.extra_info["cpu_per_wall"] = round(use.ratio, 3)
            use.check(self.core_threads, str(self.extra_info.get("case") or self.name))
            return result

        def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            return self._checked(lambda: super(CoreCheckedBenchmark, self).__call__(fn, *args, **kwargs))

        def pedantic(self, *args: Any, **kwargs: Any) -> Any:
            return self._checked(lambda: super(CoreCheckedBenchmark, self).pedantic(*args, **kwargs))

    return CoreCheckedBenchmark


@pytest.fixture
def benchmark(benchmark: Any, request: pytest.FixtureRequest) -> Any:
    """The plugin's ``benchmark`` fixture with the one-core check (same name, so every suite gets it)."""
    benchmark.__class__ = _core_checked_class()
    benchmark.core_threads = bench_threads(request.config)
    return benchmark


@pytest.hookimpl(optionalhook=True)  # pytest-benchmark's hook; the plugin may be absent (test_report)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list[Any], output_json: dict[str, Any]) -> None:
    """Add the whole-model cases, timed interleaved by bench_support.race, to the run's JSON."""
    output_json["benchmarks"].extend(MODEL_RECORDS)


@pytest.fixture(autouse=True)
def _record_blas(request: pytest.FixtureRequest) -> None:
    """Stamp the BLAS line on every benchmark that ran, so a single JSON entry is self-describing."""
    if "benchmark" in request.fixturenames:
        extra = request.getfixturevalue("benchmark").extra_info
        extra["blas"] = blas_summary()
        extra["threads"] = bench_threads(request.config)
