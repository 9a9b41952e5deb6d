"""Helpers the benchmark suites share: optional imports, seeded data, and the case bookkeeping.

Every benchmark records two things in ``benchmark.extra_info`` that ``report.py`` reads back:
``impl`` (``packrt``, a ``packrt-*`` variant, ``numpy`` or ``torch``) and ``case`` (the
pytest-benchmark group, so the implementations of one case sit side by side). A ratio is
always a packrt median over a reference median from the same run, never an absolute time.
"""

from __future__ import annotations

import importlib
import inspect
import os
import tracemalloc
from collections.abc import Callable
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

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
