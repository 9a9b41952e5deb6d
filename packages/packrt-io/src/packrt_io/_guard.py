"""Mapped files that are checked before a model serves from them.

A borrowed model's weights are views of the checkpoint's pages. If the file is truncated while
mapped, reading a vanished page kills the process with SIGBUS; if it is rewritten in place (``cp``
over it), the weights silently become the new bytes. :class:`MappedFile` keeps the file open for
as long as its mapping is in use and remembers what the file was at load (inode, size,
modification time); :class:`FileGuard` checks every file a model maps once per call of the model (one
``fstat`` each) and raises a CheckpointError naming the file and what changed.

The race itself, a truncation landing *during* a forward after the check, is closed by a read lease
where the kernel grants one (:mod:`packrt_io._lease`): the writer waits until the calls in flight
have left, and every later call is refused. Where it does not, the race remains; replace checkpoints
by writing a new file and renaming it over the old one (what ``save_checkpoint`` does): the mapped
inode then stays whole and unchanged, and renaming breaks no lease.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from typing import Any

from packrt_core.errors import CheckpointError
from packrt_io import _lease
from packrt_io._fs import identity


def _change_time(fd: int) -> int | None:
    """The file's change time (ns) while a name links to it, else None."""
    info = os.fstat(fd)
    return info.st_ctime_ns if info.st_nlink > 0 else None


class MappedFile:
    """An open descriptor of a mapped checkpoint file and its identity at load time."""

    __slots__ = ("__weakref__", "broken", "changed", "fd", "identity", "lease", "path")

    def __init__(self, path: str, fd: int, identity: tuple[int, ...]) -> None:
        self.path, self.fd, self.identity = path, fd, identity
        self.changed = _change_time(fd)
        self.broken = False  # a writer opened or truncated the file: its lease was broken
        # "held", or why the file has no lease (then only the per-call identity check guards it)
        self.lease = _lease.take(fd)
        weakref.finalize(self, os.close, fd)  # closed with the last reference to the guard
        if self.lease == _lease.HELD:
            _lease.watch(self)

    def on_break(self) -> None:
        """A writer is opening or truncating the file (the lease watcher saw the break): refuse every later call."""
        self.broken = True

    def check(self) -> None:
        """CheckpointError when the mapped file is no longer what was loaded: its identity (device, inode, size,
        modification time) differs, or, while a name still links to it, its change time moved (a same-size
        rewrite that put the old modification time back; a chmod or a new hard link moves it too: load again
        after one). A file renamed over, no longer linked, keeps serving the pages loaded: unlinking it moves
        its change time and changes nothing else."""
        now = identity(self.fd)
        same = now == self.identity
        changed = _change_time(self.fd) if same else None
        rewritten = same and changed is not None and changed != self.changed
        unbroken = not self.broken and (self.lease != _lease.HELD or not _lease.breaking(self.fd))
        if same and not rewritten and unbroken:
            return
        size_then, size_now = self.identity[2], now[2]
        if same and not rewritten:  # unchanged so far, but a writer broke the lease: it waits for us
            change = (
                "another process opened it for writing or truncated it (it waits until the calls in flight end; "
                "reading the file's pages after that could end this process)"
            )
        elif size_now < size_then:
            change = f"it shrank from {size_then} to {size_now} bytes (reading its weights now would end the process)"
        elif size_now != size_then:
            change = f"its size changed from {size_then} to {size_now} bytes"
        else:
            change = "it was modified in place since it was loaded"
        raise CheckpointError(
            f"checkpoint {self.path!r}: the memory-mapped file the model serves from changed: {change}. Its "
            "weights are no longer the ones loaded; load the model again once the file is complete, and replace "
            "checkpoints by writing a new file and renaming it over the old one"
        )


class FileGuard:
    """A forward pre-hook checking the files in ``files`` before each call of the module it is on.

    One guard stays registered on a module across loads; a load replaces ``files`` (one attribute
    store, which cannot fail) as the last step of its commit, so a load that fails leaves the guard,
    and the hooks of the module, as they were.
    """

    __slots__ = ("files",)

    def __init__(self, files: Sequence[MappedFile] = ()) -> None:
        self.files: tuple[MappedFile, ...] = tuple(files)

    def __call__(self, module: Any, args: Any) -> None:
        for mapped in self.files:
            mapped.check()
