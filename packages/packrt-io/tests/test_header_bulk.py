"""A header in the writers' form is parsed in bulk, and the bulk parse agrees with the general parser on
every header: what it accepts, the general parser accepts with the same entries and metadata; what it
declines goes to the general parser, which accepts it or names the defect."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
from hypothesis import given, settings
from hypothesis import strategies as st

import packrt_io
from packrt_core.errors import CheckpointError
from packrt_io import _header

DTYPES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "U8": 1, "BOOL": 1, "F64": 8, "I8": 1}


def general(raw: bytes) -> tuple[list[Any], dict[str, str]] | str:
    """The general parser's entries and metadata, or its refusal's message."""
    try:
        return _header._general(raw, "f.safetensors")
    except CheckpointError as err:
        return str(err)


def header_text(entries: list[tuple[str, str, list[int]]], metadata: dict[str, str] | None, where: int = 0) -> bytes:
    """The writers' form: compact JSON, tensors tiling the data in order, metadata at position ``where``."""
    members: list[tuple[str, Any]] = []
    offset = 0
    for name, dtype, shape in entries:
        size = DTYPES[dtype] * int(np.prod(shape, dtype=np.int64))
        members.append((name, {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}))
        offset += size
    if metadata is not None:
        members.insert(min(where, len(members)), ("__metadata__", metadata))
    text = json.dumps(dict(members), separators=(",", ":"), ensure_ascii=False).encode()
    return text + b" " * (-len(text) % 8)


names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
entry_lists = st.lists(
    st.tuples(names, st.sampled_from(sorted(DTYPES)), st.lists(st.integers(0, 5), max_size=3)),
    min_size=1,
    max_size=8,
    unique_by=lambda entry: entry[0],
)
metadatas = st.none() | st.dictionaries(names, names, max_size=3)


@settings(max_examples=300, deadline=None)
@given(entries=entry_lists, metadata=metadatas, where=st.integers(0, 8))
def test_a_header_in_the_writers_form_parses_in_bulk_to_what_the_general_parser_gives(
    entries: list[tuple[str, str, list[int]]], metadata: dict[str, str] | None, where: int
) -> None:
    raw = header_text(entries, metadata, where)
    bulk = _header._canonical(raw)
    if any(re.search(r'["\\\x00-\x1f]', name) for name, _, _ in entries) or (
        metadata is not None and "\\" in json.dumps(metadata, ensure_ascii=False)
    ):
        assert bulk is None  # an escape in a name or in the metadata: the general parser decides
    else:
        assert bulk is not None
    if bulk is not None:
        assert bulk == general(raw)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    raw = bytearray(header_text(draw(entry_lists), draw(metadatas), draw(st.integers(0, 8))))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "duplicate"]))
        at = draw(st.integers(0, len(raw) - 1))
        if kind == "flip":
            raw[at] = draw(st.sampled_from(b'0123456789",:{}[] \\-eE.aF'))
        elif kind == "insert":
            raw[at:at] = draw(st.sampled_from([b"0", b" ", b",", b"\\u0041", b"-", b"1e2"]))
        elif kind == "delete":
            del raw[at]
        else:
            raw[at:at] = raw[at : at + draw(st.integers(1, 40))]
    return bytes(raw)


@settings(max_examples=600, deadline=None)
@given(raw=mutated())
def test_the_bulk_parse_never_accepts_what_the_general_parser_refuses_or_reads_differently(raw: bytes) -> None:
    bulk = _header._canonical(raw)
    if bulk is not None:
        assert bulk == general(raw)


DECLINED = {
    "escape in a name": b'{"a\\u0041":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "space after a colon": b'{"a": {"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "fields in another order": b'{"a":{"shape":[1],"dtype":"F32","data_offsets":[0,4]}}',
    "leading zero": b'{"a":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}}',
    "exponent": b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4e0]}}',
    "repeated name": b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],'
    b'"data_offsets":[4,8]}}',
    "unknown dtype": b'{"a":{"dtype":"X9","shape":[1],"data_offsets":[0,4]}}',
    "sizes disagree": b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}',
    "lone surrogate in metadata": b'{"__metadata__":{"k":"\\ud800"},"a":{"dtype":"F32","shape":[1],'
    b'"data_offsets":[0,4]}}',
    "metadata not strings": b'{"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "repeated metadata name": b'{"__metadata__":{"k":"1","k":"2"},"a":{"dtype":"F32","shape":[1],'
    b'"data_offsets":[0,4]}}',
    "a second extra member": b'{"__metadata__":{},"x":1,"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "two commas": b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},,"b":{"dtype":"F32","shape":[1],'
    b'"data_offsets":[4,8]}}',
    "a tab as padding": b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}\t',
    "offset beyond 2**63": b'{"a":{"dtype":"U8","shape":[0],"data_offsets":[9223372036854775808,9223372036854775808]}}',
}


