"""conv2d (im2col + GEMM) and scaled dot-product attention against torch.

numpy has no convolution or attention of its own, so torch is the only reference here.
conv2d: a ResNet-like 3x3 layer, batch 8, 32 -> 64 channels on 32x32, padding 1, both the
one-shot ``conv2d`` and the packed layer's forward. Attention: batch 4, 8 heads, 128 tokens,
head size 64, with and without the causal mask.
"""

from __future__ import annotations

from typing import Any

import pytest
from bench_support import check_close, mark, rand, require_torch, to_torch

from packrt_kernels_cpu import conv2d, conv2d_geometry, pack_conv2d, scaled_dot_product_attention

CONV_X, CONV_W = (8, 32, 32, 32), (64, 32, 3, 3)
HEADS = (4, 8, 128, 64)


@pytest.mark.parametrize("impl", ["packrt", "packrt-packed", "torch"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_conv2d_3x3(benchmark: Any, dtype: str, impl: str) -> None:
    torch = require_torch()
    x, w, b = rand(CONV_X, dtype, seed=9), rand(CONV_W, dtype, seed=10) / 10, rand((64,), dtype, seed=11)
    w = w.astype(x.dtype)
    ref_x, ref_w, ref_b = (to_torch(a).float() for a in (x, w, b))
    expected = torch.nn.functional.conv2d(ref_x, ref_w, ref_b, padding=1)
    if impl == "packrt":
        geometry = conv2d_geometry((3, 3), padding=1)
        fn: Any = lambda: conv2d(x, w, b, geometry)  # noqa: E731
    elif impl == "packrt-packed":
        pack = pack_conv2d(w, b, conv2d_geometry((3, 3), padding=1))
        fn = lambda: pack.forward(x)  # noqa: E731
    else:
        tx, tw, tb = to_torch(x), to_torch(w), to_torch(b)
        fn = lambda: torch.nn.functional.conv2d(tx, tw, tb, padding=1)  # noqa: E731
    check_close(fn(), expected, dtype, f"{impl} conv2d {dtype}")
    mark(benchmark, impl, f"conv2d-3x3-{dtype}-8x32x32x32->64")
    benchmark(fn)


@pytest.mark.parametrize("impl", ["packrt", "torch"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_sdpa(benchmark: Any, dtype: str, causal: bool, impl: str) -> None:
    torch = require_torch()
    q, k, v = (rand(HEADS, dtype, seed=s) for s in (12, 13, 14))
    tq, tk, tv = to_torch(q), to_torch(k), to_torch(v)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    expected = sdpa(tq.float(), tk.float(), tv.float(), is_causal=causal)
    if impl == "packrt":
        fn: Any = lambda: scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    else:
        fn = lambda: sdpa(tq, tk, tv, is_causal=causal)  # noqa: E731
    check_close(fn(), expected, dtype, f"{impl} sdpa {dtype} causal={causal}")
    mark(benchmark, impl, f"sdpa-{'causal' if causal else 'full'}-{dtype}-4x8x128x64")
    benchmark(fn)
