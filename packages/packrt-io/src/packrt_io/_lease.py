"""Read leases on mapped checkpoint files: a writer waits until no call is reading the pages.

A process that truncates a mapped file, or opens it for writing, takes the pages from under the
mapping: a call reading them then dies of SIGBUS, which no Python code can catch. Linux lets the
holder of a *read lease* (``fcntl(F_SETLEASE, F_RDLCK)``) hear of such an open before it happens: the
kernel holds the writer's ``open``/``truncate`` until the holder gives the lease up, or until
``/proc/sys/fs/lease-break-time`` (45 s by default) has passed.

packrt takes one on every file it maps and asks for no signal (a lease break would otherwise send
SIGIO, whose default action ends the process). It learns of a break by looking: each check of the
file before a call asks ``F_GETLEASE``, and one watcher thread looks every :data:`WATCH_S` seconds.
When a break is pending the file is marked broken (every later call of a model serving from it
raises ``CheckpointError``), the watcher waits until the calls in flight have left (a publication:
they started before the break and read whole pages), and then gives the lease up, so the writer goes
on within a poll of the last call ending rather than after the kernel's timeout.

Where no lease can be had (another user's file without ``CAP_LEASE``, a file open for writing
somewhere, a file system without leases such as NFS or most FUSE mounts, a platform other than
Linux) the file is served as before, with the per-call identity check only: a truncation that lands
during a call can still end the process there. :func:`take` says why, and ``MappedFile.lease``
keeps it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import weakref
from typing import Protocol

from packrt_core.publication import publishing

try:
    import fcntl
except ImportError:  # Windows: no leases; the per-call identity check alone guards a mapped file
    fcntl = None  # type: ignore[assignment]

WATCH_S = 0.05  # how often the watcher looks for pending breaks: a writer waits at most this past the last call

_F_SETLEASE = getattr(fcntl, "F_SETLEASE", None)  # Linux only
_F_GETLEASE = getattr(fcntl, "F_GETLEASE", None)
_F_SETSIG = getattr(fcntl, "F_SETSIG", None)
HELD = "held"


def take(fd: int) -> str:
    """Take a read lease on ``fd`` (opened read-only) with no signal on a break: :data:`HELD`, or why not."""
    if _F_SETLEASE is None or _F_SETSIG is None:
        return "no leases on this platform (Linux only)"
    try:
        # The kernel points a lease's break signal at the process taking it (SIGIO by default, which would end
        # it): SIGURG, ignored unless a handler is set, covers the moment until F_SETOWN 0 asks for no signal.
        fcntl.fcntl(fd, _F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_RDLCK)
    except OSError as err:
        reason = os.strerror(err.errno) if err.errno else str(err)
        return (
            f"no read lease ({reason}): another user's file, a file open for writing, or a file system without leases"
        )
    try:
        fcntl.fcntl(fd, fcntl.F_SETOWN, 0)
    except OSError as err:  # a lease whose break would signal us: not one to keep
        give_up(fd)
        return f"no read lease (its break signal could not be turned off: {err})"
    return HELD


def breaking(fd: int) -> bool:
    """Whether the lease taken on ``fd`` is being broken (a writer waits) or is gone (the kernel revoked it)."""
    assert _F_GETLEASE is not None
    try:
        return fcntl.fcntl(fd, _F_GETLEASE) != fcntl.F_RDLCK
    except OSError:  # the descriptor is gone: the file is no longer served
        return True


def give_up(fd: int) -> None:
    """Release the lease on ``fd``: a writer held by its break goes on."""
    assert _F_SETLEASE is not None
    with contextlib.suppress(OSError):  # already revoked by the kernel, or the descriptor closed
        fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_UNLCK)


class Watched(Protocol):
    """What the watcher needs of a leased file: its descriptor and what to do when a break is seen."""

    @property
    def fd(self) -> int: ...

    def on_break(self) -> None: ...


_watched: weakref.WeakSet[Watched] = weakref.WeakSet()
_lock = threading.Lock()
_watcher: list[threading.Thread] = []  # the running watcher, if any
# A forked child has no watcher thread (only the forking thread survives a fork) but the same files and
# leases (a lease belongs to the open file, which the child shares): it starts its own at its next watch.
os.register_at_fork(after_in_child=_watcher.clear)


def watch(item: Watched) -> None:
    """Look after ``item``'s lease until its break (or until nothing refers to it any more)."""
    with _lock:
        _watched.add(item)
        if not _watcher:
            thread = threading.Thread(target=_watch, name="packrt-io-leases", daemon=True)
            _watcher.append(thread)
            thread.start()


def settle(item: Watched) -> None:
    """Handle a pending break of ``item`` now: mark it, let the calls in flight leave, give the lease up."""
    with _lock:
        if item not in _watched:
            return  # handled already
        _watched.discard(item)
    item.on_break()
    try:
        with publishing():  # waits out every call in flight: each started before the break, on whole pages
            pass
    finally:  # given up once, after them, even when interrupted while waiting (the writer must not wait
        give_up(item.fd)  # out the kernel's lease-break timeout)


def _watch() -> None:
    try:
        while True:
            time.sleep(WATCH_S)
            if not _look():
                return
    except BaseException:  # the next watch() starts a new watcher
        with _lock:
            _watcher.clear()
        raise


def _look() -> bool:
    """Settle every pending break; False (and the watcher's slot cleared) once nothing is watched.

    A function of its own so that its strong references to the items go when it returns: the watcher
    sleeps holding none, and a model dropped meanwhile closes its file at once, not a poll later.
    """
    with _lock:
        items = list(_watched)
        if not items:
            _watcher.clear()  # under the lock that watch() takes: a file added now starts a new one
            return False
    for item in items:
        if breaking(item.fd):
            settle(item)
    return True
