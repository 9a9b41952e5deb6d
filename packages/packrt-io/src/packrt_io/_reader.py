"""Loading a safetensors file as numpy arrays: validated, then mapped copy-on-write.

With ``mmap=True`` the file is mapped privately (``ACCESS_COPY``) and each array is a view of the
mapping: nothing is read until it is touched, and a write to an array copies only the touched page
in this process, so the user's file never changes. A tensor whose offset is not a multiple of its
element size cannot be viewed safely; it is copied instead, and the copy is listed in the
:class:`LoadReport`. With ``mmap=False`` each tensor is read into fresh memory of its own.

Each file is validated once, by packrt's own header reader (:mod:`packrt_io._header`), whose errors
name the file, the tensor and the fix. The safetensors library is not asked again: packrt refuses every
file the library refuses (the header-mutation tests hold every file packrt accepts to the library's
acceptance), and a second pass by the library cost every load another open and header parse.

Nothing here unpickles: headers are JSON and tensor bytes are reinterpreted, never deserialized.
"""

from __future__ import annotations

import mmap as _mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packrt_core.nn.memory import name_mapped_file
from packrt_io import _fs
from packrt_io._fs import identity
from packrt_io._guard import MappedFile
from packrt_io._header import Header, TensorEntry, fail, gc_paused, read_header

PathLike = _fs.PathLike


@dataclass(frozen=True)
class LoadReport:
    """What a load did: whether it mapped the file, and which tensors it had to copy and why."""

    path: Path
    mapped: bool
    tensor_count: int
    data_bytes: int
    metadata: dict[str, str] = field(default_factory=dict)
    # Keys copied out of the mapping because their data offset is misaligned for their dtype.
    unaligned_copies: tuple[str, ...] = ()
    copied_bytes: int = 0
    # The open file behind a mapping (None when not mapped), checked before a model serves from it.
    mapped_file: MappedFile | None = field(default=None, compare=False, repr=False)

    @property
    def copy_count(self) -> int:
        """How many tensors were copied instead of viewed (0 for a file packrt or safetensors wrote)."""
        return len(self.unaligned_copies)


def _view(buffer: Any, header: Header, entry: TensorEntry) -> np.ndarray[Any, Any]:
    count = entry.nbytes // entry.dtype.itemsize
    offset = header.data_start + entry.begin
    return np.frombuffer(buffer, dtype=entry.dtype.numpy, count=count, offset=offset).reshape(entry.shape)


def _load_mapped(path: str, fd: int, header: Header) -> tuple[dict[str, np.ndarray[Any, Any]], list[str], int]:
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    copied: list[str] = []
    copied_bytes = 0
    # The mapping's start is page-aligned, so a tensor is aligned exactly when its file offset is.
    mapping = _mmap.mmap(fd, 0, access=_mmap.ACCESS_COPY)
    name_mapped_file(mapping, path)  # so memory_report can say which file a weight's pages come from
    if len(mapping) != header.data_start + header.data_bytes:
        fail(path, "the file changed size while it was being loaded", fix="load it again once writers finish")
    empty = np.empty
    for entry in header.tensors:
        if entry[3] == entry[4]:  # no bytes: begin == end
            arrays[entry[0]] = empty(entry[2], dtype=entry[1].numpy)
            continue
        array = _view(mapping, header, entry)
        if (header.data_start + entry.begin) % entry.dtype.itemsize:
            array = array.copy()
            copied.append(entry.key)
            copied_bytes += entry.nbytes
        arrays[entry.key] = array
    return arrays, copied, copied_bytes


def _load_read(path: str, fd: int, header: Header) -> dict[str, np.ndarray[Any, Any]]:
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    for entry in header.tensors:
        array = np.empty(entry.shape, dtype=entry.dtype.numpy)
        target = array.reshape(-1).view(np.uint8).data
        done = 0
        while done < entry.nbytes:
            got = os.preadv(fd, [target[done:]], header.data_start + entry.begin + done)
            if got == 0:
                fail(path, "the file shrank while it was being read", key=entry.key)
            done += got
        arrays[entry.key] = array
    return arrays


def load_arrays(path: PathLike, *, mmap: bool = True) -> tuple[dict[str, np.ndarray[Any, Any]], LoadReport]:
    """Load every tensor of a safetensors file as a numpy array, with a report of how.

    The file is validated completely before any array is made; any defect raises
    :class:`~packrt_core.errors.CheckpointError` naming the file and the tensor. With ``mmap=True``
    (the default) arrays are copy-on-write views of the file: writable, and a write never reaches the
    file. Keys come back in data order. A path that is not a regular file (a directory, a FIFO, a
    device) is refused before it is opened.
    """
    return load_with_header(path, None, mmap=mmap)


def load_with_header(
    path: PathLike, known: Header | None, *, mmap: bool
) -> tuple[dict[str, np.ndarray[Any, Any]], LoadReport]:
    """:func:`load_arrays`, reusing ``known`` (a header already read from this file) while it still is."""
    where, fd = _fs.open_for_reading(path)
    try:
        if known is not None and known.identity == identity(fd):
            header = known
        elif known is not None:
            fail(where, "the file changed while it was being loaded", fix="load it again once writers finish")
        else:
            header = read_header(where, fd)
        copied: list[str] = []
        copied_bytes = 0
        with gc_paused():
            if mmap:
                arrays, copied, copied_bytes = _load_mapped(where, fd, header)
            else:
                arrays = _load_read(where, fd, header)
        # A mapped file stays open with its guard, so its identity can be checked while it serves.
        mapped_file = MappedFile(where, fd, header.identity) if mmap else None
    except BaseException:
        os.close(fd)
        raise
    if mapped_file is None:
        os.close(fd)
    report = LoadReport(
        path=Path(where),
        mapped=mmap,
        tensor_count=len(arrays),
        data_bytes=header.data_bytes,
        metadata=dict(header.metadata),
        unaligned_copies=tuple(copied),
        copied_bytes=copied_bytes,
        mapped_file=mapped_file,
    )
    return arrays, report


def read_metadata(path: PathLike) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file (empty when it has none), after full validation."""
    return dict(read_header(path).metadata)


__all__ = [
    "LoadReport",
    "load_arrays",
    "load_with_header",
    "read_metadata",
]
