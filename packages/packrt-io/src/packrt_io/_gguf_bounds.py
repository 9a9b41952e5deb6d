"""A GGUF header walked within the bounds of its file, before the ``gguf`` package parses it.

The ``gguf`` reader trusts the header's counts and lengths: an array count past the end of the file made it
allocate without end, nested arrays recursed until ``RecursionError``, a tensor offset of 2**64-1 wrapped
around and was served. :func:`check_header` reads the same bytes first, by the format's own rules, and
refuses (:class:`~packrt_core.errors.CheckpointError` naming the file and the key or tensor) whatever could
not be read within the file:

- every count (tensors, key/value pairs, array items) against the bytes left, at the smallest size one item
  takes, before a loop over it; every string length against the bytes left;
- arrays nested at most :data:`MAX_NESTING` deep (llama.cpp writes none nested);
- each tensor: at most four dimensions, each >= 1, a GGML type the ``gguf`` package knows, a whole number of
  its blocks; its offset aligned to ``general.alignment``, after the previous tensor's end (in order, never
  overlapping) and its bytes inside the file, as llama.cpp's loader checks them.

It walks the header only (no tensor data is read) and allocates nothing in proportion to a count it has not
checked against the bytes left.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np

from packrt_core.errors import CheckpointError

MAX_NESTING: Final = 4  # arrays of arrays: deeper is refused (llama.cpp writes flat arrays)
MAX_DIMS: Final = 4  # GGML_MAX_DIMS
DEFAULT_ALIGNMENT: Final = 32
# value type -> bytes (the scalars); 8 is a string, 9 an array
_SCALARS: Final[dict[int, int]] = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_SMALLEST: Final[dict[int, int]] = {**_SCALARS, _STRING: 8, _ARRAY: 12}  # the least bytes one item takes


def _utf8_problem(raw: memoryview) -> str:
    """Why ``raw`` is not UTF-8, or "" when it is (the slice is released before this returns)."""
    with raw:
        try:
            str(raw, "utf-8")
        except UnicodeDecodeError as err:
            return f"{err.reason} at byte {err.start}"
    return ""


class _Walk:
    """A cursor over the header's bytes that never reads past the file."""

    def __init__(self, data: Any, path: Path) -> None:
        self.data, self.path, self.at, self.size = data, path, 0, len(data)
        self.key = "the header"  # what is being read, for the messages

    def fail(self, problem: str) -> CheckpointError:
        return CheckpointError(
            f"GGUF file {str(self.path)!r}: {self.key} {problem}; the file is damaged or not written by a GGUF "
            "writer (write it again with llama.cpp's convert script or the gguf package)"
        )

    def left(self) -> int:
        return self.size - self.at

    def take(self, count: int, what: str) -> int:
        """The offset of the next ``count`` bytes, which must lie in the file."""
        if count > self.left():
            raise self.fail(
                f"needs {count} bytes for its {what} at offset {self.at}, but the file ends {self.left()} later"
            )
        start = self.at
        self.at += count
        return start

    def u32(self, what: str) -> int:
        return int(struct.unpack_from("<I", self.data, self.take(4, what))[0])

    def u64(self, what: str) -> int:
        return int(struct.unpack_from("<Q", self.data, self.take(8, what))[0])

    def count(self, what: str, smallest: int) -> int:
        """A u64 count of items that each take at least ``smallest`` bytes, checked against the bytes left."""
        n = self.u64(what)
        if n * smallest > self.left():
            raise self.fail(f"gives {n} {what}, at least {n * smallest} bytes, but {self.left()} bytes are left")
        return n

    def string(self, what: str) -> str:
        length = self.u64(f"{what}'s length")
        start = self.take(length, what)
        try:
            return bytes(self.data[start : start + length]).decode("utf-8")
        except UnicodeDecodeError as err:
            raise self.fail(f"has a {what} that is not UTF-8 ({err.reason} at byte {err.start})") from err

    def value(self, kind: int, depth: int) -> Any:
        """Skip (or read, for the few values the walk needs) one value of type ``kind``."""
        if kind in _SCALARS:
            start = self.take(_SCALARS[kind], "value")
            return struct.unpack_from("<I", self.data, start)[0] if kind == 4 else None
        if kind == _STRING:
            self.string("string value")  # decoded: a value that is not UTF-8 is named here
            return None
        if kind != _ARRAY:
            raise self.fail(f"has value type {kind}, which GGUF does not define (0-12)")
        if depth >= MAX_NESTING:
            raise self.fail(f"nests arrays more than {MAX_NESTING} deep")
        item = self.u32("array item type")
        if item not in _SMALLEST:
            raise self.fail(f"holds an array of value type {item}, which GGUF does not define (0-12)")
        n = self.count("array items", _SMALLEST[item])
        if item in _SCALARS:
            self.take(n * _SCALARS[item], "array")
        elif item == _STRING:
            self._strings(n)
        else:
            for _ in range(n):
                self.value(item, depth + 1)
        return None

    def _strings(self, n: int) -> None:
        """Skip ``n`` strings (a vocabulary: tens of thousands), each length checked and each UTF-8 (the reader
        decodes them, and a bare UnicodeDecodeError escaped it). The lengths are walked one by one; the text is
        checked in one decode of the run with every length replaced by newlines (ASCII, so a character cannot
        run across two strings: the run decodes only if every string does), and a string is decoded alone only
        to name the one that does not."""
        at, size, unpack = self.at, self.size, struct.unpack_from
        first, lengths = at, []  # where each string's 8-byte length sits: one entry per 8 bytes walked at least
        with memoryview(self.data) as view:  # released before the mapping closes, even on an error
            for index in range(n):
                if at + 8 > size:
                    self.at = at
                    raise self.fail(f"ends inside the length of its string {index} at offset {at}")
                length = unpack("<Q", view, at)[0]
                lengths.append(at)
                at += 8
                if length > size - at:
                    self.at = at
                    raise self.fail(f"gives string {index} a length of {length} bytes, but {size - at} bytes are left")
                at += length
            with view[first:at] as run:
                text = np.frombuffer(run, np.uint8).copy()
            if lengths:
                text[(np.asarray(lengths) - first)[:, None] + np.arange(8)] = ord("\n")
            try:
                text.tobytes().decode("utf-8")
            except UnicodeDecodeError as err:
                index = bisect.bisect_right(lengths, first + err.start) - 1
                start = lengths[index] + 8
                stop = lengths[index + 1] if index + 1 < len(lengths) else at
                self.at = start
                problem = _utf8_problem(view[start:stop])
                raise self.fail(f"holds string {index}, which is not UTF-8 ({problem})") from err
        self.at = at


