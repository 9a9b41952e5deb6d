"""Linear forward: packrt's packed, borrowed and int8 weights against ``x @ w.T`` and torch's linear.

Weight (1024, 1024) with bias, for a decode-sized batch (1 row) and prefill-sized ones
(32 and 64 rows; the issue's targets are packrt / torch <= 1.0 at 1 and 64 rows, float32).
``packrt`` is ``pack_linear(w, b).forward(x)`` (W^T packed once, contiguous, in the dtype the
GEMM multiplies); ``packrt-borrowed`` computes from the declared weight on every call
(what a memory-mapped checkpoint gets); ``packrt-int8`` is the int8 pack (activations quantized per row,
an int32 GEMM: MKL's s8u8s32 on its road), a quarter of the bytes and, with MKL, faster than float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from bench_support import check_close, mark, rand, require_torch, to_torch

from packrt_kernels_cpu import linear_borrowed, pack_linear, pack_quantized_linear, quantize_per_channel

FEATURES = 1024
BATCHES = (1, 32, 64)
TARGET_BATCHES = (1, 64)  # packrt / torch <= 1.0 for the float32 pack (issue: speed)


def _numpy_linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Any:
    if x.dtype == np.float32:
        return x @ w.T + b
    f32 = np.float32
    return (x.astype(f32) @ w.astype(f32).T + b.astype(f32)).astype(x.dtype)


def _data(dtype: str, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = rand((batch, FEATURES), dtype, seed=6)
    w = (rand((FEATURES, FEATURES), "fp32", seed=7) / np.float32(np.sqrt(FEATURES))).astype(x.dtype)
    return x, w, rand((FEATURES,), dtype, seed=8)


def _callable(impl: str, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Any:
    if impl == "packrt":
        pack = pack_linear(w, b)
        return lambda: pack.forward(x)
    if impl == "packrt-borrowed":
        return lambda: linear_borrowed(x, w, b)
    if impl == "torch":
        torch = require_torch()
        tx, tw, tb = to_torch(x), to_torch(w), to_torch(b)
        functional = torch.nn.functional
        return lambda: functional.linear(tx, tw, tb)
    return lambda: _numpy_linear(x, w, b)


@pytest.mark.parametrize("impl", ["packrt", "packrt-borrowed", "numpy", "torch"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("batch", BATCHES)
def test_linear_forward(benchmark: Any, batch: int, dtype: str, impl: str) -> None:
    x, w, b = _data(dtype, batch)
    fn = _callable(impl, x, w, b)
    check_close(fn(), _numpy_linear(x, w, b), dtype, f"{impl} linear {dtype} batch {batch}")
    target = {"target_ratio_vs_torch": 1.0} if (impl, dtype) == ("packrt", "fp32") and batch in TARGET_BATCHES else {}
    case = f"linear-{dtype}-{batch}x{FEATURES}->{FEATURES}"
    mark(benchmark, impl, case, flops=2 * batch * FEATURES * FEATURES, **target)
    benchmark(fn)


@pytest.mark.parametrize("impl", ["packrt-int8", "packrt", "numpy", "torch"])
@pytest.mark.parametrize("batch", BATCHES)
def test_int8_linear_forward(benchmark: Any, batch: int, impl: str) -> None:
    """The int8 pack against float32 packrt, numpy and torch on the same float32 activations."""
    x, w, b = _data("fp32", batch)
    if impl == "packrt-int8":
        q, scale = quantize_per_channel(w)
        pack = pack_quantized_linear(q, scale, b)
        fn: Any = lambda: pack.forward(x)  # noqa: E731
        # Quantization error, not kernel error: each weight is off by up to half a step.
        got, want = fn(), _numpy_linear(x, w, b)
        assert float(np.max(np.abs(got - want))) < 0.05 * float(np.max(np.abs(want)))
    else:
        fn = _callable(impl, x, w, b)
        check_close(fn(), _numpy_linear(x, w, b), "fp32", f"{impl} linear fp32 batch {batch}")
    mark(benchmark, impl, f"linear-int8-vs-fp32-{batch}x{FEATURES}->{FEATURES}", flops=2 * batch * FEATURES * FEATURES)
    benchmark(fn)
