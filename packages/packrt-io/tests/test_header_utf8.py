"""Header keys and metadata are valid UTF-8: a lone surrogate escape is refused, as safetensors refuses it.

JSON text can carry a surrogate only as a ``\\uD800``-``\\uDFFF`` escape; Python's decoder turns a lone one
into a string UTF-8 cannot encode. safetensors (serde_json) refuses such a header; so does every packrt
reader (read_metadata, inspect_checkpoint, load_file, the index of a sharded checkpoint), and
save_file refuses to write one. A valid surrogate pair is one character and loads.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.numpy

import packrt_io
from packrt_core.errors import CheckpointError, PackrtError

ENTRY = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
# (name, the header's JSON text) — each with one lone surrogate, in a key, a metadata key or value.
LONE = [
    ("tensor-key-high", '{"w\\ud800":' + ENTRY + "}"),
    ("tensor-key-low", '{"\\udfffw":' + ENTRY + "}"),
    ("metadata-key", '{"__metadata__":{"k\\ud801":"v"},"w":' + ENTRY + "}"),
    ("metadata-value", '{"__metadata__":{"k":"v\\udc00"},"w":' + ENTRY + "}"),
    ("pair-reversed", '{"w\\ude00\\ud83d":' + ENTRY + "}"),
    ("upper-case-escape", '{"__metadata__":{"k":"\\uDBFF"},"w":' + ENTRY + "}"),
]
READERS = {
    "read_metadata": packrt_io.read_metadata,
    "inspect_checkpoint": packrt_io.inspect_checkpoint,
    "load_file": packrt_io.load_file,
}


def raw_file(path: Path, header: str) -> Path:
    text = header.encode("ascii")
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + np.ones(1, np.float32).tobytes())
    return path


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize(("name", "header"), LONE, ids=[name for name, _ in LONE])
def test_a_lone_surrogate_in_a_key_or_metadata_is_refused_where_safetensors_refuses_it(
    tmp_path: Path, name: str, header: str, reader: str
) -> None:
    path = raw_file(tmp_path / f"{name}.safetensors", header)
    # safetensors' own words changed across the versions packrt-io admits (0.4.2 says only that the
    # header did not deserialize); that it refuses the file is what packrt matches.
    refused = r"invalid JSON in header: .*(surrogate|hex escape)|Error while deserializing header"
    with pytest.raises(safetensors.SafetensorError, match=refused):
        safetensors.safe_open(str(path), framework="numpy")
    with pytest.raises(
        CheckpointError, match=r"header holds the string '.*\\\\u[dD][89a-fA-F][0-9a-fA-F]{2}.*lone surrogate"
    ) as info:
        READERS[reader](path)
    assert str(path) in str(info.value) and isinstance(info.value, PackrtError)


def test_a_valid_surrogate_pair_is_one_character_and_loads_as_safetensors_loads_it(tmp_path: Path) -> None:
    path = raw_file(
        tmp_path / "pair.safetensors", '{"__metadata__":{"k":"\\ud83d\\ude00"},"w\\ud83d\\ude00":' + ENTRY + "}"
    )
    assert packrt_io.read_metadata(path) == {"k": "\U0001f600"}
    assert list(packrt_io.load_file(path)) == list(safetensors.numpy.load_file(str(path))) == ["w\U0001f600"]


def test_an_index_naming_a_tensor_with_a_lone_surrogate_is_refused(tmp_path: Path) -> None:
    packrt_io.save_file({"w": np.ones(1, np.float32)}, tmp_path / "model-00001-of-00001.safetensors")
    index = '{"metadata": {}, "weight_map": {"w\\ud800": "model-00001-of-00001.safetensors"}}'
    (tmp_path / "model.safetensors.index.json").write_text(index)
    with pytest.raises(CheckpointError, match=r"lone surrogate"):
        packrt_io.inspect_checkpoint(tmp_path)


@pytest.mark.parametrize("where", ["key", "metadata"])
def test_save_file_refuses_a_lone_surrogate_naming_it(tmp_path: Path, where: str) -> None:
    arrays = {"w\ud800" if where == "key" else "w": np.ones(1, np.float32)}
    metadata = {"k": "\udc00"} if where == "metadata" else None
    with pytest.raises(CheckpointError, match=r"holds a lone surrogate, which is not valid UTF-8"):
        packrt_io.save_file(arrays, tmp_path / "out.safetensors", metadata=metadata)
    assert not (tmp_path / "out.safetensors").exists()
