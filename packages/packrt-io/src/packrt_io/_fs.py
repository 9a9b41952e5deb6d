"""Every file-system call packrt-io makes, with the errors turned into packrt errors naming the path.

Reading: :func:`open_for_reading` refuses what is not a regular file (a directory, a FIFO, a device)
*before* opening it, so a load never blocks on a pipe or reads a device, and turns the errors a bad
path gives (no such file, permission, a name too long, a NUL byte) into a ``CheckpointError`` naming
the path. :func:`kind_of` does the same for the checks that decide what a checkpoint path is.

Writing: the steps of a durable save (create a temporary file, write, fsync, rename over the target,
fsync the directory, remove an old file) are the functions below and nothing else; a safetensors file's
bytes are written by the safetensors library (:func:`serialize`), the rest by ``os`` calls here. A failure in any of
them is a :class:`CheckpointWriteError` (a ``CheckpointError`` that is also an ``OSError``, with its
``errno``) naming the path. Tests replace this module's ``os`` to stop a save at each step.
"""

from __future__ import annotations

import contextlib
import errno as _errno
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, NoReturn

import safetensors

from packrt_core.errors import CheckpointError

PathLike = str | os.PathLike[str]
Kind = Literal["file", "directory", "missing", "other"]
_CHUNK = 64 << 20  # write large tensors in pieces so no single write call holds gigabytes


class CheckpointWriteError(CheckpointError, OSError):
    """A save failed in the file system (full disk, permissions, ...): a CheckpointError and an OSError."""

    def __init__(self, message: str, code: int | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.errno = code
        self.strerror = os.strerror(code) if code is not None else None
        self.filename = path

    def __str__(self) -> str:  # OSError's own form ("[Errno 28] ...") would hide the message
        return str(self.args[0]) if self.args else ""


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError):
        return err.strerror or str(err)
    return str(err)


def path_text(path: PathLike) -> str:
    try:
        return os.fspath(path)
    except TypeError as err:
        raise CheckpointError(f"checkpoint path {path!r} is not a path: pass a str or os.PathLike") from err


def _read_failure(where: str, err: BaseException, what: str) -> NoReturn:
    if isinstance(err, ValueError):  # os functions refuse an embedded NUL byte with ValueError
        problem, fix = "the path contains a NUL byte, which no file name can hold", "remove the NUL byte"
    elif isinstance(err, OSError) and err.errno == _errno.ENAMETOOLONG:
        problem, fix = "the name is too long for the file system", "shorten the path"
    else:
        problem, fix = f"cannot be opened ({_reason(err)})", "check the path and its permissions"
    raise CheckpointError(f"{what} {where!r}: {problem}; {fix}") from err


def kind_of(path: PathLike, what: str = "checkpoint") -> Kind:
    """Whether ``path`` is a regular file, a directory, missing, or something else (follows links)."""
    where = path_text(path)
    try:
        mode = os.stat(where).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except (OSError, ValueError) as err:
        _read_failure(where, err, what)
    if stat.S_ISREG(mode):
        return "file"
    return "directory" if stat.S_ISDIR(mode) else "other"


def _not_regular(where: str, mode: int, what: str) -> NoReturn:
    if stat.S_ISDIR(mode):
        found = "a directory"
    elif stat.S_ISFIFO(mode):
        found = "a FIFO (named pipe)"
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        found = "a device"
    elif stat.S_ISSOCK(mode):
        found = "a socket"
    else:
        found = "not a regular file"
    raise CheckpointError(
        f"{what} {where!r}: is {found}, expected a regular file; pass the checkpoint file (or its directory "
        "to load_checkpoint)"
    )


def open_for_reading(path: PathLike, what: str = "checkpoint") -> tuple[str, int]:
    """The path as a string and a read-only descriptor of the regular file there, else a CheckpointError."""
    where = path_text(path)
    try:
        mode = os.stat(where).st_mode
    except (OSError, ValueError) as err:
        _read_failure(where, err, what)
    if not stat.S_ISREG(mode):
        _not_regular(where, mode, what)
    try:
        # O_NONBLOCK: should the path become a FIFO after the check, opening it still returns at once.
        fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as err:
        _read_failure(where, err, what)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            _not_regular(where, mode, what)
    except BaseException:
        os.close(fd)
        raise
    return where, fd


