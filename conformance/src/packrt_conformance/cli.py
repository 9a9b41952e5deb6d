"""``packrt-conformance``: run the installed suite; every argument goes to pytest.

Example: ``packrt-conformance --impl torch --expectations torch.txt --report-json out.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

__all__ = ["main", "suite_dir"]


def suite_dir() -> Path:
    """The directory of the shipped suite tests."""
    return Path(__file__).parent / "suite"


def main(argv: list[str] | None = None) -> int:
    """Run pytest over the shipped suite with the conformance plugin loaded; return its exit code."""
    args = sys.argv[1:] if argv is None else argv
    return int(pytest.main(["-p", "packrt_conformance.plugin", "-p", "no:cacheprovider", str(suite_dir()), *args]))


if __name__ == "__main__":
    raise SystemExit(main())
