"""Parsing and validating a safetensors header, with an error that says exactly what is wrong.

A safetensors file is an 8-byte little-endian header length ``N``, ``N`` bytes of UTF-8 JSON (an
object: tensor key -> ``{"dtype", "shape", "data_offsets"}``, plus an optional ``__metadata__`` of
string -> string), then the data section. The rules enforced here are the safetensors library's
(header size cap, offsets that tile the data section exactly with no gap, no overlap and nothing after
the last tensor) plus packrt's own (only dtypes numpy holds bit-exactly, no duplicate keys). Every
violation raises :class:`~packrt_core.errors.CheckpointError` naming the file, the tensor key where
there is one, and what was expected against what was found.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import operator
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import Any, Final, NamedTuple, NoReturn, cast

from packrt_core.errors import CheckpointError
from packrt_io import _fs, _json
from packrt_io._dtypes import BY_NAME, SUPPORTED_NAMES, FileDType
from packrt_io._fs import PathLike

PREFIX_BYTES: Final = 8
# The safetensors library refuses headers above this size; packrt holds files to the same cap.
MAX_HEADER_BYTES: Final = 100_000_000
METADATA_KEY: Final = "__metadata__"
# numpy holds at most 64 dimensions, and sizes (dimension products, byte counts) below 2**63.
MAX_DIMENSIONS: Final = 64
MAX_SIZE: Final = 2**63 - 1
# More tensors than fit in a header of MAX_HEADER_BYTES at their shortest (about 60 bytes each).
MAX_TENSORS: Final = 2_000_000
_FIX = "the file is damaged or was not written as safetensors; re-save it from its source"


class TensorEntry(NamedTuple):
    """One tensor's header entry, validated: its bytes are ``[begin, end)`` of the data section."""

    key: str
    dtype: FileDType
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        """Bytes the tensor occupies in the data section."""
        return self.end - self.begin


@dataclass(frozen=True)
class Header:
    """A validated header: the tensors in data order, the metadata, and where the data starts."""

    path: str
    data_start: int
    data_bytes: int
    tensors: tuple[TensorEntry, ...]
    metadata: dict[str, str]
    # (device, inode, size, mtime in ns) of the file the header was read from: a later open of the same
    # path reuses the header only while the file is still this one.
    identity: tuple[int, ...] = ()


def fail(path: str, problem: str, *, key: str | None = None, fix: str = _FIX) -> NoReturn:
    """Raise the CheckpointError for ``problem`` in ``path`` (and tensor ``key``), ending with a fix."""
    where = f"checkpoint {path!r}" + (f", tensor {clip_name(key)!r}" if key is not None else "")
    raise CheckpointError(f"{where}: {problem}; {fix}")


def header_length(prefix: bytes, file_size: int, path: str) -> int:
    """Validate the 8-byte length prefix against the file size and return the header length."""
    if file_size < PREFIX_BYTES or len(prefix) < PREFIX_BYTES:
        fail(
            path,
            f"file is {file_size} bytes, smaller than the {PREFIX_BYTES}-byte header length every "
            "safetensors file starts with",
        )
    length = int.from_bytes(prefix[:PREFIX_BYTES], "little")
    if length > MAX_HEADER_BYTES:
        fail(path, f"header length {length} exceeds the {MAX_HEADER_BYTES}-byte cap on headers")
    if PREFIX_BYTES + length > file_size:
        fail(
            path,
            f"header length {length} runs past the end of the file: expected at most "
            f"{file_size - PREFIX_BYTES} header bytes after the prefix, the file is {file_size} bytes",
        )
    return length


def _decode(raw: bytes, path: str) -> tuple[dict[str, Any], int]:
    # The reference library requires the object to open at the first byte (padding is trailing).
    if not raw.startswith(b"{"):
        found = repr(raw[:1].decode("latin-1")) if raw else "an empty header"
        fail(path, f"header must be a JSON object starting with '{{' at its first byte, found {found}")

    def refuse(problem: str) -> NoReturn:
        fail(path, f"header {problem}")

    # Duplicate keys are counted by parse_header, which walks every entry anyway.
    parsed, members = _json.decode(raw, _json.HEADER_DEPTH, refuse)
    # Text opening with '{' that parses is an object, so no further type check is needed.
    return cast(dict[str, Any], parsed), members


