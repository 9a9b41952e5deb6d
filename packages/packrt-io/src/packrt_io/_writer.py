"""Saving numpy arrays as a safetensors file, atomically.

The bytes written are exactly what the safetensors library writes for the same arrays: the 8-byte
little-endian header length, the compact JSON header (``__metadata__`` first) padded with spaces to a
multiple of 8, then the tensors ordered widest dtype first and by key within a dtype, so every tensor
lands aligned. The file appears at its path only complete: it is written to a temporary file in the
same directory, flushed and fsynced, renamed over the target, and the directory is fsynced. A writer
killed at any point leaves the previous file at ``path`` untouched (and at worst a stray
``.<name>.*.tmp`` file beside it).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from packrt_core.errors import CheckpointError, DTypeError, PackrtError
from packrt_io import _fs, _json
from packrt_io._dtypes import SUPPORTED_NAMES, FileDType, for_array_dtype
from packrt_io._header import METADATA_KEY, PREFIX_BYTES

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


def encode(
    arrays: Mapping[str, np.ndarray[Any, Any]], metadata: Mapping[str, str] | None = None
) -> tuple[bytes, list[np.ndarray[Any, Any]]]:
    """The prefix + padded header bytes for ``arrays``, and the arrays in the order their data follows."""
    checked_metadata = _check_metadata(metadata)
    prepared = [(key, *_prepare(key, array)) for key, array in arrays.items()]
    prepared.sort(key=lambda item: (-item[1].rank, item[0]))
    header: dict[str, Any] = {}
    if checked_metadata:
        # Sorted so the same input always gives the same bytes (the library's own order is a hash order).
        header[METADATA_KEY] = dict(sorted(checked_metadata.items()))
    offset = 0
    for key, file_dtype, array in prepared:
        header[key] = {
            "dtype": file_dtype.name,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    try:
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as err:
        found = _json.first_lone_surrogate(header) or ""
        shown = found.encode("utf-8", "backslashreplace").decode("ascii")
        raise CheckpointError(
            f"tensor name or metadata {shown!r} holds a lone surrogate, which is not valid UTF-8: safetensors "
            "headers are UTF-8 text; fix the string (it often comes from decoding bytes with "
            "errors='surrogateescape')"
        ) from err
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(PREFIX_BYTES, "little") + text, [array for _, _, array in prepared]


def write_atomically(target: Path, pieces: Iterable[memoryview | bytes], mode: int | None) -> None:
    """Write ``pieces`` to ``target`` through a temporary file beside it, fsynced and renamed into place.

    ``mode`` sets the file's permission bits (None: the umask decides). Any file-system error is a
    CheckpointWriteError naming ``target``; whatever was at ``target`` before is then unchanged.
    """
    temporary = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        fd = _fs.create_exclusive(temporary, mode)
    except (OSError, ValueError) as err:
        _fs.write_failure(target, err, "creating a temporary file beside it")
    try:
        try:
            for piece in pieces:
                _fs.write_all(fd, piece)
        except BaseException:
            os.close(fd)
            raise
        _fs.sync_and_close(fd)
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


def _data_pieces(prefix_and_header: bytes, ordered: list[np.ndarray[Any, Any]]) -> Iterator[memoryview | bytes]:
    yield prefix_and_header
    for array in ordered:
        if array.nbytes:
            yield array.reshape(-1).view(np.uint8).data


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
    prefix_and_header, ordered = encode(arrays, metadata)
    kept = _fs.existing_mode(target)
    write_atomically(target, _data_pieces(prefix_and_header, ordered), kept if kept is not None else mode)


__all__ = ["before_replace", "encode", "save_arrays", "write_atomically"]
