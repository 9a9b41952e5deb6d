"""Helpers the benchmark suites share: optional imports, seeded data, and the case bookkeeping.

Every benchmark records two things in ``benchmark.extra_info`` that ``report.py`` reads back:
``impl`` (``packrt``, a ``packrt-*`` variant, ``numpy`` or ``torch``) and ``case`` (the
pytest-benchmark group, so the implementations of one case sit side by side). A ratio is
always a packrt median over a reference median from the same run, never an absolute time.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import statistics
import time
import tracemalloc
from collections.abc import Callable
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import threadpoolctl  # type: ignore[import-untyped]

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES: dict[str, np.dtype[Any]] = {
    "fp32": np.dtype(np.float32),
    "fp16": np.dtype(np.float16),
    "bf16": BF16,
}
# Loose enough for a half-precision result computed in float32 and rounded once.
TOLERANCE = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 5e-2}


def require_torch() -> ModuleType:
    """torch, or a skip saying so; with PACKRT_REQUIRE_TORCH=1 a missing torch is a failure."""
    if os.environ.get("PACKRT_REQUIRE_TORCH") == "1":
        return importlib.import_module("torch")  # required: its ImportError fails the benchmark (torch==2.13.0)
    return pytest.importorskip("torch", reason="torch is not installed; the torch reference needs torch==2.13.0 (CPU)")


def require_nn(*names: str) -> ModuleType:
    """``packrt_core.nn``, or a skip naming what is missing (Module and the layers land separately)."""
    try:
        nn = importlib.import_module("packrt_core.nn")
    except ImportError as err:
        pytest.skip(f"packrt_core.nn is not importable yet ({err}); this benchmark lights up when it lands")
    missing = [n for n in names if not hasattr(nn, n)]
    if missing:
        pytest.skip(f"packrt_core.nn has no {', '.join(missing)} yet; this benchmark lights up when it lands")
    return nn


def require_keyword(func: Callable[..., Any], keyword: str, what: str) -> None:
    """Skip when ``func`` does not take ``keyword`` yet (an API still being written)."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return
    if keyword not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        pytest.skip(f"{what} does not take {keyword}= yet; this benchmark lights up when it does")


def rand(shape: tuple[int, ...], dtype: str = "fp32", seed: int = 0) -> np.ndarray:
    """Standard-normal data of ``shape`` in ``dtype`` (a DTYPES key), the same for every implementation."""
    gen = np.random.default_rng(seed)
    return gen.standard_normal(shape, dtype=np.float32).astype(DTYPES[dtype])


def to_torch(a: np.ndarray) -> Any:
    """A torch tensor equal to ``a``; bfloat16 goes through float32 (torch cannot read ml_dtypes)."""
    torch = require_torch()
    if a.dtype == BF16:
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def as_f32(result: Any) -> np.ndarray:
    """Any implementation's result (packrt Tensor, numpy array, torch tensor) as a float32 array."""
    if hasattr(result, "detach"):  # torch
        return np.asarray(result.detach().float().numpy(), dtype=np.float32)
    return np.asarray(result).astype(np.float32)


def check_close(result: Any, expected: Any, dtype: str, what: str) -> None:
    """Fail when an implementation's result drifts from the reference: a fast wrong answer is no answer."""
    got, want = as_f32(result), as_f32(expected)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != reference {want.shape}"
    scale = float(np.max(np.abs(want))) or 1.0
    err = float(np.max(np.abs(got - want))) / scale
    limit = TOLERANCE[dtype]
    assert err <= limit, f"{what}: max error {err:.3g} (relative to the largest |reference|) > {limit}"


def mark(benchmark: Any, impl: str, case: str, **extra: Any) -> None:
    """Record the implementation and case on a benchmark so report.py can pair it with its references."""
    benchmark.group = case
    benchmark.extra_info["impl"] = impl
    benchmark.extra_info["case"] = case
    benchmark.extra_info.update(extra)


