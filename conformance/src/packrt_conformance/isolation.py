"""How ``packrt-conformance`` runs pytest: with the suite's own configuration, wherever it is started.

The suite must reach the same verdict in any directory. pytest would otherwise read the ini file,
``addopts``, ``filterwarnings`` and ``conftest.py`` of the directory it starts in (an implementer's
project), so the run names its own ini (``-c``), its own rootdir (the suite directory), loads no
conftest, writes no cache, and ignores ``PYTEST_ADDOPTS`` while it runs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["SUITE_DIR", "SUITE_INI", "isolated_environment", "pytest_args"]

SUITE_DIR = Path(__file__).parent / "suite"
SUITE_INI = SUITE_DIR / "pytest.ini"


def pytest_args() -> list[str]:
    """The arguments that put pytest on the suite's own configuration, ahead of the user's options."""
    return [
        "-c",
        str(SUITE_INI),
        "--rootdir",
        str(SUITE_DIR),
        "--noconftest",
        "-p",
        "no:cacheprovider",
        "-p",
        "packrt_conformance.plugin",
        str(SUITE_DIR),
    ]


@contextlib.contextmanager
def isolated_environment() -> Iterator[None]:
    """``PYTEST_ADDOPTS`` unset for the run (put back afterwards)."""
    saved = os.environ.pop("PYTEST_ADDOPTS", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["PYTEST_ADDOPTS"] = saved
