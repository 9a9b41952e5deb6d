"""Elementwise add and mul with broadcasting: a packrt Tensor op against numpy and torch on the same data.

The case is a (512, 1024) matrix combined with a (1024,) row, the shape of a bias add or a
per-feature scale, in float32 and bfloat16. packrt's cost over numpy here is its dispatch
(a Tensor wrapper, a backend lookup, a dtype check) since the arithmetic itself is numpy's.
"""

from __future__ import annotations

import operator
from typing import Any

import pytest
from bench_support import check_close, mark, rand, require_torch, to_torch

import packrt_core as prt

SHAPE, ROW = (512, 1024), (1024,)
OPS = {"add": operator.add, "mul": operator.mul}


def _inputs(dtype: str, impl: str) -> tuple[Any, Any]:
    a, b = rand(SHAPE, dtype, seed=1), rand(ROW, dtype, seed=2)
    if impl == "packrt":
        return prt.from_numpy(a), prt.from_numpy(b)
    if impl == "torch":
        return to_torch(a), to_torch(b)
    return a, b


@pytest.mark.parametrize("impl", ["packrt", "numpy", "torch"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("op", ["add", "mul"])
def test_broadcast_binary(benchmark: Any, op: str, dtype: str, impl: str) -> None:
    if impl == "torch":
        require_torch()
    fn = OPS[op]
    x, row = _inputs(dtype, impl)
    expected = fn(*_inputs(dtype, "numpy"))
    check_close(fn(x, row), expected, dtype, f"{impl} {op} {dtype}")
    mark(benchmark, impl, f"elementwise-{op}-{dtype}-512x1024+1024")
    benchmark(fn, x, row)
