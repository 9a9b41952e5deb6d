"""Fault injection for the load tests: the steps of a load, named once per owner; the fault raised at one of
them; and what a failed load must leave as it was on disk. And a truncation of a mapped checkpoint by
another process, landing inside a chosen call of a model.

A step is an attribute of a module or class (``owner``) that a load calls; replacing it by a function that
raises proves that a failure there changes nothing the caller can see.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import packrt
from packrt.errors import CheckpointError


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


def skip_unless_leased(model: Any) -> None:
    """Skip where the kernel granted no read lease on the files ``model`` maps (a file system without leases)."""
    leases = [mapped.lease for mapped in packrt.io.mapped_files(model)]
    if not leases or any(lease != "held" for lease in leases):
        pytest.skip(f"no read lease on this file system: {leases}")


def truncate_from_another_process_during(
    model: Any, hooked: Any, file: Path, at_call: int
) -> list[subprocess.Popen[bytes]]:
    """A forward pre-hook on ``hooked`` (``model`` or one of its modules) that, at its ``at_call``-th call,
    starts another process truncating ``file`` and returns only once ``model``'s files refuse calls (the
    writer is then held by the lease until this call ends). The started writer is appended to the list."""
    writers: list[subprocess.Popen[bytes]] = []
    calls = itertools.count(1)

    def truncate_now(module: Any, args: Any) -> None:
        if next(calls) != at_call:
            return
        code = f"import os; os.truncate({str(file)!r}, 100)"
        writers.append(subprocess.Popen([sys.executable, "-c", code]))
        until = time.monotonic() + 30
        while time.monotonic() < until:
            try:
                for mapped in packrt.io.mapped_files(model):
                    mapped.check()
            except CheckpointError:
                return  # the break is seen: this call goes on reading whole pages, the writer waits for it
            time.sleep(0.01)
        raise AssertionError("the writer's truncate never reached the lease")

    hooked.register_forward_pre_hook(truncate_now)
    return writers
