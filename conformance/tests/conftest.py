"""Shared fixtures for the suite's own tests."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

# --import-mode=importlib puts no test folder on sys.path: the helpers beside this file (cli_run.py) are
# importable through this line.
_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    # mutants_families.py reads the suite's signature table, whose cases carry the suite's clause mark.
    config.addinivalue_line("markers", "clause(*ids): the contract clauses a suite test checks")


def _require(module: str, flag: str, why: str) -> None:
    """Skip when ``module`` does not import, unless ``flag``=1 in the environment makes that a failure."""
    try:
        importlib.import_module(module)
    except ImportError:
        if os.environ.get(flag) == "1":
            pytest.fail(f"{module} is required ({flag}=1) but cannot be imported")
        pytest.skip(why)


@pytest.fixture(scope="module")
def require_packrt() -> None:
    """Skip when packrt is missing, unless PACKRT_REQUIRE_PACKRT=1 makes its absence a failure."""
    _require("packrt", "PACKRT_REQUIRE_PACKRT", "packrt is not installed: the mutants wrap its adapter")


@pytest.fixture(scope="module")
def require_torch() -> None:
    """Skip when torch is missing, unless PACKRT_REQUIRE_TORCH=1 makes its absence a failure."""
    _require("torch", "PACKRT_REQUIRE_TORCH", "torch is not installed")
