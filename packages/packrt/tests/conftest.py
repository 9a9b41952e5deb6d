"""Shared fixtures: torch as a comparison peer, required in CI (PACKRT_REQUIRE_TORCH=1)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


@pytest.fixture(scope="session")
def torch() -> ModuleType:
    """torch 2.13 (CPU); skips without it, or fails when PACKRT_REQUIRE_TORCH=1 says it must be there."""
    if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
        return pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    try:
        return importlib.import_module("torch")
    except ImportError as err:
        pytest.fail(f"torch is required here (PACKRT_REQUIRE_TORCH=1) but does not import: {err}")
