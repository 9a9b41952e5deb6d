"""The suite's command run as an implementer runs it: ``python -m packrt_conformance.cli`` in a child
process, output captured as text, its exit status returned (never raised)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

# A whole suite run on a loaded 2-core machine stays well inside this.
TIMEOUT_S = 600


def run_cli(*args: str, cwd: Path, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``packrt-conformance *args`` from ``cwd`` (``env``: the child's whole environment; None keeps this one)."""
    return subprocess.run(
        [sys.executable, "-m", "packrt_conformance.cli", *args],
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
