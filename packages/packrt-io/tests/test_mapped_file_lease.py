"""A writer of a mapped checkpoint waits for the calls reading it, and every call after it is refused.

Where the kernel grants a read lease (Linux, the file's owner, a local file system), another process's
``truncate`` or open-for-writing of a file a borrowed model serves from is held until the calls in
flight have left, so none of them reads a vanished page (SIGBUS); the writer then goes on within a
poll, not after the kernel's 45 s, and every later call raises a CheckpointError naming the file.
Where no lease is granted, the per-call identity check still refuses the calls after the change.
"""

from __future__ import annotations

import fcntl
import gc
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import packrt_core as prt
import packrt_io
from packrt_core import nn
from packrt_core.errors import CheckpointError
from packrt_io import _lease

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="read leases are a Linux feature")
WRITER_S = 10  # a writer must be through well before the kernel's own lease-break-time (45 s by default)


def _served(tmp_path: Path) -> tuple[nn.Module, Path]:
    prt.manual_seed(5)
    path = tmp_path / "model.safetensors"
    packrt_io.save_checkpoint(nn.Sequential(nn.Linear(16, 16)), path)
    with prt.meta_init():
        model = nn.Sequential(nn.Linear(16, 16))
    packrt_io.load_checkpoint(model, path, weight_residency="borrowed")
    (mapped,) = packrt_io.mapped_files(model)
    if mapped.lease != _lease.HELD:
        pytest.skip(f"this file system grants no lease here: {mapped.lease}")
    return model, path


def _writer(path: Path, action: str) -> subprocess.Popen[bytes]:
    """Another process doing ``action`` to ``path``: 'truncate' (to 10 bytes) or 'open' (for writing, no write)."""
    code = {
        "truncate": f"import os; os.truncate({str(path)!r}, 10)",
        "open": f"import os; os.close(os.open({str(path)!r}, os.O_WRONLY))",
    }[action]
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.fixture
def call_in_flight(tmp_path: Path) -> Iterator[tuple[nn.Module, Path, threading.Event, dict[str, np.ndarray]]]:
    """A borrowed model with one call parked inside its forward until the event is set (its output lands in
    the dict under 'y')."""
    model, path = _served(tmp_path)
    expected = model(prt.ones(2, 16)).numpy()
    release, inside = threading.Event(), threading.Event()

    def park(module: nn.Module, args: object) -> None:
        inside.set()
        release.wait(WRITER_S * 3)

    handle = model[0].register_forward_pre_hook(park)
    results: dict[str, np.ndarray] = {"expected": expected}
    caller = threading.Thread(target=lambda: results.setdefault("y", model(prt.ones(2, 16)).numpy()))
    caller.start()
    assert inside.wait(WRITER_S)
    yield model, path, release, results
    release.set()
    caller.join(WRITER_S)
    handle.remove()


def test_a_truncation_waits_until_the_call_in_flight_has_finished_on_whole_pages(
    call_in_flight: tuple[nn.Module, Path, threading.Event, dict[str, np.ndarray]],
) -> None:
    model, path, release, results = call_in_flight
    size = path.stat().st_size
    writer = _writer(path, "truncate")
    time.sleep(0.5)  # ample time for the writer to reach its truncate
    assert writer.poll() is None and path.stat().st_size == size  # held by the lease while the call reads
    release.set()
    assert writer.wait(WRITER_S) == 0
    assert path.stat().st_size == 10
    for _ in range(100):
        if "y" in results:
            break
        time.sleep(0.05)
    np.testing.assert_array_equal(results["y"], results["expected"])  # the call read the weights loaded
    with pytest.raises(CheckpointError, match=r"model\.safetensors': the memory-mapped file .* shrank from \d+ to 10"):
        model(prt.ones(2, 16))


def test_with_no_call_in_flight_the_writer_goes_on_within_a_poll_and_the_next_call_is_refused(
    tmp_path: Path,
) -> None:
    model, path = _served(tmp_path)
    started = time.monotonic()
    assert _writer(path, "open").wait(WRITER_S) == 0
    assert time.monotonic() - started < WRITER_S  # not the kernel's lease-break-time
    # nothing was written, so only the lease saw it: the call is refused all the same
    with pytest.raises(CheckpointError, match=r"another process opened it for writing or truncated it"):
        model(prt.ones(2, 16))
    with pytest.raises(CheckpointError, match=r"another process opened it for writing"):
        packrt_io.mapped_files(model)[0].check()  # what a server's health check asks


def test_a_lease_asks_for_no_signal_so_its_break_cannot_end_the_process(tmp_path: Path) -> None:
    model, _ = _served(tmp_path)
    (mapped,) = packrt_io.mapped_files(model)
    assert fcntl.fcntl(mapped.fd, fcntl.F_GETOWN) == 0  # SIGIO's default action would end the process
    assert fcntl.fcntl(mapped.fd, fcntl.F_GETLEASE) == fcntl.F_RDLCK


def test_a_dropped_model_closes_its_file_at_once_though_the_watcher_has_looked_at_it(tmp_path: Path) -> None:
    # The watcher sleeps between looks: holding the files it looked at across that sleep kept a dropped
    # model's descriptor and mapping open for a poll more (a failed load "holding nothing open" flaked on it).
    model, path = _served(tmp_path)
    time.sleep(5 * _lease.WATCH_S)  # the watcher has looked at the file, and sleeps again
    assert _watcher_running()
    del model
    gc.collect()
    assert _opened(path) == [], f"the watcher kept {path} open after its model was dropped"


def _watcher_running() -> bool:
    return any(thread.name == "packrt-io-leases" for thread in threading.enumerate())


def _opened(path: Path) -> list[str]:
    """This process's descriptors and mappings of ``path``."""
    fds = [os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")]
    with open("/proc/self/maps") as maps:
        mapped = [line.split()[-1] for line in maps if len(line.split()) >= 6]
    return [name for name in fds + mapped if name == str(path.resolve())]


def test_a_renamed_over_file_breaks_no_lease_and_keeps_serving(tmp_path: Path) -> None:
    model, path = _served(tmp_path)
    expected = model(prt.ones(2, 16)).numpy()
    replacement = packrt_io.save_checkpoint(nn.Sequential(nn.Linear(16, 16)), tmp_path / "new.safetensors")
    replacement.replace(path)
    time.sleep(3 * _lease.WATCH_S)
    np.testing.assert_array_equal(model(prt.ones(2, 16)).numpy(), expected)


def test_without_a_lease_the_file_is_still_checked_before_every_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_lease, "take", lambda fd: "no read lease (Permission denied): another user's file")
    prt.manual_seed(5)
    path = packrt_io.save_checkpoint(nn.Sequential(nn.Linear(16, 16)), tmp_path / "model.safetensors")
    with prt.meta_init():
        model = nn.Sequential(nn.Linear(16, 16))
    packrt_io.load_checkpoint(model, path, weight_residency="borrowed")
    (mapped,) = packrt_io.mapped_files(model)
    assert mapped.lease.startswith("no read lease (Permission denied)")  # why, kept for the caller to read
    model(prt.ones(2, 16))
    assert _writer(path, "truncate").wait(WRITER_S) == 0  # nothing holds the writer
    with pytest.raises(CheckpointError, match=r"shrank from \d+ to 10 bytes"):
        model(prt.ones(2, 16))
