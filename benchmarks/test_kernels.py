"""Kernel-grain cases (kernel_cases.py): each compiled kernel a model's forward runs, timed on its own.

Each case checks packrt's result against a float64 numpy reference, then times it, and torch's
equivalent call where torch has one (the ratio column of the report). The same calls are what the
same-run A/B (``ab.py``, ``nox -s benchmarks -- --against REV``) times at two revisions.
"""

from __future__ import annotations

from typing import Any

import kernel_cases
import pytest
from bench_support import mark, require_torch

# a case made for two threads is the A/B's: this run sets every case's threads at once (--bench-threads);
# the whole-model cases are the A/B's too (test_models.py times whole models against torch)
ONE_THREAD = [c for c in kernel_cases.CASES if c.threads == 1 and not c.model]


@pytest.mark.parametrize("case", ONE_THREAD, ids=lambda c: c.name)
def test_kernel_packrt(benchmark: Any, case: kernel_cases.KernelCase) -> None:
    built = case.build()
    problem = kernel_cases.check(case, built)
    assert problem is None, problem
    mark(benchmark, "packrt", case.name, kernel=case.kernel)
    benchmark(built.run)


@pytest.mark.needs_torch
@pytest.mark.parametrize("case", [c for c in ONE_THREAD if c.name != "kernel-plan-attention"], ids=lambda c: c.name)
def test_kernel_torch(benchmark: Any, case: kernel_cases.KernelCase) -> None:
    built = case.build()
    if built.torch_run is None:
        pytest.skip(f"{case.name}: torch has no single call for this fused step (the packrt side is timed alone)")
    torch = require_torch()
    run = built.torch_run(torch)
    got = run()
    want = built.reference()
    scale = float(abs(want).max()) or 1.0
    err = float(abs(got.detach().double().numpy() - want).max()) / scale
    assert err <= max(built.tolerance, 1e-2 if "bf16" in case.name else 1e-4), f"torch {case.name}: error {err:.3g}"
    mark(benchmark, "torch", case.name, kernel=case.kernel)
    benchmark(run)
