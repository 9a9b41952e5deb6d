"""Module-level costs: ``Module.__call__`` overhead and ``nn.Linear`` forward under each weight residency.

These need ``packrt_core.nn`` and skip, saying why, until it lands.

Call overhead: a module whose forward returns its input, called on a tiny tensor, so the
time is the call machinery alone (hook checks, dispatch to forward). The project's target
is packrt's overhead at most 0.7x torch's (report.py prints the target next to the ratio).

Residency: a (1024, 1024) Linear bound with ``load_state_dict(..., assign=True,
weight_residency=mode)`` for each mode, batch 8, against torch.nn.Linear with the same
weights. Each case also records, with tracemalloc, the bytes the layer keeps after its
first forward (the pack, if any) and the peak during a forward, in ``extra_info["memory"]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from bench_support import check_close, mark, rand, require_keyword, require_nn, require_torch, to_torch, traced

import packrt_core as prt

RESIDENCIES = ("packed", "borrowed", "auto", "per_call")
FEATURES, BATCH = 1024, 8


def _packrt_identity() -> Any:
    nn = require_nn("Module")

    class Passthrough(nn.Module):  # type: ignore[misc, name-defined]
        def forward(self, x: Any) -> Any:
            return x

    return Passthrough()


def _torch_identity() -> Any:
    torch = require_torch()

    class Passthrough(torch.nn.Module):  # type: ignore[misc, name-defined]
        def forward(self, x: Any) -> Any:
            return x

    return Passthrough()


@pytest.mark.parametrize("impl", ["packrt", "torch"])
def test_module_call_overhead(benchmark: Any, impl: str) -> None:
    if impl == "packrt":
        module, x = _packrt_identity(), prt.from_numpy(rand((4,)))
    else:
        module, x = _torch_identity(), to_torch(rand((4,)))
    assert module(x) is x
    mark(benchmark, impl, "module-call-overhead", target_ratio_vs_torch=0.7)
    benchmark(module, x)


def _packrt_linear(w: np.ndarray, b: np.ndarray, residency: str) -> Any:
    nn = require_nn("Module", "Linear")
    require_keyword(nn.Module.load_state_dict, "weight_residency", "Module.load_state_dict")
    layer = nn.Linear(FEATURES, FEATURES)
    layer.load_state_dict(
        {"weight": prt.from_numpy(w), "bias": prt.from_numpy(b)}, assign=True, weight_residency=residency
    )
    return layer


@pytest.mark.parametrize("impl", ["packrt", "torch"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("residency", RESIDENCIES)
def test_linear_module_forward(benchmark: Any, residency: str, dtype: str, impl: str) -> None:
    x = rand((BATCH, FEATURES), dtype, seed=15)
    w = (rand((FEATURES, FEATURES), "fp32", seed=16) / np.float32(32)).astype(x.dtype)
    b = rand((FEATURES,), dtype, seed=17)
    expected = x.astype(np.float32) @ w.astype(np.float32).T + b.astype(np.float32)
    case = f"nn-linear-{residency}-{dtype}-{BATCH}x{FEATURES}->{FEATURES}"
    if impl == "packrt":
        layer = _packrt_linear(w, b, residency)
        tx: Any = prt.from_numpy(x)
        # The first forward packs (under packed/auto); what it leaves behind is the resident cost.
        first, kept, _ = traced(lambda: layer(tx))
        kept -= int(np.asarray(first).nbytes)
        _, _, peak = traced(lambda: layer(tx))
        extra = {"memory": {"weight_bytes": int(w.nbytes + b.nbytes), "kept_bytes": kept, "peak_bytes": peak}}
        fn: Any = lambda: layer(tx)  # noqa: E731
    else:
        torch = require_torch()
        torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
        layer = torch.nn.Linear(FEATURES, FEATURES, dtype=torch_dtype)
        with torch.no_grad():
            layer.weight.copy_(to_torch(w))
            layer.bias.copy_(to_torch(b))
        tx = to_torch(x)
        extra = {}

        def fn() -> Any:
            with torch.no_grad():
                return layer(tx)

    check_close(fn(), expected, dtype, f"{impl} nn.Linear {residency} {dtype}")
    mark(benchmark, impl, case, residency=residency, **extra)
    benchmark(fn)
