"""Every malformed file is refused with a CheckpointError naming the file, the tensor and the defect."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packrt_io
from packrt_core.errors import CheckpointError, PackrtError

RawWriter = Callable[..., Path]


def _entry(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def _refused(path: Path, pattern: str, *, key: str | None = None) -> CheckpointError:
    """Load ``path`` both ways; each must raise CheckpointError naming the file (and key) and ``pattern``."""
    errors = []
    for use_mmap in (True, False):
        with pytest.raises(CheckpointError, match=pattern) as caught:
            packrt_io.load_arrays(path, mmap=use_mmap)
        errors.append(caught.value)
    message = str(errors[0])
    assert str(path) in message
    if key is not None:
        assert f"tensor {key!r}" in message
    assert str(errors[1]) == message
    assert isinstance(errors[0], ValueError)
    assert isinstance(errors[0], PackrtError)
    return errors[0]


@pytest.mark.parametrize("size", [0, 1, 7])
def test_a_file_smaller_than_the_length_prefix_is_refused(tmp_path: Path, size: int) -> None:
    path = tmp_path / "tiny.safetensors"
    path.write_bytes(b"\x00" * size)
    _refused(path, f"file is {size} bytes, smaller than the 8-byte header length")


def test_a_header_length_past_the_end_of_the_file_is_refused(write_raw: RawWriter) -> None:
    path = write_raw(b"{}      ", length=4096)
    _refused(path, "header length 4096 runs past the end of the file.*file is 16 bytes")


def test_a_header_length_above_the_cap_is_refused(write_raw: RawWriter) -> None:
    path = write_raw(b"{}      ", length=100_000_001)
    _refused(path, "header length 100000001 exceeds the 100000000-byte cap")


def test_a_header_that_is_not_utf8_is_refused(write_raw: RawWriter) -> None:
    _refused(write_raw(b'{"\xff\xfe":1}'), "header is not valid UTF-8.*at byte 2")


@pytest.mark.parametrize(
    ("header", "pattern"),
    [
        (b'{"a": {"dtype": "F32",', "header is not valid JSON"),
        (b'{"a": NaN}', "header is not valid JSON.*NaN"),
        (b"[1, 2]", "must be a JSON object starting with '\\{'.*found '\\['"),
        (b'"text"', "must be a JSON object.*found '\"'"),
        (b' {"a": 1}', "must be a JSON object starting with '\\{' at its first byte.*found ' '"),
        (b"", "must be a JSON object.*found an empty header"),
        (b"{" * 100_000, "header nests 100000 levels deep, deeper than the 8 allowed"),
    ],
    ids=["cut-json", "nan-constant", "array", "string", "leading-space", "empty", "deep-nesting"],
)
def test_a_header_that_is_not_a_json_object_is_refused(write_raw: RawWriter, header: bytes, pattern: str) -> None:
    _refused(write_raw(header, pad=header != b""), pattern)


def test_a_key_given_twice_is_refused(write_raw: RawWriter) -> None:
    text = (
        '{"w":'
        + '{"dtype":"U8","shape":[1],"data_offsets":[0,1]}'
        + ',"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'
    )
    _refused(write_raw(text, b"\x01\x02"), "key 'w' appears twice")


@pytest.mark.parametrize("dtype", ["C64", "F8_E8M0", "float32", "Q7"])
def test_an_unsupported_dtype_is_refused_by_name(write_raw: RawWriter, dtype: str) -> None:
    path = write_raw({"w": _entry(dtype, [2], 0, 8)}, bytes(8))
    error = _refused(path, f"dtype '{dtype}' is not one packrt can load", key="w")
    assert "BF16" in str(error)  # the message lists what is supported


def test_a_dtype_that_is_not_a_string_is_refused(write_raw: RawWriter) -> None:
    _refused(
        write_raw({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}}, bytes(4)),
        "dtype must be a string, found an integer",
        key="w",
    )


def test_shape_and_offsets_that_disagree_are_refused(write_raw: RawWriter) -> None:
    path = write_raw({"w": _entry("F32", [2, 3], 0, 20)}, bytes(20))
    _refused(path, re.escape("shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 20] span 20"), key="w")


@pytest.mark.parametrize(
    ("shape", "shown"),
    [([-1], "[-1]"), ([1.5], "[1.5]"), ("3", "'3'"), ([True], "[True]")],
    ids=["negative", "float", "string", "boolean"],
)
def test_a_malformed_shape_is_refused(write_raw: RawWriter, shape: Any, shown: str) -> None:
    path = write_raw({"w": {"dtype": "U8", "shape": shape, "data_offsets": [0, 1]}}, bytes(1))
    _refused(path, "shape must be an array of non-negative integers, found " + re.escape(shown), key="w")


@pytest.mark.parametrize("offsets", [[0], [0, 1, 2], [-1, 0], "0-1", [0, None]])
def test_malformed_data_offsets_are_refused(write_raw: RawWriter, offsets: Any) -> None:
    path = write_raw({"w": {"dtype": "U8", "shape": [1], "data_offsets": offsets}}, bytes(1))
    _refused(path, "data_offsets must be \\[begin, end\\] with non-negative integers", key="w")


def test_reversed_offsets_are_refused(write_raw: RawWriter) -> None:
    path = write_raw({"w": _entry("U8", [0], 4, 0)}, bytes(4))
    _refused(path, re.escape("data_offsets [4, 0] are reversed"), key="w")


def test_overlapping_offsets_are_refused(write_raw: RawWriter) -> None:
    path = write_raw({"a": _entry("F32", [2], 0, 8), "b": _entry("F32", [2], 4, 12)}, bytes(12))
    _refused(path, re.escape("data_offsets [4, 12] overlap tensor 'a', which ends at 8"), key="b")


def test_offsets_past_the_data_section_are_refused(write_raw: RawWriter) -> None:
    path = write_raw({"a": _entry("U8", [4], 0, 4), "b": _entry("F32", [4], 4, 20)}, bytes(8))
    _refused(path, re.escape("data_offsets [4, 20] run past the end of the data section (8 bytes)"), key="b")


def test_a_gap_between_tensors_is_refused(write_raw: RawWriter) -> None:
    path = write_raw({"a": _entry("U8", [4], 0, 4), "b": _entry("U8", [4], 8, 12)}, bytes(12))
    _refused(path, "4 unused bytes after tensor 'a': expected data_offsets to begin at 4, found 8", key="b")


def test_a_gap_before_the_first_tensor_is_refused(write_raw: RawWriter) -> None:
    path = write_raw({"a": _entry("U8", [4], 4, 8)}, bytes(8))
    _refused(path, "4 unused bytes at the start of the data", key="a")


def test_trailing_bytes_after_the_last_tensor_are_refused(write_raw: RawWriter) -> None:
    path = write_raw({"a": _entry("U8", [4], 0, 4)}, bytes(7))
    _refused(path, "3 trailing bytes after tensor 'a': expected the file to end at data offset 4")


def test_data_without_any_tensor_is_refused(write_raw: RawWriter) -> None:
    _refused(write_raw({}, bytes(5)), "5 trailing bytes after the header")


@pytest.mark.parametrize("keep", [4, 12, 40, -1], ids=["in-prefix", "in-header", "in-data", "last-byte"])
def test_a_truncated_file_is_refused(tmp_path: Path, keep: int) -> None:
    path = tmp_path / "cut.safetensors"
    packrt_io.save_file({"a": np.zeros(8, np.float32), "b": np.ones(4, np.float64)}, path)
    whole = path.read_bytes()
    path.write_bytes(whole[:keep])
    pattern = "smaller than the 8-byte|runs past the end of the file|truncated"
    _refused(path, pattern)


def test_truncated_data_names_the_tensor_that_runs_off_the_end(tmp_path: Path) -> None:
    path = tmp_path / "cut.safetensors"
    packrt_io.save_file({"a": np.zeros(8, np.float32), "b": np.ones(4, np.float64)}, path)
    path.write_bytes(path.read_bytes()[:-1])
    # F64 data comes first in the file, so the F32 tensor 'a' is the one cut short.
    _refused(path, "the file is truncated or the offsets are out of range", key="a")


@pytest.mark.parametrize(
    ("metadata", "pattern"),
    [
        ({"version": 3}, "__metadata__ entry 'version' holds an integer 3; metadata values must be strings"),
        ({"tags": ["a"]}, "__metadata__ entry 'tags' holds an array"),
        ({"x": None}, "__metadata__ entry 'x' holds null"),
        (["a"], "__metadata__ must be an object of string -> string, found an array"),
        ("text", "__metadata__ must be an object of string -> string, found a string"),
    ],
    ids=["integer", "array-value", "null-value", "array", "string"],
)
def test_metadata_that_is_not_string_to_string_is_refused(write_raw: RawWriter, metadata: Any, pattern: str) -> None:
    path = write_raw({"__metadata__": metadata})
    _refused(path, re.escape(pattern))
    with pytest.raises(CheckpointError, match="metadata"):
        packrt_io.read_metadata(path)


@pytest.mark.parametrize("entry", [[1, 2], "F32", 5, None], ids=["array", "string", "number", "null"])
def test_an_entry_that_is_not_an_object_is_refused(write_raw: RawWriter, entry: Any) -> None:
    _refused(write_raw({"w": entry}), "entry must be an object with dtype, shape and data_offsets", key="w")


@pytest.mark.parametrize("missing", ["dtype", "shape", "data_offsets"])
def test_an_entry_with_a_missing_field_is_refused(write_raw: RawWriter, missing: str) -> None:
    entry = _entry("U8", [1], 0, 1)
    del entry[missing]
    _refused(write_raw({"w": entry}, bytes(1)), f"entry lacks the field\\(s\\) {missing}", key="w")


def test_a_missing_file_is_refused_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "absent.safetensors"
    _refused(path, "cannot be opened \\(No such file or directory\\)")
    with pytest.raises(CheckpointError, match=r"absent\.safetensors.*cannot be opened"):
        packrt_io.read_metadata(path)


def test_a_file_is_validated_once_by_packrt_and_not_again_by_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ok.safetensors"
    packrt_io.save_file({"w": np.ones(2, np.float32)}, path, metadata={"m": "v"})

    def second_opinion(*args: object, **kwargs: object) -> None:
        pytest.fail("the safetensors library was asked to validate a file packrt already validated")

    for name in ("safe_open", "deserialize"):
        monkeypatch.setattr(safetensors, name, second_opinion)
    for use_mmap in (True, False):
        arrays, report = packrt_io.load_arrays(path, mmap=use_mmap)
        assert (arrays["w"] == 1).all() and report.metadata == {"m": "v"}
    assert set(packrt_io.load_file(path)) == {"w"}


def _valid_file_bytes() -> bytes:
    path_bytes = {
        "w": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.ones(3, np.float16),
        "i": np.arange(4, dtype=np.int8),
    }
    from safetensors.numpy import save

    return save(path_bytes, metadata={"m": "v"})


_VALID = _valid_file_bytes()
_HEADER_END = 8 + int.from_bytes(_VALID[:8], "little")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(st.tuples(st.integers(0, _HEADER_END - 1), st.integers(0, 255)), min_size=1, max_size=6),
    mmap=st.booleans(),
)
def test_mutated_header_bytes_give_a_checkpoint_error_or_a_valid_load(
    tmp_path: Path, edits: list[tuple[int, int]], mmap: bool
) -> None:
    mutated = bytearray(_VALID)
    for position, value in edits:
        mutated[position] = value
    path = tmp_path / "mutated.safetensors"
    path.write_bytes(bytes(mutated))
    try:
        arrays, report = packrt_io.load_arrays(path, mmap=mmap)
    except CheckpointError as err:
        message = str(err)
    else:
        message = ""
    if message:
        assert str(path) in message
        return
    # A load that succeeds must describe a file the reference library also accepts, in full.
    with safetensors.safe_open(str(path), framework="numpy") as handle:
        assert set(handle.keys()) == set(arrays)
    assert report.data_bytes == len(mutated) - 8 - int.from_bytes(mutated[:8], "little")
