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

import json
import math
from dataclasses import dataclass
from typing import Any, Final, NoReturn, cast

from packrt_core.errors import CheckpointError
from packrt_io._dtypes import BY_NAME, SUPPORTED_NAMES, FileDType

PREFIX_BYTES: Final = 8
# The safetensors library refuses headers above this size; packrt holds files to the same cap.
MAX_HEADER_BYTES: Final = 100_000_000
METADATA_KEY: Final = "__metadata__"
_FIX = "the file is damaged or was not written as safetensors; re-save it from its source"


@dataclass(frozen=True)
class TensorEntry:
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


def fail(path: str, problem: str, *, key: str | None = None, fix: str = _FIX) -> NoReturn:
    """Raise the CheckpointError for ``problem`` in ``path`` (and tensor ``key``), ending with a fix."""
    where = f"checkpoint {path!r}" + (f", tensor {key!r}" if key is not None else "")
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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise ValueError(f"key {name!r} appears twice in one object")
        result[name] = value
    return result


def _decode(raw: bytes, path: str) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        fail(path, f"header is not valid UTF-8 ({err.reason} at header byte {err.start})")
    # The reference library requires the object to open at the first byte (padding is trailing).
    if not text.startswith("{"):
        found = repr(text[:1]) if text else "an empty header"
        fail(path, f"header must be a JSON object starting with '{{' at its first byte, found {found}")
    try:
        parsed = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:
        fail(path, f"header is not valid JSON ({err})")
    # Text opening with '{' that parses is an object, so no further type check is needed.
    return cast(dict[str, Any], parsed)


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
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry(key: str, value: Any, path: str) -> TensorEntry:
    if not isinstance(value, dict):
        fail(
            path,
            f"entry must be an object with dtype, shape and data_offsets, found {_json_type(value)}",
            key=key,
        )
    missing = [field for field in ("dtype", "shape", "data_offsets") if field not in value]
    if missing:
        fail(path, f"entry lacks the field(s) {', '.join(missing)} (has: {sorted(value)})", key=key)
    dtype_name, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if not isinstance(dtype_name, str):
        fail(path, f"dtype must be a string, found {_json_type(dtype_name)}", key=key)
    dtype = BY_NAME.get(dtype_name)
    if dtype is None:
        fail(
            path,
            f"dtype {dtype_name!r} is not one packrt can load (supported: {', '.join(SUPPORTED_NAMES)})",
            key=key,
            fix="convert the tensor to a supported dtype before saving",
        )
    if not isinstance(shape, list) or not all(_is_count(dim) for dim in shape):
        fail(path, f"shape must be an array of non-negative integers, found {shape!r}", key=key)
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
        fail(path, f"data_offsets must be [begin, end] with non-negative integers, found {offsets!r}", key=key)
    begin, end = offsets
    if end < begin:
        fail(path, f"data_offsets [{begin}, {end}] are reversed: end must not precede begin", key=key)
    needed = math.prod(shape) * dtype.itemsize
    if end - begin != needed:
        fail(
            path,
            f"shape {shape} of {dtype_name} needs {needed} bytes but data_offsets [{begin}, {end}] span {end - begin}",
            key=key,
        )
    return TensorEntry(key, dtype, tuple(shape), begin, end)


def _check_tiling(entries: list[TensorEntry], data_bytes: int, path: str) -> None:
    # Sorted by (begin, end) so zero-byte tensors sit before a tensor starting at the same offset.
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


def parse_header(raw: bytes, file_size: int, path: str) -> Header:
    """Validate the header bytes ``raw`` (the ``N`` bytes after the prefix) of a ``file_size``-byte file."""
    parsed = _decode(raw, path)
    metadata = _metadata(parsed.pop(METADATA_KEY, None), path)
    entries = [_entry(key, value, path) for key, value in parsed.items()]
    entries.sort(key=lambda entry: (entry.begin, entry.end))
    data_start = PREFIX_BYTES + len(raw)
    _check_tiling(entries, file_size - data_start, path)
    return Header(path, data_start, file_size - data_start, tuple(entries), metadata)


__all__ = [
    "MAX_HEADER_BYTES",
    "METADATA_KEY",
    "PREFIX_BYTES",
    "Header",
    "TensorEntry",
    "fail",
    "header_length",
    "parse_header",
]