def traced(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """(fn(), bytes still allocated after it, peak bytes during it), both relative to before the call.

    numpy reports its data buffers to tracemalloc, so these are the array bytes a call keeps
    (retained: what stays resident, the returned object included) and the most it held at once.
    """
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        result = fn()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return result, after - before, peak - before


# -- threads and the one-core check ---------------------------------------------------------------------
# A one-thread case may spend at most this much process CPU time per second of wall time. CPU time
# (time.process_time) counts every thread of the process, so one busy thread gives ~1.0 and two busy
# threads ~2.0 on an idle two-core machine, or ~1.5 when a neighbour takes half of the second core.
# 1.3 sits above what a single thread shows (1.00-1.05 measured: the interpreter's own short-lived
# helper threads, the BLAS/OpenMP pools waking once) and below a second busy thread even under
# contention, so it flags a leaked second thread without flaking on bookkeeping.
CORE_LIMIT = 1.3
# Below this much wall time the ratio is too coarse to judge (a few scheduler ticks either way).
CORE_CHECK_MIN_WALL_S = 0.05


def _packrt_core_or_none() -> ModuleType | None:
    try:
        return importlib.import_module("packrt_core")
    except ImportError:
        return None


def apply_thread_cap(n: int) -> None:
    """Cap every pool both sides use at ``n``: numpy's BLAS (and OpenMP), packrt's numba pool, torch's intra-op.

    Re-applied before each timed section, not once: numba's ``omp`` threading layer shares libgomp
    with torch, and a numba parallel launch resets torch's OpenMP thread count to the machine's
    (measured: ``torch.get_num_threads()`` 1 -> 2 after one packrt GELU), so a cap set once at
    the start of the session does not hold for torch.
    """
    threadpoolctl.threadpool_limits(limits=n)
    core = _packrt_core_or_none()
    if core is not None and hasattr(core, "set_num_threads"):
        core.set_num_threads(n)
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return
    torch.set_num_threads(n)


class CoreUse:
    """Process CPU time over wall time across ``with`` blocks (all threads of the process counted)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.wall = 0.0

    def __enter__(self) -> CoreUse:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu += time.process_time() - self._cpu0
        self.wall += time.perf_counter() - self._wall0

    @property
    def ratio(self) -> float:
        return self.cpu / self.wall if self.wall > 0 else 0.0

    def check(self, threads: int, what: str) -> None:
        """Fail a one-thread case whose process used more than one core while it was timed."""
        if threads == 1 and self.wall >= CORE_CHECK_MIN_WALL_S and self.ratio > CORE_LIMIT:
            pytest.fail(
                f"{what}: ran at --bench-threads=1 but used {self.ratio:.2f} cores (CPU {self.cpu:.3f} s over "
                f"wall {self.wall:.3f} s > {CORE_LIMIT}); some pool escaped the thread cap"
            )


# -- whole-model cases: interleaved timing ----------------------------------------------------------------
# Records in pytest-benchmark's JSON shape; conftest's pytest_benchmark_update_json appends them to the run.
MODEL_RECORDS: list[dict[str, Any]] = []


def race(
    calls: dict[str, Callable[[], Any]],
    threads: int,
    *,
    min_rounds: int = 3,
    max_rounds: int = 8,
    budget_s: float = 0.5,
    round_s: float = 0.02,
) -> dict[str, tuple[list[float], CoreUse]]:
    """Time each implementation in turn, round after round: impl -> (seconds per call of each round, core use).

    Interleaving puts every implementation's rounds in the same stretch of wall time, so a burst of
    other work on a shared machine slows both sides instead of one; the report then takes each
    side's fastest round. The cap is re-applied before every timed call (see apply_thread_cap).
    Short calls repeat within a round until the round lasts about ``round_s``.
    """
    repeats: dict[str, int] = {}
    for impl, fn in calls.items():
        apply_thread_cap(threads)
        start = time.perf_counter()
        fn()
        repeats[impl] = max(1, math.ceil(round_s / max(time.perf_counter() - start, 1e-9)))
    out: dict[str, tuple[list[float], CoreUse]] = {impl: ([], CoreUse()) for impl in calls}
    began = time.perf_counter()
    order = list(calls)
    for rounds in range(1, max_rounds + 1):
        for impl in order:
            fn, n = calls[impl], repeats[impl]
            times, use = out[impl]
            apply_thread_cap(threads)
            with use:
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                times.append((time.perf_counter() - start) / n)
        order.reverse()  # neither side always runs right after the other
        if rounds >= min_rounds and time.perf_counter() - began >= budget_s:
            break
    return out


def record_model_case(
    name: str, case: str, impl: str, times: list[float], use: CoreUse, threads: int, **extra: Any
) -> None:
    """Store one implementation's rounds as a pytest-benchmark entry (report.py reads it like any other)."""
    ordered = sorted(times)
    MODEL_RECORDS.append(
        {
            "group": case,
            "name": f"{name}[{impl}]",
            "fullname": f"benchmarks/test_models.py::{name}[{impl}]",
            "params": None,
            "extra_info": {
                "impl": impl,
                "case": case,
                "threads": threads,
                "cpu_per_wall": round(use.ratio, 3),
                **extra,
            },
            "stats": {
                "min": ordered[0],
                "max": ordered[-1],
                "mean": statistics.fmean(ordered),
                "median": statistics.median(ordered),
                "stddev": statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
                "rounds": len(ordered),
                "iterations": 1,
            },
        }
    )
