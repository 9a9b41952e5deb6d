"""Shared fixtures: a seeded generator and the torch reference (a skip without torch, a failure in CI)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import platform
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from packrt_kernels_cpu import CpuBackend, blas, settings
from packrt_kernels_cpu.conv import columns, winograd
from packrt_kernels_cpu.tolerance import tolerance

# --import-mode=importlib puts no test folder on sys.path: the tests import conv_cases.py by name
_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


def load_torch() -> ModuleType:
    """torch, or a skip when it is missing; PACKRT_REQUIRE_TORCH=1 turns the skip into a failure."""
    try:
        return importlib.import_module("torch")
    except ImportError as err:
        if os.environ.get("PACKRT_REQUIRE_TORCH") == "1":
            pytest.fail(f"PACKRT_REQUIRE_TORCH=1 but torch cannot be imported: {err}")
        pytest.skip("torch is not installed (set PACKRT_REQUIRE_TORCH=1 to make this a failure)")


class TorchRef:
    """Moves arrays to torch and back (bfloat16 by bit view) and compares with the tolerance table."""

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.F: Any = importlib.import_module("torch.nn.functional")

    def t(self, a: np.ndarray) -> Any:
        if a.dtype == np.dtype(ml_dtypes.bfloat16):
            return self.torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(self.torch.bfloat16)
        return self.torch.from_numpy(np.ascontiguousarray(a))

    def n(self, t: Any) -> np.ndarray:
        if t.dtype == self.torch.bfloat16:
            return np.asarray(t.contiguous().view(self.torch.int16).numpy()).view(ml_dtypes.bfloat16)
        return np.asarray(t.numpy())

    def conv2d(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, **geometry: Any) -> Any:
        """torch's ``conv2d`` of the arrays (``b`` None: no bias), for :meth:`check`."""
        return self.F.conv2d(self.t(x), self.t(w), None if b is None else self.t(b), **geometry)

    def check(self, actual: np.ndarray, expected: Any, scale: float = 1.0) -> None:
        """``actual`` has torch's dtype and shape and agrees within the tolerance table (times ``scale``)."""
        want = self.n(expected)
        assert actual.dtype == want.dtype
        assert actual.shape == want.shape
        rtol, atol = tolerance(actual.dtype)
        np.testing.assert_allclose(
            actual.astype(np.float64), want.astype(np.float64), rtol=rtol * scale, atol=atol * scale
        )


@pytest.fixture(scope="session")
def ref() -> TorchRef:
    return TorchRef(load_torch())


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261130)


def randn(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


@pytest.fixture(scope="session")
def make() -> Any:
    """``make(rng, shape, dtype, scale=1.0)``: normal samples rounded once to ``dtype``."""
    return randn


@pytest.fixture(params=["fused", "numpy"])
def kernel_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test on both kernel paths: numba's fused loops and the numpy reference (PACKRT_NUMBA=0)."""
    with settings.override(numba=request.param == "fused"):
        yield str(request.param)


@pytest.fixture
def use_settings() -> Iterator[Callable[..., settings.Settings]]:
    """``use_settings(numba=False, ...)``: the kernels' settings changed from then on, put back when the
    test ends (as ``monkeypatch`` puts back what it changed)."""
    with contextlib.ExitStack() as stack:
        yield lambda **changes: stack.enter_context(settings.override(**changes))


def _mkl_expected() -> bool:
    """MKL must load where its wheel is installed on x86-64 (the CI kernels session installs it)."""
    try:
        importlib.metadata.distribution("mkl")
    except importlib.metadata.PackageNotFoundError:
        return False
    return platform.machine().lower() in ("x86_64", "amd64")


@pytest.fixture(params=["mkl", "numpy"])
def blas_road(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test on both GEMM roads (PACKRT_BLAS=mkl and =numpy), each decided afresh."""
    if request.param == "mkl" and not _mkl_expected():
        pytest.skip("the mkl wheel is not installed here (pip install packrt-kernels-cpu[mkl])")
    with settings.override(blas=request.param):
        assert blas.provider() == request.param
        yield str(request.param)


@pytest.fixture(params=["banded", "threads"])
def conv_layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """conv2d on each of its banded roads as well as the whole-batch one: "banded": one
    thread, a band is one output row (one tile row for Winograd), so every image has several;
    "threads": two threads sharing out the (image, band) tiles."""
    backend = CpuBackend()
    if request.param == "banded":
        monkeypatch.setattr(columns, "_BAND_BYTES", 1)
        monkeypatch.setattr(winograd, "_BAND_BYTES", 1)
        backend.set_num_threads(1)
    else:
        backend.set_num_threads(2)
    yield str(request.param)
    backend.set_num_threads(os.cpu_count() or 1)