@pytest.mark.parametrize("raw", list(DECLINED.values()), ids=list(DECLINED))
def test_a_header_not_in_the_writers_form_goes_to_the_general_parser(raw: bytes) -> None:
    assert _header._canonical(raw) is None
    outcome = general(raw)
    if isinstance(outcome, str):  # the general parser's refusal, word for word
        with pytest.raises(CheckpointError) as refused:
            _header.parse_header(raw, 8 + len(raw), "f.safetensors")
        assert str(refused.value) == outcome
    else:
        data_bytes = max((entry.end for entry in outcome[0]), default=0)
        parsed = _header.parse_header(raw, 8 + len(raw) + data_bytes, "f.safetensors")
        assert (list(parsed.tensors), parsed.metadata) == outcome


def test_files_written_by_packrt_and_by_safetensors_take_the_bulk_road(tmp_path: Path) -> None:
    arrays = {"b.weight": np.ones((3, 2), np.float32), "a.bias": np.zeros(4, np.int64), "z": np.ones((), np.float16)}
    ours, theirs = tmp_path / "packrt.safetensors", tmp_path / "library.safetensors"
    packrt_io.save_arrays(arrays, ours, {"format": "pt", "note": "é"})
    safetensors.numpy.save_file(arrays, str(theirs), metadata={"format": "np", "note": "é"})
    for path in (ours, theirs):
        raw = path.read_bytes()
        length = int.from_bytes(raw[:8], "little")
        bulk = _header._canonical(raw[8 : 8 + length])
        assert bulk is not None, f"{path.name}: the header took the general road"
        assert bulk == general(raw[8 : 8 + length])
        assert packrt_io.read_metadata(path)["note"] == "é"


@pytest.mark.parametrize(
    "entry",
    [
        '"w":{"dtype":"F32","shape":[2],"data_offsets":[0,DIGITS]}',
        '"w":{"dtype":"F32","shape":[DIGITS],"data_offsets":[0,8]}',
        '"__metadata__":{"a":DIGITS},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}',
    ],
    ids=["offset", "shape", "metadata"],
)
def test_an_integer_of_thousands_of_digits_is_a_checkpoint_error_naming_the_file(tmp_path: Path, entry: str) -> None:
    """Python refuses int() of more than 4300 digits with a builtin ValueError; the bulk parse reads at most
    20 digits a number (a u64's), so such a header goes to the general parser, which names it."""
    header = ("{" + entry.replace("DIGITS", "9" * 5000) + "}").encode()
    path = tmp_path / "digits.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    with pytest.raises(CheckpointError, match=r"digits\.safetensors': header holds an integer of more than \d+ digits"):
        packrt_io.load_file(path)


def test_a_header_that_is_mostly_one_long_metadata_string_goes_to_the_general_parser(tmp_path: Path) -> None:
    """The bulk split scans every byte of the header in Python's regex engine (20 MB of one string: 0.36 s); the
    general parser's C JSON decoder reads it in 0.08 s. Both give the same tensors and metadata."""
    long = "x" * 2_000_000
    path = tmp_path / "meta.safetensors"
    safetensors.numpy.save_file({"w": np.arange(4, dtype=np.float32)}, str(path), metadata={"notes": long})
    size = int.from_bytes(path.read_bytes()[:8], "little")
    assert _header._canonical(path.read_bytes()[8 : 8 + size]) is None
    loaded = packrt_io.load_file(path)
    np.testing.assert_array_equal(loaded["w"], np.arange(4, dtype=np.float32))
    assert packrt_io.read_metadata(path)["notes"] == long
