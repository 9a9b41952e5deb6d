"""The compiled GEMV (one row times a matrix, the batch-1 decode step): numpy's values, the same bits
on one thread as on several, and taken only where it was meant to be."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from packrt_kernels_cpu import CpuBackend, blas, compiled, gemv, settings, threads
from packrt_kernels_cpu import functional as kernels
from packrt_kernels_cpu.tolerance import tolerance

pytestmark = pytest.mark.skipif(not compiled.enabled(), reason="numba does not load here: no compiled GEMV")
F32 = np.float32
TWO_CORES = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the compiled GEMV is taken on two threads or more")
# (in, out): tails of every loop (rows not a multiple of 4 or of 128, outputs not of 64 or 1024), the
# serial size and the pooled one, and the decode case's shapes.
SHAPES = [(64, 64), (130, 70), (1027, 1030), (512, 256), (1408, 512), (512, 8192), (3, 2000)]


@pytest.fixture
def two_threads() -> Iterator[None]:
    backend = CpuBackend()
    backend.set_num_threads(2)
    try:
        yield
    finally:
        backend.set_num_threads(os.cpu_count() or 1)


def _operands(k: int, n: int, layout: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed + k * 7 + n)
    x = rng.standard_normal((1, k)).astype(F32)
    w = rng.standard_normal((n, k)).astype(F32)  # torch's (out, in)
    wt = np.ascontiguousarray(w.T) if layout == "pack" else w.T  # a pack's (in, out), or the borrowed view
    return x, wt, rng.standard_normal(n).astype(F32)


@TWO_CORES
@pytest.mark.usefixtures("two_threads")
@pytest.mark.parametrize("layout", ["pack", "transposed"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize(("k", "n"), SHAPES)
def test_gemv_gives_numpys_product_plus_bias(k: int, n: int, layout: str, with_bias: bool) -> None:
    x, wt, b = _operands(k, n, layout)
    bias = b if with_bias else None
    assert gemv.gemv_takes(x, wt, bias)
    got = gemv.gemv(x, wt, bias)
    want = x.astype(np.float64) @ wt.astype(np.float64) + (b if with_bias else 0.0)
    assert got.dtype == F32 and got.shape == (1, n)
    rtol, atol = tolerance(np.dtype(F32))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * np.sqrt(k))


@pytest.mark.parametrize("layout", ["pack", "transposed"])
@pytest.mark.parametrize(("k", "n"), SHAPES)
def test_gemv_gives_the_same_bits_on_one_and_two_threads(k: int, n: int, layout: str) -> None:
    """A promise (docs/guides/determinism.md): the pooled kernel sums fixed groups of GEMV_ROWS weight rows
    (the pack) or whole rows (the transposed view) in a fixed order, so no thread count changes a bit."""
    x, wt, b = _operands(k, n, layout, seed=1)
    loops = compiled.kernels()
    pooled, alone = np.empty(n, F32), np.empty(n, F32)
    if layout == "pack":
        parts = np.empty((-(-k // loops.GEMV_ROWS), n), F32)
        loops.gemv_t(x[0], wt, b, parts, pooled)
        loops.gemv_t_serial(x[0], wt, b, parts, alone)
    else:
        loops.gemv(x[0], wt.T, b, pooled)
        loops.gemv_serial(x[0], wt.T, b, alone)
    np.testing.assert_array_equal(pooled, alone)


@TWO_CORES
@pytest.mark.usefixtures("two_threads")
def test_a_nan_in_the_row_reaches_every_output_it_multiplies_into() -> None:
    x, wt, b = _operands(512, 300, "pack")
    x[0, 17] = np.nan
    assert np.isnan(gemv.gemv(x, wt, b)).all()
    wt[17, :5] = 0.0  # 0 * NaN is NaN too: numpy's rule, kept
    assert np.isnan(gemv.gemv(x, wt, None)).all()


@TWO_CORES
@pytest.mark.usefixtures("two_threads")
def test_gemv_refuses_what_it_does_not_compute() -> None:
    x, wt, b = _operands(256, 128, "pack")
    assert gemv.gemv_takes(x, wt, b)
    assert not gemv.gemv_takes(np.vstack([x, x]), wt, b), "two rows are a GEMM"
    assert not gemv.gemv_takes(x.astype(np.float64), wt.astype(np.float64), None), "float32 only"
    assert not gemv.gemv_takes(x, wt[:, ::2], b[::2]), "a weight neither contiguous nor transposed"
    assert not gemv.gemv_takes(x, wt, b[:-1]), "a bias of the wrong length"
    assert not gemv.gemv_takes(x, wt, b.astype(np.float64)), "a bias of another dtype"
    small = np.ones((8, 8), F32)
    assert not gemv.gemv_takes(x[:, :8], small, None), "a product too small to be worth a compiled call"
    with threads.on_this_thread():
        assert not gemv.gemv_takes(x, wt, b), "a caller that spreads its own work keeps it serial: numpy's"


def test_on_one_thread_the_row_stays_with_openblas() -> None:
    x, wt, b = _operands(256, 128, "pack")
    backend = CpuBackend()
    backend.set_num_threads(1)
    try:
        assert not gemv.gemv_takes(x, wt, b)
    finally:
        backend.set_num_threads(os.cpu_count() or 1)


@TWO_CORES
@pytest.mark.usefixtures("two_threads")
def test_numba_off_sends_the_row_back_to_numpy() -> None:
    x, wt, b = _operands(256, 128, "pack")
    with settings.override(numba=False):
        assert not gemv.gemv_takes(x, wt, b)


@TWO_CORES
@pytest.mark.usefixtures("two_threads")
@pytest.mark.parametrize("lead", [(1,), (1, 1), ()], ids=["(1,in)", "(1,1,in)", "(in,)"])
def test_a_linear_of_one_row_goes_through_the_compiled_gemv(lead: tuple[int, ...], monkeypatch: Any) -> None:
    x, wt, b = _operands(512, 384, "pack")
    seen: list[tuple[int, ...]] = []
    real = gemv.gemv

    def spy(row: np.ndarray, w: np.ndarray, bias: Any) -> Any:
        seen.append(row.shape)
        return real(row, w, bias)

    monkeypatch.setattr(gemv, "gemv", spy)
    got = kernels.gemm_rows(x.reshape(*lead, 512), wt, b)
    assert seen == [(1, 512)]
    assert got.shape == (*lead, 384)
    want = blas.matmul(x, wt, b).reshape(*lead, 384)
    rtol, atol = tolerance(np.dtype(F32))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * np.sqrt(512))
