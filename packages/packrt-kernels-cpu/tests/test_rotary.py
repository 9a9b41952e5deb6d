"""rotary_embedding: the compiled path gives the numpy path's bits (strided heads, the pool, the tails),
and the numpy path is ``x * cos + rotate_half(x) * sin``."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from packrt_kernels_cpu import compiled, fused, settings
from packrt_kernels_cpu import functional as kernels

F32 = np.float32


def _tables(length: int, dim: int, dtype: Any = F32) -> tuple[np.ndarray, np.ndarray]:
    angles = np.arange(length)[:, None] * (10000.0 ** (-np.arange(0, dim, 2) / dim))[None, :]
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def _by_definition(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin


def _both(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> tuple[Any, Any]:
    with settings.override(numba=True):
        fast = kernels.rotary_embedding(x, cos, sin)
    with settings.override(numba=False):
        reference = kernels.rotary_embedding(x, cos, sin)
    return fast, reference


@pytest.mark.skipif(not compiled.enabled(), reason="numba does not load here: no compiled rotary")
@pytest.mark.parametrize(
    ("batch", "heads", "length", "dim"),
    [(1, 8, 1, 64), (2, 3, 5, 2), (1, 4, 16, 128), (4, 16, 128, 64)],  # a decode step ... the pool's share
)
@pytest.mark.parametrize("layout", ["contiguous", "heads-split"])
def test_the_compiled_rotary_gives_the_numpy_paths_bits(
    batch: int, heads: int, length: int, dim: int, layout: str
) -> None:
    rng = np.random.default_rng(batch * 100 + dim)
    if layout == "contiguous":
        x = rng.standard_normal((batch, heads, length, dim)).astype(F32)
    else:  # a projection's (B, T, H*D) output viewed as (B, H, T, D), as attention splits heads
        x = rng.standard_normal((batch, length, heads * dim)).astype(F32).reshape(batch, length, heads, dim)
        x = x.transpose(0, 2, 1, 3)
    cos, sin = _tables(length, dim)
    assert fused.rotates(x, cos, sin)
    fast, reference = _both(x, cos, sin)
    assert fast.flags.c_contiguous and fast.dtype == F32 and fast.shape == x.shape
    np.testing.assert_array_equal(fast, reference)
    np.testing.assert_array_equal(reference, _by_definition(x, cos, sin))


def test_broadcast_tables_and_other_ranks_take_the_numpy_path() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 6, 8)).astype(F32)
    cos, sin = _tables(6, 8)
    per_row = (np.broadcast_to(cos, (2, 1, 6, 8)).copy(), np.broadcast_to(sin, (2, 1, 6, 8)).copy())
    assert not fused.rotates(x, *per_row), "position tables per batch row are numpy's"
    np.testing.assert_array_equal(kernels.rotary_embedding(x, *per_row), _by_definition(x, *per_row))
    flat = x[0, 0]  # (T, D): a 2-D input
    assert not fused.rotates(flat, cos, sin)
    np.testing.assert_array_equal(kernels.rotary_embedding(flat, cos, sin), _by_definition(flat, cos, sin))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_half_inputs_compute_in_float32_and_round_once(dtype: Any) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 3, 16)).astype(dtype)
    cos, sin = _tables(3, 16, dtype)
    got = kernels.rotary_embedding(x, cos, sin)
    assert got.dtype == np.dtype(dtype)
    wide = _by_definition(x.astype(F32), cos.astype(F32), sin.astype(F32))
    np.testing.assert_array_equal(got, wide.astype(dtype))


def test_a_zero_angle_leaves_the_input_as_it_is() -> None:
    x = np.random.default_rng(5).standard_normal((1, 2, 1, 32)).astype(F32)
    cos, sin = np.ones((1, 32), F32), np.zeros((1, 32), F32)
    np.testing.assert_array_equal(kernels.rotary_embedding(x, cos, sin), x)
