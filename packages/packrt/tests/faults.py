"""Fault injection for the load tests: the steps of a load, named once per owner; the fault raised at one of
them; and what a failed load must leave as it was on disk.

A step is an attribute of a module or class (``owner``) that a load calls; replacing it by a function that
raises proves that a failure there changes nothing the caller can see.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest


class Stop(BaseException):
    """Raised by an injected fault: a BaseException, as KeyboardInterrupt is (which pytest would act on)."""


def steps(by_owner: Mapping[Any, tuple[str, ...]]) -> list[tuple[Any, str]]:
    """(owner, name) for every name listed under its owner."""
    return [(owner, name) for owner, names in by_owner.items() for name in names]


def fail_at(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[str]:
    """``owner.name`` replaced by a step that raises ``Stop(f"{name} failed")``; returns the list each call of it
    appends ``name`` to."""
    called: list[str] = []

    def fail(*args: Any, **kwargs: Any) -> Any:
        called.append(name)
        raise Stop(f"{name} failed")

    monkeypatch.setattr(owner, name, fail)
    return called


def files_of(directory: Path) -> dict[str, tuple[bytes, int, int]]:
    """Each file of ``directory`` by name: its bytes, modification time and inode."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in sorted(directory.iterdir())}
