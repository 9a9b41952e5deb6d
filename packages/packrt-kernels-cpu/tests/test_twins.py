"""The compiled kernels' twins (``_numba_kernels.twins``): every kernel that runs on numba's pool has a
serial twin compiled from the same body without a parallel region (what ``compiled.launch`` calls for
small work and inside ``threads.on_this_thread``), and the twins give the same bits on work that the
pool splits into several tasks. The tile loops' twins are checked with the tiles (test_llvm_tiles.py; the tile
attention's in test_plan_kernels.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from packrt_kernels_cpu import compiled

_MODULES = ("packrt_kernels_cpu._numba_kernels", "packrt_kernels_cpu._numba_plan", "packrt_kernels_cpu._numba_int8")
Case = Callable[[Any, np.random.Generator], tuple[Any, ...]]


def _loops(name: str) -> Any:
    if not compiled.enabled():
        pytest.skip("numba cannot load here: there are no compiled kernels")
    return compiled.kernels() if name.endswith("_numba_kernels") else compiled.module(name)


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _out(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return np.empty(shape, dtype)


def _norm(rng: np.random.Generator, width: int) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """A norm's weight, bias and epsilon."""
    return _f32(rng, width), _f32(rng, width), np.float32(1e-5)


def _bf16_bits(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (_f32(rng, *shape).view(np.uint32) >> 16).astype(np.uint16)


def _quantize_args(k: Any, rng: np.random.Generator) -> tuple[Any, ...]:
    x = _f32(rng, 9, 50)
    x[3, 7] = np.nan  # a row holding NaN: its scale NaN on both twins
    return x, np.empty((9, 50), np.uint8), np.empty(9, np.float32), np.empty(9, np.int32)


def _dequantize_args(k: Any, rng: np.random.Generator) -> tuple[Any, ...]:
    acc = rng.integers(-(2**20), 2**20, (9, 40)).astype(np.int32)
    x_scale, x_zero = _f32(rng, 9), rng.integers(0, 256, 9).astype(np.int32)
    w_scale, w_sum = _f32(rng, 40), rng.integers(-5000, 5000, 40).astype(np.int32)
    return acc, x_scale, x_zero, w_scale, w_sum, _f32(rng, 40), False, np.empty((9, 40), np.float32)


_K, _P, _I = "_numba_kernels", "_numba_plan", "_numba_int8"
# (module, kernel, its arguments from (constants' namespace, rng)): work of several tasks on the pool
_CASES: list[tuple[str, str, Case]] = [
    (_K, "activation", lambda k, r: (k.GELU_ERF, _f32(r, 40_000), _out(40_000))),
    (_K, "binary", lambda k, r: (k.MULTIPLY, _f32(r, 40_000), _f32(r, 40_000), _out(40_000))),
    (_K, "activation_bf16", lambda k, r: (k.SILU, _bf16_bits(r, 40_000), _out(40_000, dtype=np.uint16))),
    (_K, "fill_rows", lambda k, r: (_f32(r, 64), _out(600, 64))),
    (_K, "softmax_step", lambda k, r: (k.SHIFT, _f32(r, 9, 50))),
    (_K, "rows", lambda k, r: (k.LAYER_NORM, _f32(r, 9, 50), *_norm(r, 50), _out(9, 50))),
    (_K, "rows_bf16", lambda k, r: (k.RMS_NORM, _bf16_bits(r, 9, 50), *_norm(r, 50), _out(9, 50, dtype=np.uint16))),
    (_K, "transpose", lambda k, r: (_f32(r, 70, 45), _out(45, 70), False)),
    (_K, "rotary", lambda k, r: (_f32(r, 2, 3, 5, 8), _f32(r, 5, 8), _f32(r, 5, 8), _out(2, 3, 5, 8))),
    (_K, "gemv_t", lambda k, r: (_f32(r, 300), _f32(r, 300, 2100), _f32(r, 2100), _out(3, 2100), _out(2100))),
    (_K, "gemv", lambda k, r: (_f32(r, 50), _f32(r, 200, 50), _f32(r, 200), _out(200))),
    (_P, "epilogue", lambda k, r: (k.GELU_TANH, _f32(r, 9, 40), _f32(r, 40))),
    (_P, "residual_norm", lambda k, r: (True, _f32(r, 9, 40), _f32(r, 9, 40), *_norm(r, 40), _out(9, 40))),
    (_P, "masked_shift", lambda k, r: (_f32(r, 12, 20), r.random((3, 20)) < 0.7, 4)),
    (_P, "gated", lambda k, r: (k.SILU, _f32(r, 9, 80), _out(9, 40))),
    (_P, "decode_attention", lambda k, r: (
        _f32(r, 2, 6, 16), _f32(r, 2, 3, 40, 16), _f32(r, 2, 3, 40, 16), 3, 33, r.random((2, 40)) < 0.8,
        np.float32(0.25), np.float32(0), _out(2, 96),
    )),
    (_I, "quantize_rows", _quantize_args),
    (_I, "row_sums", lambda k, r: (r.integers(-127, 128, (40, 50)).astype(np.int8), _out(40, dtype=np.int32))),
    (_I, "dequantize_product", _dequantize_args),
]  # fmt: skip


def test_every_pooled_kernel_has_a_serial_twin_that_starts_no_parallel_region() -> None:
    checked = []
    for module in _MODULES:
        loops = _loops(module)
        for name, value in vars(loops).items():
            if getattr(value, "targetoptions", {}).get("parallel"):
                twin = getattr(loops, name + "_serial", None)
                assert twin is not None, f"{module}.{name} runs on the pool and has no {name}_serial"
                assert not twin.targetoptions.get("parallel"), f"{module}.{name}_serial is compiled parallel"
                checked.append(name)
    tiled = {
        "float_tiles",
        "vnni_tiles",
        "vnni_linear",
        "vnni_rows",
        "tile_attention",
    }  # their bits: test_*_tiles, test_vnni
    assert {name for _, name, _ in _CASES} | tiled == set(checked)


@pytest.mark.parametrize(("module", "name", "case"), _CASES, ids=[name for _, name, _ in _CASES])
def test_a_serial_twin_gives_the_bits_its_pool_twin_gives(module: str, name: str, case: Case) -> None:
    loops = _loops("packrt_kernels_cpu." + module)
    args = case(loops if module == "_numba_plan" else compiled.kernels(), np.random.default_rng(len(name)))
    pooled = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    alone = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    getattr(loops, name)(*pooled)
    getattr(loops, name + "_serial")(*alone)
    for i, (p, s) in enumerate(zip(pooled, alone, strict=True)):
        if isinstance(p, np.ndarray):
            np.testing.assert_array_equal(p.view(np.uint8), s.view(np.uint8), err_msg=f"argument {i} of {name}")
