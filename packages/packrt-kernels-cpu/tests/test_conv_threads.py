"""conv2d's banded roads (columns, Winograd) on a thread pool: the same bits on one thread as on several
on MKL's road (within the road tolerance on numpy's), and a worker's failure raised to the caller (the
compiled path: numba loaded)."""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import pytest

from packrt_kernels_cpu import CpuBackend, blas, compiled
from packrt_kernels_cpu.conv import Conv2dGeometry, columns, conv2d, conv2d_geometry, roads, winograd
from packrt_kernels_cpu.tolerance import assert_same_result

pytestmark = pytest.mark.skipif(not compiled.enabled(), reason="numba does not load here: no banded road")


def resolve(w: np.ndarray, **geometry: Any) -> Conv2dGeometry:
    return conv2d_geometry((int(w.shape[2]), int(w.shape[3])), **geometry)


@pytest.fixture(params=["columns", "winograd"])
def road(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """conv2d's banded roads, Winograd taken whatever the channel count (only where MKL loads:
    elsewhere that case is the columns one again)."""
    monkeypatch.setattr(roads, "_WINOGRAD_MIN_CHANNELS", 1 if request.param == "winograd" else 10**9)
    return str(request.param)


def _alone_and_shared(make: Any, rng: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, np.ndarray]:
    """conv2d of one input on one thread, then on two, with bands small enough to share out."""
    monkeypatch.setattr(columns, "_BAND_BYTES", 4 * 18 * 9 * 3)  # three output rows a band: tiles to share out
    monkeypatch.setattr(winograd, "_BAND_BYTES", 1)  # one row of 2x2 tiles a band
    x, w, b = make(rng, (3, 2, 9, 9), np.float32), make(rng, (4, 2, 3, 3), np.float32), make(rng, (4,), np.float32)
    geometry = resolve(w, padding=1)
    backend = CpuBackend()
    try:
        backend.set_num_threads(1)
        alone = conv2d(x, w, b, geometry)
        backend.set_num_threads(2)
        shared = conv2d(x, w, b, geometry)
    finally:
        backend.set_num_threads(os.cpu_count() or 1)
    return alone, shared


@pytest.mark.usefixtures("road", "blas_road")
@pytest.mark.parametrize("blas_road", ["mkl"], indirect=True)
def test_banded_conv2d_gives_the_same_bits_on_one_and_two_threads_on_mkls_road(
    make: Any, rng: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A promise (docs/guides/determinism.md): the (image, band) tiles do not depend on the thread count,
    and each tile's GEMMs run on one MKL thread either way (``threads.on_this_thread``, ``MKL_Set_Num_Threads_Local``),
    so every tile is the same call on the same shapes."""
    alone, shared = _alone_and_shared(make, rng, monkeypatch)
    np.testing.assert_array_equal(alone, shared)


@pytest.mark.usefixtures("road", "blas_road")
@pytest.mark.parametrize("blas_road", ["numpy"], indirect=True)
def test_banded_conv2d_on_numpys_road_agrees_on_one_and_two_threads_within_the_road_tolerance(
    make: Any, rng: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """numpy's BLAS (OpenBLAS) takes its thread count process-wide, not per tile, so on two threads a tile's
    GEMM may be split by the BLAS, which then chooses its own blocking: not promised bit for bit."""
    alone, shared = _alone_and_shared(make, rng, monkeypatch)
    assert_same_result(alone, shared, terms=2 * 3 * 3)


def test_a_failure_on_a_conv2d_worker_thread_reaches_the_caller(
    road: str, make: Any, rng: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packrt_kernels_cpu.conv import _numba  # numba loaded: the module is skipped otherwise

    # MKL's batched GEMM: one compiled call a thread; numpy's BLAS: the compiled columns of each band from Python
    compiled = {
        "columns": "columns_tiles" if blas.sgemm_batch() is not None else "im2col_planes",
        "winograd": "winograd_tiles",
    }
    name = compiled[road]
    if road == "winograd" and blas.sgemm_batch() is None:
        pytest.skip("the Winograd road runs on MKL's batched GEMM only")
    real = getattr(_numba, name)
    calls: list[str] = []

    def failing_on_workers(*args: Any, **kwargs: Any) -> Any:
        calls.append(threading.current_thread().name)
        if threading.current_thread().name.startswith("packrt-conv2d"):
            raise MemoryError("no room for the columns")
        return real(*args, **kwargs)

    monkeypatch.setattr(_numba, name, failing_on_workers)
    x, w = make(rng, (4, 2, 6, 6), np.float32), make(rng, (3, 2, 3, 3), np.float32)
    backend = CpuBackend()
    try:
        backend.set_num_threads(2)
        with pytest.raises(MemoryError, match="no room for the columns"):
            conv2d(x, w, None, resolve(w, padding=1))
    finally:
        backend.set_num_threads(os.cpu_count() or 1)
    assert any(name.startswith("packrt-conv2d") for name in calls)
