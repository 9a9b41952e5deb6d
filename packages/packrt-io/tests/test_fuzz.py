"""Fuzzed checkpoints: every reader either succeeds or raises a packrt error, never anything else.

Each example starts from valid bytes (a file with ties and extra state, or a sharded index) and
mutates them: truncation, flipped or inserted bytes, a rewritten length prefix, offsets and dimensions
replaced by huge numbers, and deep nesting spliced into the JSON. Each mutated checkpoint goes through
load_file, load_checkpoint, inspect_checkpoint and check_checkpoint.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packrt_core
import packrt_io
from packrt_core.errors import PackrtError


def _valid_file() -> bytes:
    header = {
        "__metadata__": {
            "format": "pt",
            "packrt.ties": json.dumps({"tied": "a"}),
            "packrt.extra_state.block": json.dumps({"step": [1, 2, {"k": None}]}),
        },
        "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        "b": {"dtype": "I8", "shape": [0, 3], "data_offsets": [16, 16]},
        "c": {"dtype": "BF16", "shape": [4], "data_offsets": [16, 24]},
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + bytes(range(24))


_VALID = _valid_file()
_INDEX = json.dumps(
    {
        "metadata": {"total_size": 24},
        "weight_map": {"a": "s-1.safetensors", "b": "s-1.safetensors", "c": "s-1.safetensors"},
    }
).encode()
_NUMBER = re.compile(rb"\d+")


@st.composite
def _mutated(draw: st.DrawFn, base: bytes) -> bytes:
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "insert", "prefix", "number", "nest", "delete"]))
        if kind == "truncate" and data:
            del data[draw(st.integers(0, len(data) - 1)) :]
        elif kind == "flip" and data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and data:
            at = draw(st.integers(0, len(data) - 1))
            del data[at : at + draw(st.integers(1, 16))]
        elif kind == "prefix" and len(data) >= 8:
            huge = draw(st.sampled_from([0, 1, 7, len(data), 2**31, 2**63, 2**64 - 1, 100_000_001]))
            data[:8] = (huge % 2**64).to_bytes(8, "little")
        elif kind == "number":
            numbers = list(_NUMBER.finditer(bytes(data)))
            if numbers:
                match = draw(st.sampled_from(numbers))
                value = draw(
                    st.sampled_from([b"-1", b"0", b"1e3", b"18446744073709551616", b"9223372036854775807", b"2.5"])
                )
                data[match.start() : match.end()] = value
        elif kind == "nest":
            at = draw(st.integers(8, max(8, len(data))))
            depth = draw(st.sampled_from([10, 1000, 50_000]))
            data[at:at] = draw(st.sampled_from([b"[" * depth + b"]" * depth, b'{"x":' * depth + b"1" + b"}" * depth]))
    return bytes(data)


class _Module:
    """The smallest module the checkpoint readers accept (state ``a``, ``b``, ``c``, no ties)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {
            "a": packrt_core.from_numpy(np.zeros((2, 2), np.float32)),
            "b": packrt_core.from_numpy(np.zeros((0, 3), np.int8)),
        }

    def state_dict(self, *, keep_vars: bool = False) -> dict[str, Any]:
        return dict(self.values)

    def named_parameters(self, *, remove_duplicate: bool = True) -> Any:
        return iter(self.values.items())

    def named_buffers(self, *, remove_duplicate: bool = True) -> Any:
        return iter(())

    def load_state_dict(self, state_dict: Any, **options: Any) -> Any:
        for key, value in state_dict.items():
            if key in self.values and tuple(value.shape) != tuple(self.values[key].shape):
                raise packrt_core.errors.StateDictError(f"size mismatch for {key!r}")
        return None


def _every_reader(path: Path) -> None:
    calls = [
        lambda: packrt_io.load_file(path),
        lambda: packrt_io.load_checkpoint(_Module(), path, strict=False),
        lambda: packrt_io.inspect_checkpoint(path),
        lambda: packrt_io.check_checkpoint(_Module(), path),
    ]
    for call in calls:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", packrt_io.CheckpointLeftoverWarning)
                call()
        except PackrtError:
            pass


_SETTINGS = settings(
    max_examples=1500, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_SETTINGS
@given(content=_mutated(_VALID))
def test_a_mutated_file_gives_success_or_a_packrt_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "fuzz.safetensors"
    path.write_bytes(content)
    _every_reader(path)


@settings(max_examples=600, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=_mutated(b"\0" * 8 + _INDEX), shard=st.sampled_from([_VALID, _VALID[:-3]]))
def test_a_mutated_index_gives_success_or_a_packrt_error(tmp_path: Path, index: bytes, shard: bytes) -> None:
    (tmp_path / "s-1.safetensors").write_bytes(shard)
    path = tmp_path / "model.safetensors.index.json"
    path.write_bytes(index[8:])
    _every_reader(path)
    _every_reader(tmp_path)


def test_the_unmutated_checkpoints_load_through_every_reader(tmp_path: Path) -> None:
    # The fuzz starts from bytes every reader accepts, so mutations reach deep into validation.
    path = tmp_path / "s-1.safetensors"
    path.write_bytes(_VALID)
    (tmp_path / "model.safetensors.index.json").write_bytes(_INDEX)
    assert set(packrt_io.load_file(path)) == {"a", "b", "c"}
    assert packrt_io.inspect_checkpoint(path).ties() == {"tied": "a"}
    assert set(packrt_io.inspect_checkpoint(tmp_path).tensors) == {"a", "b", "c"}
    assert packrt_io.check_checkpoint(_Module(), path).unexpected_keys == ("block._extra_state", "c", "tied")
