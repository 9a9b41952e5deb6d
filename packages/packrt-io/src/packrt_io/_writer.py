"""Saving numpy arrays as a safetensors file, atomically.

The bytes are written by the safetensors library (``serialize_file``, from the arrays' own memory:
nothing is copied but a strided or big-endian array, which is made C-ordered little-endian first).
packrt adds what the library leaves out: the checks that name the tensor or metadata entry at fault
(a reserved name, a dtype the format cannot hold bit-exactly, a string UTF-8 cannot encode), and
durability. The file appears at its path only complete: the library writes it to a temporary file in
the same directory, which packrt fsyncs and renames over the target, then fsyncs the directory. A
writer killed at any point leaves the previous file at ``path`` untouched (and at worst a stray
``.<name>.*.tmp`` file beside it, or the library's own ``.tmp*`` one while it was writing).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import safetensors

from packrt_core.errors import CheckpointError, DTypeError, PackrtError
from packrt_io import _fs, _json
from packrt_io._dtypes import SUPPORTED_NAMES, FileDType, for_array_dtype
from packrt_io._header import METADATA_KEY

# Called with (temporary path, final path) after the temporary file is complete and fsynced and just
# before it is renamed over the final path. Tests set it to stop a writer at that exact moment.
before_replace: Callable[[Path, Path], None] | None = None


def _prepare(key: object, array: np.ndarray[Any, Any]) -> tuple[FileDType, np.ndarray[Any, Any]]:
    if not isinstance(key, str):
        raise CheckpointError(f"tensor keys must be strings, found {type(key).__name__} {key!r}")
    if key == METADATA_KEY:
        raise CheckpointError(f"{METADATA_KEY!r} is reserved for metadata and cannot name a tensor")
    file_dtype = for_array_dtype(array.dtype)
    if file_dtype is None:
        raise DTypeError(
            f"tensor {key!r} has dtype {array.dtype} which safetensors cannot store bit-exactly "
            f"(savable: {', '.join(SUPPORTED_NAMES)}); cast it to one of those first"
        )
    if array.dtype.byteorder == ">":
        array = array.byteswap().view(array.dtype.newbyteorder("<"))
    # Views with strides (a transpose, a slice) are written in C order; contiguous arrays are not copied.
    # (np.ascontiguousarray is avoided: it turns a 0-d array into shape (1,).)
    return file_dtype, array if array.flags.c_contiguous else array.copy(order="C")


def _check_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise CheckpointError(f"metadata must be a mapping of str -> str, found {type(metadata).__name__}")
    for name, value in metadata.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise CheckpointError(
                f"metadata entry {name!r}: {value!r} is not str -> str; safetensors metadata holds "
                "strings only (serialize other values, e.g. with json.dumps)"
            )
    return dict(metadata)


def _checked_text(arrays: Mapping[str, Any], metadata: Mapping[str, str]) -> None:
    """A CheckpointError naming a tensor name or metadata string that holds a lone surrogate (the library
    would raise a bare UnicodeEncodeError)."""
    found = _json.first_lone_surrogate({**{key: "" for key in arrays}, METADATA_KEY: dict(metadata)})
    if found is None:
        return
    shown = found.encode("utf-8", "backslashreplace").decode("ascii")
    raise CheckpointError(
        f"tensor name or metadata {shown!r} holds a lone surrogate, which is not valid UTF-8: safetensors "
        "headers are UTF-8 text; fix the string (it often comes from decoding bytes with "
        "errors='surrogateescape')"
    )


def specs(arrays: Mapping[str, np.ndarray[Any, Any]]) -> tuple[dict[str, Any], list[np.ndarray[Any, Any]]]:
    """The library's ``TensorSpec`` for each array (checked), and the arrays they point into: the caller
    keeps that list alive until the library has written the file."""
    described: dict[str, Any] = {}
    held: list[np.ndarray[Any, Any]] = []
    for key, array in arrays.items():
        file_dtype, ready = _prepare(key, array)
        held.append(ready)
        described[key] = safetensors.TensorSpec(
            dtype=file_dtype.numpy.name, shape=list(ready.shape), data_ptr=ready.ctypes.data, data_len=ready.nbytes
        )
    return described, held


def _temporary_beside(target: Path) -> Path:
    return target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _publish(temporary: Path, target: Path, write: Callable[[], None]) -> None:
    """Run ``write`` (which fills ``temporary`` and fsyncs it), then rename ``temporary`` over ``target`` and
    fsync the directory; on any failure remove ``temporary``, leaving ``target`` as it was. A file-system
    error is a CheckpointWriteError naming ``target``."""
    try:
        write()
        if before_replace is not None:
            before_replace(temporary, target)
        _fs.replace(temporary, target)
    except BaseException as err:
        with contextlib.suppress(OSError):
            _fs.remove(temporary)
        if isinstance(err, OSError) and not isinstance(err, PackrtError):
            _fs.write_failure(target, err, "writing it")
        raise
    _fs.sync_directory(target.parent)


def write_atomically(target: Path, pieces: Iterable[memoryview | bytes], mode: int | None) -> None:
    """Write ``pieces`` to ``target`` through a temporary file beside it, fsynced and renamed into place.

    ``mode`` sets the file's permission bits (None: the umask decides). Any file-system error is a
    CheckpointWriteError naming ``target``; whatever was at ``target`` before is then unchanged.
    """
    temporary = _temporary_beside(target)
    try:
        fd = _fs.create_exclusive(temporary, mode)
    except (OSError, ValueError) as err:
        _fs.write_failure(target, err, "creating a temporary file beside it")

    def write() -> None:
        try:
            for piece in pieces:
                _fs.write_all(fd, piece)
        except BaseException:
            os.close(fd)
            raise
        _fs.sync_and_close(fd)

    _publish(temporary, target, write)


def save_arrays(
    arrays: Mapping[str, np.ndarray[Any, Any]],
    path: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
    *,
    mode: int | None = None,
) -> None:
    """Write ``arrays`` (and str -> str ``metadata``) to ``path`` as safetensors, atomically.

    Either the whole new file is at ``path`` afterwards or, if this call fails or the process dies,
    whatever was there before still is. Every dtype in the load table is written bit-exactly. A file
    that is replaced keeps its permission bits; ``mode`` sets them for a new one (default: the umask).
    A file-system failure (a full disk, say) is a CheckpointWriteError naming ``path``.
    """
    target = Path(_fs.path_text(path))
    checked_metadata = _check_metadata(metadata)
    tensors, _alive = specs(arrays)  # _alive: the arrays the specs point into, kept until the file is written
    _checked_text(arrays, checked_metadata)
    kept = _fs.existing_mode(target)
    temporary = _temporary_beside(target)
    try:
        # Created here (never an existing file) to claim the name and learn the mode a new file gets;
        # the library then writes its file and renames it over this one.
        fd = _fs.create_exclusive(temporary, kept if kept is not None else mode)
        try:
            chosen = _fs.file_mode(fd)
        finally:
            _fs.close(fd)
    except (OSError, ValueError) as err:
        _fs.write_failure(target, err, "creating a temporary file beside it")

    def write() -> None:
        _fs.serialize(temporary, tensors, checked_metadata)
        _fs.sync_file(temporary, chosen)

    _publish(temporary, target, write)


__all__ = ["before_replace", "save_arrays", "specs", "write_atomically"]
