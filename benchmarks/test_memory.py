"""Resident bytes of each weight form, measured with tracemalloc, and the one-off cost of packing.

Time here is the packing step (paid once per weight, at load or on the first forward), so
these cases have no reference to divide by; what they are for is ``extra_info["memory"]``:

- ``kept_bytes``: what the weight form keeps resident once built (the pack; 0 for borrowed),
- ``peak_bytes``: the most one forward of a (8, 1024) batch allocates on top of that,
- ``weight_bytes``: the declared weight and bias, for scale.

So packed float32 keeps 1x the declared bytes, packed bfloat16 2x (upcast once), borrowed 0x
but a bfloat16 forward converts the whole weight on every call, and int8 about 0.25x of
float32 with a per-forward scratch capped by ``scratch_bytes``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from bench_support import mark, rand, traced

from packrt_kernels_cpu import linear_borrowed, pack_linear, pack_quantized_linear, quantize_per_channel

FEATURES, BATCH = 1024, 8


def _int8_pack(w: np.ndarray, b: np.ndarray) -> Any:
    q, scale = quantize_per_channel(w)
    return pack_quantized_linear(q, scale, b)


class _Borrowed:
    """The borrowed form: nothing built, the declared arrays are read on every call."""

    def __init__(self, w: np.ndarray, b: np.ndarray) -> None:
        self.w, self.b = w, b

    def forward(self, x: np.ndarray) -> Any:
        return linear_borrowed(x, self.w, self.b)


FORMS: dict[str, tuple[str, Callable[[np.ndarray, np.ndarray], Any]]] = {
    "packed-fp32": ("fp32", pack_linear),
    "packed-bf16": ("bf16", pack_linear),
    "borrowed-fp32": ("fp32", _Borrowed),
    "borrowed-bf16": ("bf16", _Borrowed),
    "int8-from-fp32": ("fp32", _int8_pack),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_linear_weight_residency_bytes(benchmark: Any, form: str) -> None:
    dtype, build = FORMS[form]
    w = (rand((FEATURES, FEATURES), "fp32", seed=18) / np.float32(32)).astype(rand((1,), dtype).dtype)
    b = rand((FEATURES,), dtype, seed=19)
    x = rand((BATCH, FEATURES), dtype, seed=20)
    pack, kept, _ = traced(lambda: build(w, b))
    out, _, peak = traced(lambda: pack.forward(x))
    weight_bytes = int(w.nbytes + b.nbytes)
    if form.startswith("borrowed"):
        assert kept < 4096, f"borrowed form kept {kept} bytes; it should keep no copy of the weight"
    if form == "packed-fp32":
        assert kept >= weight_bytes, f"packed fp32 kept {kept} bytes, less than the {weight_bytes} it packs"
    assert out.shape == (BATCH, FEATURES)
    memory = {
        "weight_bytes": weight_bytes,
        "kept_bytes": kept,
        "peak_bytes": peak - int(out.nbytes),
        "fp32_weight_bytes": FEATURES * FEATURES * 4 + FEATURES * 4,
    }
    mark(benchmark, f"packrt-{form}", f"pack-linear-{form}-{FEATURES}x{FEATURES}", memory=memory)
    benchmark(build, w, b)