def _metadata(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        fail(path, f"{METADATA_KEY} must be an object of string -> string, found {_json_type(value)}")
    for name, item in value.items():
        if not isinstance(item, str):
            fail(
                path,
                f"{METADATA_KEY} entry {name!r} holds {_json_type(item)} {item!r}; metadata values must be strings",
            )
    return dict(value)


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    names.update({list: "an array", dict: "an object", type(None): "null"})
    return names.get(type(value), type(value).__name__)


def _is_count(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_SIZE


def _fits(shape: list[int], itemsize: int) -> bool:
    """Whether numpy can hold the shape: the product of its non-zero dimensions, in bytes, below 2**63."""
    size = itemsize
    for dim in shape:
        size *= dim or 1
    return size <= MAX_SIZE


def _entry(key: str, value: Any, path: str) -> TensorEntry:
    """The entry ``value`` of tensor ``key``, checked field by field with an exact error for each defect."""
    if not isinstance(value, dict):
        fail(
            path,
            f"entry must be an object with dtype, shape and data_offsets, found {_json_type(value)}",
            key=key,
        )
    missing = [field for field in ("dtype", "shape", "data_offsets") if field not in value]
    if missing:
        fail(path, f"entry lacks the field(s) {', '.join(missing)} (has: {_names(value)})", key=key)
    dtype_name = value["dtype"]
    dtype = _entry_dtype(key, dtype_name, path)
    shape = _entry_shape(key, value["shape"], dtype_name, dtype.itemsize, path)
    begin, end = _entry_offsets(key, value["data_offsets"], path)
    needed = dtype.itemsize
    for dim in shape:
        needed *= dim
    if end - begin != needed:
        fail(
            path,
            f"shape {shape} of {dtype_name} needs {needed} bytes but data_offsets [{begin}, {end}] span {end - begin}",
            key=key,
        )
    return TensorEntry(key, dtype, tuple(shape), begin, end)


def _entry_dtype(key: str, dtype_name: Any, path: str) -> FileDType:
    """The file dtype an entry's ``dtype`` field names, or the error saying it is not a string or not loadable."""
    if not isinstance(dtype_name, str):
        fail(path, f"dtype must be a string, found {_json_type(dtype_name)}", key=key)
    dtype = BY_NAME.get(dtype_name)
    if dtype is None:
        fail(
            path,
            f"dtype {_clip(dtype_name)!r} is not one packrt can load (supported: {', '.join(SUPPORTED_NAMES)})",
            key=key,
            fix="convert the tensor to a supported dtype before saving",
        )
    return dtype


def _entry_shape(key: str, shape: Any, dtype_name: str, itemsize: int, path: str) -> list[int]:
    """An entry's ``shape`` field, once it is a list of at most MAX_DIMENSIONS counts numpy can hold."""
    if not isinstance(shape, list) or not all(type(dim) is int and dim >= 0 for dim in shape):
        fail(path, f"shape must be an array of non-negative integers, found {_clip(repr(shape))}", key=key)
    if len(shape) > MAX_DIMENSIONS:
        fail(path, f"shape has {len(shape)} dimensions; at most {MAX_DIMENSIONS} are supported", key=key)
    for axis, dim in enumerate(shape):
        if dim > MAX_SIZE:
            fail(path, f"dimension {axis} is {dim}; a dimension must be below 2**63", key=key)
    if not _fits(shape, itemsize):
        fail(path, f"shape {shape} of {dtype_name} would need 2**63 bytes or more", key=key)
    return shape


def _entry_offsets(key: str, offsets: Any, path: str) -> tuple[int, int]:
    """An entry's ``data_offsets`` field as (begin, end), once both are counts and end does not precede begin."""
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
        fail(
            path,
            f"data_offsets must be [begin, end] with non-negative integers below 2**63, found {_clip(repr(offsets))}",
            key=key,
        )
    begin, end = offsets
    if end < begin:
        fail(path, f"data_offsets [{begin}, {end}] are reversed: end must not precede begin", key=key)
    return begin, end


def clip_name(name: str, limit: int = 200) -> str:
    """``name`` as an error message shows it: cut after ``limit`` characters, saying how many more."""
    return name if len(name) <= limit else f"{name[:limit]}... ({len(name) - limit} more characters)"


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def _names(value: dict[str, Any], limit: int = 10) -> str:
    names = sorted(value)
    shown = ", ".join(repr(_clip(name, 60)) for name in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _entries(parsed: dict[str, Any], path: str) -> tuple[list[TensorEntry], int]:
    """Every entry of the header, and how many object members they hold (for the duplicate check).

    The common entry (three fields, a known dtype, integer shape and offsets that agree) takes one
    tight pass; anything else goes through :func:`_entry`, which names the defect or accepts it.
    """
    entries: list[TensorEntry] = []
    append = entries.append
    make = tuple.__new__  # TensorEntry(...) without its Python-level __new__
    members = 0
    for key, value in parsed.items():
        try:
            dtype = BY_NAME[value["dtype"]]
            shape = value["shape"]
            begin, end = value["data_offsets"]
            usual = (
                len(value) == 3
                and type(shape) is list
                and len(shape) <= MAX_DIMENSIONS
                and type(begin) is int
                and type(end) is int
                and 0 <= begin <= end <= MAX_SIZE
            )
        except (KeyError, TypeError, ValueError):
            usual = False
        if usual:
            size = dtype.itemsize
            for dim in shape:
                if type(dim) is not int or not 0 <= dim <= MAX_SIZE:
                    break
                size *= dim
            else:
                if size == end - begin and (size or _fits(shape, dtype.itemsize)):
                    append(make(TensorEntry, (key, dtype, tuple(shape), begin, end)))
                    members += 3
                    continue
        append(_entry(key, value, path))
        members += _json.member_count(value)
    return entries, members


def _tiles_in_order(entries: list[TensorEntry], data_bytes: int) -> bool:
    """True when the entries, as listed, follow one another through the data section with no gap."""
    if not entries:
        return data_bytes == 0
    begins = [entry[3] for entry in entries]
    ends = [entry[4] for entry in entries]
    # Each begins where the one before ends (so the list is sorted), from 0 to the last data byte.
    return begins[0] == 0 and ends[-1] == data_bytes and begins[1:] == ends[:-1]


def _check_tiling(entries: list[TensorEntry], data_bytes: int, path: str) -> None:
    cursor, previous = 0, None
    for entry in entries:
        if entry.begin < cursor:
            fail(
                path,
                f"data_offsets [{entry.begin}, {entry.end}] overlap tensor {previous!r}, which ends at {cursor}",
                key=entry.key,
            )
        if entry.begin > cursor:
            after = f"after tensor {previous!r}" if previous is not None else "at the start of the data"
            fail(
                path,
                f"{entry.begin - cursor} unused bytes {after}: expected data_offsets to begin at {cursor}, "
                f"found {entry.begin}",
                key=entry.key,
            )
        cursor, previous = entry.end, entry.key
        if cursor > data_bytes:
            fail(
                path,
                f"data_offsets [{entry.begin}, {entry.end}] run past the end of the data section "
                f"({data_bytes} bytes): the file is truncated or the offsets are out of range",
                key=entry.key,
            )
    if cursor < data_bytes:
        last = f"tensor {previous!r}" if previous is not None else "the header"
        fail(
            path,
            f"{data_bytes - cursor} trailing bytes after {last}: expected the file to end at data "
            f"offset {cursor}, found {data_bytes} data bytes",
        )


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector while a header's objects are built.

    A header of 10**6 tensors builds millions of objects, none of them in a cycle; left on, the collector
    rescans the growing heap again and again and takes more time than the parse itself. It is turned
    back on afterwards (if it was on), whatever happens.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_header(path: PathLike, fd: int | None = None) -> Header:
    """The validated header of the safetensors file at ``path``, reading the header bytes only; with
    ``fd``, of that open descriptor (``path`` names it in errors). The one header reader: loads,
    ``inspect_checkpoint``, ``read_metadata`` and the index's shards all come here."""
    if fd is None:
        where, opened = _fs.open_for_reading(path)
        try:
            return read_header(where, opened)
        finally:
            os.close(opened)
    where = _fs.path_text(path)
    file_id = _fs.identity(fd)
    file_size = file_id[2]
    length = header_length(os.pread(fd, PREFIX_BYTES, 0), file_size, where)
    raw = os.pread(fd, length, PREFIX_BYTES)
    if len(raw) != length:
        fail(where, f"header length {length} runs past the end of the file, which shrank while being read")
    return dataclasses.replace(parse_header(raw, file_size, where), identity=file_id)


def parse_header(raw: bytes, file_size: int, path: str) -> Header:
    """Validate the header bytes ``raw`` (the ``N`` bytes after the prefix) of a ``file_size``-byte file."""
    with gc_paused():
        return _parse_header(raw, file_size, path)


def _parse_header(raw: bytes, file_size: int, path: str) -> Header:
    bulk = _canonical(raw)
    if bulk is not None:
        entries, metadata = bulk
    else:
        entries, metadata = _general(raw, path)
    data_start = PREFIX_BYTES + len(raw)
    if not _tiles_in_order(entries, file_size - data_start):
        # Sorted by (begin, end) so zero-byte tensors sit before a tensor starting at the same offset.
        entries.sort(key=itemgetter(3, 4))
        _check_tiling(entries, file_size - data_start, path)
    return Header(path, data_start, file_size - data_start, tuple(entries), metadata)


def _general(raw: bytes, path: str) -> tuple[list[TensorEntry], dict[str, str]]:
    """Any header: decoded as strict JSON, then checked entry by entry, each defect named."""
    parsed, members = _decode(raw, path)
    has_metadata = METADATA_KEY in parsed
    metadata = _metadata(parsed.pop(METADATA_KEY, None), path)
    if len(parsed) > MAX_TENSORS:
        fail(path, f"header lists {len(parsed)} tensors; at most {MAX_TENSORS} are supported")
    entries, entry_members = _entries(parsed, path)
    if members != len(parsed) + entry_members + len(metadata) + has_metadata:
        _json.fail_duplicate(raw, lambda problem: fail(path, f"header {problem}"))
    return entries, metadata


# The form safetensors' writer and packrt's own give every entry: compact JSON, the three fields in
# this order, integers without sign, exponent or leading zero, and a name with no escape or control
# character. A header made only of such entries (and an optional __metadata__ object) is parsed in
# bulk: one regular-expression split instead of a JSON decoder building a dict and two lists per
# entry, and C-level passes over the columns instead of a Python loop. Anything else (an escape, a
# space, another field order, any defect) falls to the general parser, which gives the same result
# or names the defect.
_NUMBER: Final = r"(?:0|[1-9][0-9]{0,19})"  # a u64 has at most 20 digits; longer goes to the general parser
_ENTRY: Final = re.compile(
    r'"([^"\\\x00-\x1f]*)":\{"dtype":"([0-9A-Za-z_]+)","shape":\[((?:' + _NUMBER + r"(?:," + _NUMBER + r")*)?)\],"
    r'"data_offsets":\[(' + _NUMBER + r"),(" + _NUMBER + r")\]\}"
)
_FIELDS: Final = 6  # re.split's pieces per entry: the text before it, then its five groups
# A writer's entry is ~100-400 bytes; a header with far more bytes per entry is mostly __metadata__, which the
# general parser's C JSON decoder reads 4-5x faster than the split (20 MB of one string: 0.08 s against 0.36 s)
_BULK_BYTES_PER_ENTRY: Final = 4096


def _canonical(raw: bytes) -> tuple[list[TensorEntry], dict[str, str]] | None:
    """The entries and metadata of a header in the writers' form, or None when it is not in it."""
    if len(raw) > _BULK_BYTES_PER_ENTRY * (raw.count(b'"data_offsets":[') + 1):
        return (
            None  # mostly metadata (one long string): the split would scan it byte by byte; JSON's C decoder does not
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    parts = _ENTRY.split(text)
    count = len(parts) // _FIELDS
    if not count or count > MAX_TENSORS:
        return None
    metadata = _canonical_metadata(parts)
    keys = parts[1::_FIELDS]
    if metadata is None or len(set(keys)) != count or METADATA_KEY in keys:
        return None
    dtype_names, shape_texts = parts[2::_FIELDS], parts[3::_FIELDS]
    kinds = dict.fromkeys(zip(shape_texts, dtype_names, strict=True))
    shapes: dict[str, tuple[int, ...]] = {}
    for shape_text, dtype_name in kinds:
        dtype = BY_NAME.get(dtype_name)
        shape = shapes.get(shape_text)
        if shape is None:
            shape = shapes[shape_text] = tuple(map(int, shape_text.split(","))) if shape_text else ()
        if dtype is None or len(shape) > MAX_DIMENSIONS or not _fits(list(shape), dtype.itemsize):
            return None
        size = dtype.itemsize
        for dim in shape:
            size *= dim
        kinds[shape_text, dtype_name] = size
    begins, ends = list(map(int, parts[4::_FIELDS])), list(map(int, parts[5::_FIELDS]))
    spans = list(map(operator.sub, ends, begins))
    if max(ends) > MAX_SIZE or spans != list(map(kinds.__getitem__, zip(shape_texts, dtype_names, strict=True))):
        return None
    dtypes, dims = map(BY_NAME.__getitem__, dtype_names), map(shapes.__getitem__, shape_texts)
    columns = zip(keys, dtypes, dims, begins, ends, strict=True)
    return list(map(partial(tuple.__new__, TensorEntry), columns)), metadata


def _canonical_metadata(parts: list[str]) -> dict[str, str] | None:
    """The metadata of a split header ({} without one), or None when the text between the entries is
    not exactly '{', commas, '}' and trailing spaces, with at most one plain __metadata__ object."""
    head, tail = parts[0], parts[-1].rstrip(" ")
    if not head.startswith("{") or not tail.endswith("}"):
        return None
    head, tail = head[1:], tail[:-1]
    between = parts[_FIELDS:-1:_FIELDS]
    if not head and not tail and between.count(",") == len(between):
        return {}
    chunk = _member_between(head, tail, between)
    return None if chunk is None else _plain_metadata(chunk)


def _member_between(head: str, tail: str, between: list[str]) -> str | None:
    """The one member a split header holds besides its entries, found in the text before them (``head``),
    after them (``tail``) or between two of them, or None when that text is anything but commas and it."""
    commas = between.count(",")
    if commas == len(between):
        if head and not tail and head.endswith(","):
            return head[:-1]
        if tail and not head and tail.startswith(","):
            return tail[1:]
        return None
    if commas == len(between) - 1 and not head and not tail:
        chunk = next(piece for piece in between if piece != ",")
        if len(chunk) < 2 or chunk[0] != "," or chunk[-1] != ",":
            return None
        return chunk[1:-1]
    return None


def _plain_metadata(chunk: str) -> dict[str, str] | None:
    """The string -> string object of the member ``chunk`` when it is __metadata__ written plainly (no
    escapes, no repeated name), else None."""
    if not chunk.startswith(f'"{METADATA_KEY}":{{') or "\\" in chunk:
        return None  # an escape (a surrogate?) or another member: the general parser decides
    try:
        value = json.loads("{" + chunk + "}")
    except ValueError:
        return None
    metadata = value.get(METADATA_KEY) if isinstance(value, dict) and len(value) == 1 else None
    if not isinstance(metadata, dict) or not all(isinstance(item, str) for item in metadata.values()):
        return None
    if _json.structure(chunk.encode("utf-8"))[1] != 1 + len(metadata):  # a repeated name: let it be named
        return None
    return metadata


__all__ = [
    "MAX_DIMENSIONS",
    "MAX_HEADER_BYTES",
    "MAX_SIZE",
    "MAX_TENSORS",
    "METADATA_KEY",
    "PREFIX_BYTES",
    "Header",
    "TensorEntry",
    "clip_name",
    "fail",
    "gc_paused",
    "header_length",
    "parse_header",
    "read_header",
]