def identity(fd: int) -> tuple[int, ...]:
    """What tells one file from another at the same path: device, inode, size, modification time (ns).
    A header read is reused, and a mapped file keeps serving, only while the file is still this one."""
    info = os.fstat(fd)
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def read_all(path: PathLike, what: str) -> tuple[str, bytes]:
    """The whole content of the regular file at ``path`` (an index), or a CheckpointError naming it."""
    where, fd = open_for_reading(path, what)
    try:
        size = os.fstat(fd).st_size
        parts, done = [], 0
        while True:
            piece = os.read(fd, max(size - done, 0) + 1)
            if not piece:
                break
            parts.append(piece)
            done += len(piece)
    except OSError as err:
        _read_failure(where, err, what)
    finally:
        os.close(fd)
    return where, b"".join(parts)


# -- writing -----------------------------------------------------------------------------------------


def write_failure(path: Path, err: BaseException, doing: str, fix: str | None = None) -> NoReturn:
    """Raise the CheckpointWriteError for ``err`` met while ``doing`` something for ``path``."""
    code = err.errno if isinstance(err, OSError) else None
    if fix is not None:
        pass
    elif code == _errno.ENOSPC or code == getattr(_errno, "EDQUOT", -1):
        fix = "free space on that file system (or save elsewhere); the previous checkpoint there is unchanged"
    elif isinstance(err, ValueError) or code == _errno.ENAMETOOLONG:
        fix = "use a shorter path without NUL bytes"
    else:
        fix = "check that the directory exists and is writable; the previous checkpoint there is unchanged"
    raise CheckpointWriteError(
        f"saving checkpoint {str(path)!r} failed while {doing} ({_reason(err)}); {fix}", code, str(path)
    ) from err


def existing_mode(path: Path) -> int | None:
    """The permission bits of the regular file at ``path``, or None when there is none to keep."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None


def create_exclusive(path: Path, mode: int | None) -> int:
    """A new file at ``path`` (never an existing one) for writing; ``mode`` set exactly when given."""
    # 0o666 lets the umask decide for a file that replaces nothing, as for any ordinary new file.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    if mode is not None:
        try:
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            raise
    return fd


def write_all(fd: int, data: memoryview | bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (short writes are continued)."""
    view = memoryview(data).cast("B")
    for start in range(0, len(view), _CHUNK):
        piece = view[start : start + _CHUNK]
        while piece:
            piece = piece[os.write(fd, piece) :]


_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def serialize(path: Path, tensors: Mapping[str, Any], metadata: Mapping[str, str] | None) -> None:
    """The safetensors library writes ``tensors`` (its ``TensorSpec`` each) and ``metadata`` as the file ``path``.

    The library writes a temporary file of its own beside ``path`` (mode 0600) and renames it there,
    without an fsync: the caller fsyncs and sets the mode (:func:`sync_file`). A failure in the file
    system is an OSError with the errno the library's message gives (it carries no errno attribute).
    """
    try:
        safetensors.serialize_file(dict(tensors), path, dict(metadata) if metadata else None)
    except safetensors.SafetensorError as err:
        found = _OS_ERROR.search(str(err))
        if found is None:
            raise CheckpointError(f"the safetensors library could not write {str(path)!r}: {err}") from err
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from err


def sync_file(path: Path, mode: int) -> None:
    """Give the complete file at ``path`` the permission bits ``mode`` and fsync it (before any rename)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    sync_and_close(fd)


def file_mode(fd: int) -> int:
    """The permission bits of the open file ``fd``."""
    return stat.S_IMODE(os.fstat(fd).st_mode)


def close(fd: int) -> None:
    """Close ``fd``."""
    os.close(fd)


def sync_and_close(fd: int) -> None:
    """fsync ``fd`` (the data is on disk before any rename makes it visible), then close it."""
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(source: Path, target: Path) -> None:
    """Rename ``source`` over ``target`` in one atomic step."""
    os.replace(source, target)


def remove(path: Path) -> None:
    """Remove the file at ``path`` if it is there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def sync_directory(directory: Path) -> None:
    """Make renames and removals in ``directory`` durable (where the file system allows a directory fsync)."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


__all__ = [
    "CheckpointWriteError",
    "Kind",
    "PathLike",
    "close",
    "create_exclusive",
    "existing_mode",
    "file_mode",
    "identity",
    "kind_of",
    "open_for_reading",
    "path_text",
    "read_all",
    "remove",
    "replace",
    "serialize",
    "sync_and_close",
    "sync_directory",
    "sync_file",
    "write_all",
    "write_failure",
]
