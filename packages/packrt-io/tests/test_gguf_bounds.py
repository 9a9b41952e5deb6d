"""A GGUF header is read within the bounds of its file (packrt_io._gguf_bounds): every count, length and
offset is checked against the bytes there before the ``gguf`` reader trusts it, and whatever fails is a
CheckpointError naming the file and the key or tensor, never a hang, a runaway allocation, a RecursionError
or a wrapped offset served as weights.

Headers are written byte by byte here (struct, by the format's rules) so each rule gets the one header that
breaks it; the property test mutates a valid file the gguf package wrote.
"""

from __future__ import annotations

import os
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packrt_io
from packrt_core.errors import CheckpointError, PackrtError
from packrt_io._gguf_bounds import MAX_NESTING

try:
    import gguf
except ImportError:
    if os.environ.get("PACKRT_REQUIRE_TORCH") == "1":  # CI installs the test extra, which holds gguf
        raise
    pytest.skip("the gguf extra is not installed (pip install 'packrt-io[gguf]')", allow_module_level=True)

U32, U64, STRING, ARRAY = 4, 10, 8, 9
F32 = 0  # GGML type


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, kind: int, value: bytes) -> bytes:
    return _string(key) + struct.pack("<I", kind) + value


def _tensor(name: str, shape: tuple[int, ...], kind: int, offset: int) -> bytes:
    dims = struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", n) for n in shape)
    return _string(name) + dims + struct.pack("<IQ", kind, offset)


def _file(
    path: Path, pairs: list[bytes], tensors: list[bytes], data: bytes = b"", counts: tuple[int, int] | None = None
) -> Path:
    """A GGUF v3 file: the header (``counts`` overriding the true tensor and pair counts), padding to 32, ``data``."""
    n_tensors, n_pairs = counts if counts is not None else (len(tensors), len(pairs))
    header = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_pairs) + b"".join(pairs) + b"".join(tensors)
    header += b"\0" * (-len(header) % 32)
    path.write_bytes(header + data)
    return path


ARCH = _kv("general.architecture", STRING, _string("llama"))


def _refused(path: Path, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        packrt_io.open_gguf(path)


def test_a_well_formed_header_written_by_hand_opens(tmp_path: Path) -> None:
    values = np.arange(8, dtype=np.float32)
    path = _file(tmp_path / "ok.gguf", [ARCH], [_tensor("w", (8,), F32, 0)], values.tobytes())
    np.testing.assert_array_equal(packrt_io.open_gguf(path).array("w"), values)


def test_an_array_count_past_the_end_of_the_file_is_refused_before_any_allocation(tmp_path: Path) -> None:
    huge = struct.pack("<IQ", U32, 2**40) + b"\0" * 16  # 2**40 uint32 items in a 16-byte remainder
    path = _file(tmp_path / "count.gguf", [ARCH, _kv("tokenizer.ggml.scores", ARRAY, huge)], [])
    _refused(path, r"key 'tokenizer.ggml.scores' gives 1099511627776 array items, at least 4398046511104 bytes")


def test_a_string_array_whose_last_length_runs_past_the_end_is_refused_naming_the_string(tmp_path: Path) -> None:
    items = struct.pack("<IQ", STRING, 2) + _string("a") + struct.pack("<Q", 10**6)
    path = _file(tmp_path / "strings.gguf", [ARCH, _kv("tokenizer.ggml.tokens", ARRAY, items)], [])
    _refused(path, r"key 'tokenizer.ggml.tokens' gives string 1 a length of 1000000 bytes")


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b"ab\xc3", "unexpected end of data at byte 2"),  # a character cut off at the string's end
        (b"\xa9x", "invalid start byte at byte 0"),  # a continuation byte first: the end of the string before it
        (b"x\xffy", "invalid start byte at byte 1"),
    ],
)
def test_a_string_of_an_array_that_is_not_utf8_is_refused_naming_it_and_why(
    tmp_path: Path, bad: bytes, reason: str
) -> None:
    # one decode checks the whole run: a character may not run across two strings, each is named on its own
    words = [_string("ok"), _string("caf\u00e9"), struct.pack("<Q", len(bad)) + bad, _string("z")]
    items = struct.pack("<IQ", STRING, len(words)) + b"".join(words)
    path = _file(tmp_path / "utf8.gguf", [ARCH, _kv("tokenizer.ggml.tokens", ARRAY, items)], [])
    _refused(path, rf"key 'tokenizer.ggml.tokens' holds string 2, which is not UTF-8 \({reason}\)")


@pytest.mark.parametrize(
    "after",
    [b"\xa9b", b"x" * 0xA9],  # the next string's first byte, or the first byte of its length (169: 0xA9)
)
def test_a_string_that_is_utf8_only_joined_to_the_bytes_after_it_is_refused_naming_it(
    tmp_path: Path, after: bytes
) -> None:
    # "\xc3" ending a string and an "\xa9" after it would make "\u00e9" were the run decoded as it lies
    words = [struct.pack("<Q", 2) + b"a\xc3", struct.pack("<Q", len(after)) + after]
    items = struct.pack("<IQ", STRING, 2) + b"".join(words)
    path = _file(tmp_path / "split.gguf", [ARCH, _kv("tokenizer.ggml.tokens", ARRAY, items)], [])
    _refused(path, r"holds string 0, which is not UTF-8 \(unexpected end of data at byte 1\)")


