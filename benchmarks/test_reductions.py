"""Reductions over a (1024, 1024) tensor: sum and max along the last dim, mean over everything.

Reductions are memory-bound, so a ratio near 1 against numpy means packrt adds no copy
(bfloat16 sums accumulate in float32 in every implementation measured here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from bench_support import check_close, mark, rand, require_torch, to_torch

import packrt_core as prt

SHAPE = (1024, 1024)


def _tensor_op(op: str) -> Callable[[Any], Any]:
    """The reduction on a packrt or torch tensor (both spell it the same way)."""
    return {
        "sum": lambda t: t.sum(dim=-1),
        "mean": lambda t: t.mean(),
        "max": lambda t: t.max(dim=-1).values,
    }[op]


def _numpy(op: str) -> Callable[[np.ndarray], Any]:
    return {
        "sum": lambda a: a.sum(axis=-1, dtype=np.float32).astype(a.dtype),
        "mean": lambda a: a.mean(dtype=np.float32).astype(a.dtype),
        "max": lambda a: a.max(axis=-1),
    }[op]


CASES = [("sum", "fp32"), ("mean", "fp32"), ("max", "fp32"), ("sum", "bf16")]


@pytest.mark.parametrize("impl", ["packrt", "numpy", "torch"])
@pytest.mark.parametrize(("op", "dtype"), CASES, ids=[f"{o}-{d}" for o, d in CASES])
def test_reduction(benchmark: Any, op: str, dtype: str, impl: str) -> None:
    a = rand(SHAPE, dtype, seed=5)
    expected = _numpy(op)(a)
    if impl == "packrt":
        x: Any = prt.from_numpy(a)
        fn = _tensor_op(op)
    elif impl == "torch":
        require_torch()
        x, fn = to_torch(a), _tensor_op(op)
    else:
        x, fn = a, _numpy(op)
    check_close(fn(x), expected, dtype, f"{impl} {op} {dtype}")
    mark(benchmark, impl, f"reduce-{op}-{dtype}-1024x1024")
    benchmark(fn, x)
