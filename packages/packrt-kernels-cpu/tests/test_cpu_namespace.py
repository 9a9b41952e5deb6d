"""The CPU namespace is numpy's: add, subtract and multiply of two large float32 arrays of one shape run
on the pool with numpy's bits exactly, and every other case and name is numpy's own."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from packrt_kernels_cpu import compiled, cpu_namespace, fused

OPS = ["add", "subtract", "multiply"]
LARGE = (700, 400)  # 280 000 elements: past the pool's threshold


def _edges(shape: tuple[int, ...], seed: int) -> np.ndarray:
    x = (np.random.default_rng(seed).standard_normal(shape) * 1e3).astype(np.float32)
    flat = x.reshape(-1)
    flat[:8] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 3.4e38, -3.4e38, 1e-45]  # overflow, subnormal, signed zero
    return x


@pytest.mark.parametrize("op", OPS)
def test_large_float32_arithmetic_gives_numpys_bits_on_the_pool(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if not compiled.enabled():
        pytest.skip("numba does not load here: numpy computes every case")
    a, b = _edges(LARGE, 1), _edges(LARGE, 2)[::-1].copy()
    pooled: list[str] = []
    real = fused.binary
    monkeypatch.setattr(fused, "binary", lambda name, x, y: (pooled.append(name), real(name, x, y))[1])
    with np.errstate(all="ignore"):
        got, want = getattr(cpu_namespace, op)(a, b), getattr(np, op)(a, b)
    assert pooled == [op]
    assert got.dtype == np.float32 and got.shape == LARGE
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))  # NaN, infinities, -0 included


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    ("a", "b", "keywords"),
    [
        (np.ones(LARGE, np.float32), np.ones(LARGE[1], np.float32), {}),  # broadcasting
        (np.ones(LARGE, np.float32), 2.0, {}),  # a Python number
        (np.ones(LARGE, np.float64), np.ones(LARGE, np.float64), {}),  # another dtype
        (np.ones(LARGE, np.float32)[:, ::2], np.ones(LARGE, np.float32)[:, ::2], {}),  # strided views
        (np.ones((3, 4), np.float32), np.ones((3, 4), np.float32), {}),  # small: numpy's loop is as fast
        (np.ones(LARGE, np.float32), np.ones(LARGE, np.float32), {"out": np.empty(LARGE, np.float32)}),
    ],
    ids=["broadcast", "scalar", "float64", "strided", "small", "out"],
)
def test_every_other_case_is_numpys_own(
    op: str, a: Any, b: Any, keywords: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fused, "binary", lambda *args: pytest.fail("the pool took a case numpy should compute"))
    got = getattr(cpu_namespace, op)(a, b, **keywords)
    want = getattr(np, op)(a, b)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    if "out" in keywords:
        assert got is keywords["out"]


def test_other_names_are_numpys_and_an_unknown_one_raises_numpys_error() -> None:
    assert cpu_namespace.matmul is np.matmul and cpu_namespace.ndarray is np.ndarray
    with pytest.raises(AttributeError, match="no_such_function"):
        cpu_namespace.no_such_function  # noqa: B018