def test_arrays_nested_past_the_bound_are_refused_not_a_recursion_error(tmp_path: Path) -> None:
    nested = struct.pack("<IQ", U32, 0)
    for _ in range(MAX_NESTING + 1):
        nested = struct.pack("<IQ", ARRAY, 1) + nested
    path = _file(tmp_path / "nested.gguf", [ARCH, _kv("x.nested", ARRAY, nested[12:])], [])
    _refused(path, rf"key 'x.nested' nests arrays more than {MAX_NESTING} deep")


def test_counts_larger_than_the_file_could_hold_are_refused_at_once(tmp_path: Path) -> None:
    _refused(_file(tmp_path / "pairs.gguf", [ARCH], [], counts=(0, 10**6)), r"gives 1000000 key/value pairs")
    _refused(_file(tmp_path / "tensors.gguf", [ARCH], [], counts=(10**9, 1)), r"gives 1000000000 tensors")


def test_a_key_of_a_type_gguf_does_not_define_is_refused_naming_the_key(tmp_path: Path) -> None:
    _refused(_file(tmp_path / "type.gguf", [ARCH, _kv("x.odd", 13, b"\0" * 8)], []), r"key 'x.odd' has value type 13")


@pytest.mark.parametrize(
    ("tensors", "data", "message"),
    [
        ([_tensor("w", (8,), F32, 2**64 - 32)], 32, r"tensor 'w' holds 32 bytes at offset 18446744073709551584"),
        ([_tensor("w", (8,), F32, 0), _tensor("v", (8,), F32, 0)], 64, r"tensor 'v' starts at offset 0, inside"),
        ([_tensor("w", (8,), F32, 32), _tensor("v", (8,), F32, 0)], 64, r"tensor 'v' starts at offset 0, inside"),
        ([_tensor("w", (8,), F32, 4)], 64, r"tensor 'w' starts at offset 4, not a multiple of the file's alignment"),
        ([_tensor("w", (8,), F32, 0)], 16, r"tensor 'w' holds 32 bytes at offset 0 .* past the end of the file"),
        ([_tensor("w", (1, 1, 1, 1, 8), F32, 0)], 32, r"tensor 'w' has 5 dimensions, expected 1 to 4"),
        ([_tensor("w", (8, 0), F32, 0)], 32, r"tensor 'w' has shape \[8, 0\]"),
        ([_tensor("w", (8,), 99, 0)], 32, r"tensor 'w' is stored as GGML type 99"),
        ([_tensor("w", (40,), 2, 0)], 64, r"tensor 'w' has 40 values a row, not a whole number of its type's 32"),
    ],
    ids=["wrapped-offset", "overlap", "out-of-order", "unaligned", "past-end", "dims", "zero-dim", "type", "blocks"],
)
def test_each_tensor_lies_aligned_in_order_and_inside_the_file(
    tmp_path: Path, tensors: list[bytes], data: int, message: str
) -> None:
    _refused(_file(tmp_path / "t.gguf", [ARCH], tensors, b"\0" * data), message)


def _valid(path: Path) -> bytes:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", 1)
    writer.add_array("tokenizer.ggml.tokens", ["a", "bc", "def"])
    writer.add_array("tokenizer.ggml.scores", [0.5, 0.25, 0.125])
    writer.add_tensor("w", np.arange(16, dtype=np.float32).reshape(2, 8))
    writer.add_tensor("v", np.ones(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return _valid(tmp_path_factory.mktemp("valid") / "valid.gguf")


def test_the_valid_file_opens(tmp_path: Path, valid: bytes) -> None:
    path = tmp_path / "v.gguf"
    path.write_bytes(valid)
    assert packrt_io.open_gguf(path).metadata["tokenizer.ggml.tokens"] == ["a", "bc", "def"]


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_header_opens_or_is_refused_with_a_packrt_error_within_twice_the_files_size(
    tmp_path: Path, valid: bytes, data: st.DataObject
) -> None:
    raw = bytearray(valid)
    for _ in range(data.draw(st.integers(1, 6), label="mutations")):
        at = data.draw(st.integers(4, min(len(raw), 400) - 1), label="offset")  # the header, past the magic
        raw[at] = data.draw(st.integers(0, 255), label="byte")
    if data.draw(st.booleans(), label="cut"):
        raw = raw[: data.draw(st.integers(8, len(raw)), label="length")]
    path = tmp_path / "mutated.gguf"
    path.write_bytes(bytes(raw))
    refused: PackrtError | None = None
    tracemalloc.start()
    try:
        opened = packrt_io.open_gguf(path)
        for name in opened.tensors:
            opened.array(name)
    except PackrtError as err:  # anything else (a RecursionError, the reader's ValueError) fails the test
        refused = err
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert refused is None or (isinstance(refused, CheckpointError) and "mutated.gguf" in str(refused))
    assert peak <= 2 * len(raw) + 2**20, f"opening a {len(raw)}-byte file allocated {peak} bytes at its peak"