def find_architecture(data: Any, path: Path) -> str | None:
    """``general.architecture`` of the GGUF header in ``data``, read by the same bounded walk as
    :func:`check_header` but only as far as that key (llama.cpp writes it first), or None where the header has
    no such string; CheckpointError for what cannot be read on the way."""
    walk = _Walk(data, path)
    walk.take(4, "magic")
    version = walk.u32("version")
    if version not in (2, 3):
        raise walk.fail(f"says version {version}; packrt reads GGUF versions 2 and 3")
    walk.count("tensors", 8 + 4 + 4 + 8)
    pairs = walk.count("key/value pairs", 8 + 4 + 1)
    for _ in range(pairs):
        walk.key = "a key"
        key = walk.string("key")
        walk.key = f"key {key!r}"
        kind = walk.u32("value type")
        if key == "general.architecture" and kind == _STRING:
            return walk.string("string value")
        walk.value(kind, 0)
    return None


def check_header(data: Any, path: Path, blocks: Mapping[int, tuple[int, int]]) -> None:
    """CheckpointError unless the GGUF header in ``data`` (the file's bytes, e.g. a mapping) can be read
    within the file: see the module docstring for every rule. ``blocks``: GGML type -> (values, bytes) per
    block, the ``gguf`` package's ``GGML_QUANT_SIZES``."""
    walk = _Walk(data, path)
    walk.take(4, "magic")
    version = walk.u32("version")
    if version not in (2, 3):
        raise walk.fail(f"says version {version}; packrt reads GGUF versions 2 and 3")
    tensors = walk.count("tensors", 8 + 4 + 4 + 8)  # a name's length, dims, type, offset
    pairs = walk.count("key/value pairs", 8 + 4 + 1)  # a key's length, a type, the least value
    alignment = DEFAULT_ALIGNMENT
    for _ in range(pairs):
        walk.key = "a key"
        key = walk.string("key")
        walk.key = f"key {key!r}"
        kind = walk.u32("value type")
        found = walk.value(kind, 0)
        if key == "general.alignment":
            if kind != 4 or not found or found & (found - 1):
                raise walk.fail(f"is {found!r}, expected a power of two stored as uint32")
            alignment = int(found)
    infos = []
    for _ in range(tensors):
        walk.key = "a tensor name"
        name = walk.string("tensor name")
        walk.key = f"tensor {name!r}"
        dims = walk.u32("dimension count")
        if not 1 <= dims <= MAX_DIMS:
            raise walk.fail(f"has {dims} dimensions, expected 1 to {MAX_DIMS}")
        shape = [walk.u64("dimension") for _ in range(dims)]
        if min(shape) < 1:
            raise walk.fail(f"has shape {shape} (GGML order): every dimension must be >= 1")
        kind = walk.u32("type")
        if kind not in blocks:
            raise walk.fail(f"is stored as GGML type {kind}, which the gguf package does not know")
        per_block, block_bytes = blocks[kind]
        elements = 1
        for n in shape:
            elements *= n
        if shape[0] % per_block:
            raise walk.fail(f"has {shape[0]} values a row, not a whole number of its type's {per_block}-value blocks")
        infos.append((walk.key, walk.u64("offset"), elements // per_block * block_bytes))
    data_start = -(-walk.at // alignment) * alignment
    end = 0
    for key, offset, nbytes in infos:
        walk.key = key
        if offset % alignment:
            raise walk.fail(f"starts at offset {offset}, not a multiple of the file's alignment {alignment}")
        if offset < end:
            raise walk.fail(f"starts at offset {offset}, inside the tensor before it (which ends at {end})")
        if data_start + offset + nbytes > walk.size:
            raise walk.fail(
                f"holds {nbytes} bytes at offset {offset} of the data section (which starts at {data_start}), past "
                f"the end of the file ({walk.size} bytes)"
            )
        end = offset + nbytes


__all__ = ["MAX_DIMS", "MAX_NESTING", "check_header", "find_architecture"]
