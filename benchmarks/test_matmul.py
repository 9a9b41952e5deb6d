"""Square matmul, packrt ``Tensor @ Tensor`` against numpy and torch, float32/float16/bfloat16.

numpy has no half-precision GEMM (its float16 and ml_dtypes bfloat16 matmuls are plain C
loops), so the numpy reference for a half dtype is what a numpy user would write and what
packrt does internally: upcast to float32, one BLAS GEMM, round back. torch runs its own
half kernels; torch 2.13's CPU float16 GEMM is a slow fallback (about 2 s at 1024 here), so
float16 is measured at 256 only to keep the run short.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from bench_support import DTYPES, check_close, mark, rand, require_torch, to_torch

import packrt_core as prt

CASES = [("fp32", n) for n in (256, 512, 1024)] + [("bf16", n) for n in (256, 512, 1024)] + [("fp16", 256)]


def _numpy_matmul(a: np.ndarray, b: np.ndarray) -> Any:
    if a.dtype == np.float32:
        return a @ b
    return (a.astype(np.float32) @ b.astype(np.float32)).astype(a.dtype)


@pytest.mark.parametrize("impl", ["packrt", "numpy", "torch"])
@pytest.mark.parametrize(("dtype", "n"), CASES, ids=[f"{d}-{n}" for d, n in CASES])
def test_square_matmul(benchmark: Any, dtype: str, n: int, impl: str) -> None:
    a, b = rand((n, n), dtype, seed=3), rand((n, n), dtype, seed=4)
    expected = _numpy_matmul(a, b)
    if impl == "packrt":
        x, y = prt.from_numpy(a), prt.from_numpy(b)
        fn: Any = lambda: x @ y  # noqa: E731 - the timed call, kept as small as the others
    elif impl == "torch":
        require_torch()
        tx, ty = to_torch(a), to_torch(b)
        fn = lambda: tx @ ty  # noqa: E731
    else:
        fn = lambda: _numpy_matmul(a, b)  # noqa: E731
    result = fn()
    check_close(result, expected, dtype, f"{impl} matmul {dtype} {n}")
    if impl != "torch":
        assert np.asarray(result).dtype == DTYPES[dtype], f"{impl} matmul {dtype} changed the dtype"
    mark(benchmark, impl, f"matmul-{dtype}-{n}", flops=2 * n**3)
    benchmark(fn)
