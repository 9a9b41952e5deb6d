"""GGUF files read through llama.cpp's reader: stored types map, quantised types dequantise, others are refused.

Files are written here with the ``gguf`` package's own GGUFWriter (no download): F32/F16/BF16 tensors
must come back as copy-on-write views of the file, bit-exact; each quantised type packrt supports must
come back as float32 equal to ``gguf.quants.dequantize`` of its blocks (and close to the values that were
quantised); anything else is refused by name before a tensor is read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packrt_io
from packrt_base.pages import mapping_under as _mapping_under
from packrt_core.errors import CheckpointError

try:
    import gguf
except ImportError:
    if os.environ.get("PACKRT_REQUIRE_TORCH") == "1":  # CI installs the test extra, which holds gguf
        raise
    pytest.skip("the gguf extra is not installed (pip install 'packrt-io[gguf]')", allow_module_level=True)
T = gguf.GGMLQuantizationType

ROWS, COLS = 4, 256  # one K-quant super-block (256 values) per row


# Where each block type gguf cannot quantise to keeps its fp16 scales (d, and dmin where it has one).
_SCALE_OFFSETS = {
    "Q2_K": (80, 82),
    "Q3_K": (108,),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
    "IQ4_NL": (0,),
    "IQ4_XS": (0,),
    "IQ2_XXS": (0,),
}


def _random_blocks(kind: str, rng: np.random.Generator) -> np.ndarray:
    """Random blocks of ``kind`` with small finite fp16 scales (for the types gguf cannot quantise to)."""
    block, size = gguf.GGML_QUANT_SIZES[T[kind]]
    raw = rng.integers(0, 256, (ROWS, COLS // block, size), dtype=np.uint8)
    scale = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
    for offset in _SCALE_OFFSETS[kind]:
        raw[..., offset : offset + 2] = scale
    return raw.reshape(ROWS, -1)


def write_gguf(path: Path, tensors: dict[str, tuple[str, np.ndarray]], metadata: dict[str, Any] | None = None) -> None:
    """A GGUF file of architecture "llama" holding ``tensors`` (name -> (GGML type, float values or blocks))."""
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in (metadata or {}).items():
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, list):
            writer.add_array(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_uint32(key, value)
    for name, (kind, values) in tensors.items():
        if kind == "F32":
            writer.add_tensor(name, values.astype(np.float32))
        elif kind == "F16":
            writer.add_tensor(name, values.astype(np.float16))
        elif values.dtype == np.uint8:  # ready-made blocks
            writer.add_tensor(name, values, raw_dtype=T[kind])
        else:
            writer.add_tensor(name, gguf.quants.quantize(values.astype(np.float32), T[kind]), raw_dtype=T[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def values() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)


def test_stored_types_are_bit_exact_copy_on_write_views_of_the_file(tmp_path: Path, values: np.ndarray) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, {"a": ("F32", values), "b": ("F16", values), "c": ("BF16", values)})
    before = path.read_bytes()
    file = packrt_io.open_gguf(path)
    a, b, c = file.array("a"), file.array("b"), file.array("c")
    assert (a.dtype, b.dtype, c.dtype) == (np.float32, np.float16, np.dtype(ml_dtypes.bfloat16))
    assert a.shape == b.shape == c.shape == (ROWS, COLS) == file.tensors["a"].shape
    np.testing.assert_array_equal(a, values)
    np.testing.assert_array_equal(b, values.astype(np.float16))
    np.testing.assert_array_equal(c.astype(np.float32), values.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert all(_mapping_under(x) is not None for x in (a, b, c)), "a stored tensor must be a view of the mapping"
    a[0, 0] = 123.0  # copy-on-write: the array changes, the file does not
    assert path.read_bytes() == before
    assert all(file.tensors[n].stored_as_served for n in "abc")
    # each tensor is described as inspect_checkpoint describes one: a TensorInfo with the GGML type name
    assert file.tensors["b"] == file.info().tensors["b"]
    assert isinstance(file.tensors["b"], packrt_io.TensorInfo)
    assert (file.tensors["b"].dtype, file.tensors["b"].file, file.tensors["b"].nbytes) == (
        "F16",
        "m.gguf",
        values.size * 2,
    )


@pytest.mark.parametrize("kind", list(packrt_io.GGUF_DEQUANTISED_TYPES))
def test_each_quantised_type_dequantises_to_float32_as_llama_cpp_defines_it(
    tmp_path: Path, values: np.ndarray, kind: str
) -> None:
    rng = np.random.default_rng(1)
    stored = _random_blocks(kind, rng) if kind in _SCALE_OFFSETS else values
    path = tmp_path / f"{kind}.gguf"
    write_gguf(path, {"w": (kind, stored)})
    file = packrt_io.open_gguf(path)
    assert file.tensors["w"].type == kind and not file.tensors["w"].stored_as_served
    out = file.array("w")
    assert out.dtype == np.float32 and out.shape == (ROWS, COLS)
    blocks = stored if stored.dtype == np.uint8 else gguf.quants.quantize(values, T[kind])
    np.testing.assert_array_equal(out, gguf.quants.dequantize(blocks, T[kind]))
    assert _mapping_under(out) is None, "a dequantised tensor is fresh memory, not the file's pages"
    if stored is values:  # quantised here from known values: the round trip is close
        bound = {"Q8_0": 0.02, "Q4_0": 0.3, "Q4_1": 0.3, "Q5_0": 0.15, "Q5_1": 0.15}[kind]
        assert float(np.abs(out - values).max()) < bound


def test_a_type_packrt_does_not_read_is_refused_by_name_listing_the_supported(
    tmp_path: Path, values: np.ndarray
) -> None:
    path = tmp_path / "iq2.gguf"
    odd = _random_blocks("IQ2_XXS", np.random.default_rng(2))
    write_gguf(path, {"ok": ("F32", values), "odd": ("IQ2_XXS", odd)})
    file = packrt_io.open_gguf(path)
    file.check_types(["ok"])
    message = r"tensor 'odd' is stored as IQ2_XXS, which packrt does not read; supported: F32, F16, BF16 .*IQ4_XS"
    with pytest.raises(CheckpointError, match=message):
        file.check_types(["ok", "odd"])
    with pytest.raises(CheckpointError, match="IQ2_XXS"):
        file.array("odd")


def test_metadata_comes_back_as_python_values(tmp_path: Path, values: np.ndarray) -> None:
    path = tmp_path / "meta.gguf"
    meta = {"llama.block_count": 3, "llama.rope.freq_base": 0.5, "tokenizer.ggml.tokens": ["a", "b c", "<s>"]}
    write_gguf(path, {"w": ("F32", values)}, meta)
    file = packrt_io.open_gguf(path)
    assert file.architecture == "llama"
    assert file.metadata["llama.block_count"] == 3
    assert file.metadata["llama.rope.freq_base"] == 0.5
    assert file.metadata["tokenizer.ggml.tokens"] == ["a", "b c", "<s>"]
    info = file.info()
    assert info.tensors["w"].dtype == "F32" and info.tensors["w"].shape == (ROWS, COLS)


def test_metadata_values_are_decoded_on_first_access_and_an_arrays_length_without_decoding(
    tmp_path: Path, values: np.ndarray
) -> None:
    """A load reads a few numbers; the vocabulary is decoded only when asked for. What is read is the same either
    way: the mapping holds every key, in the file's order, and equals the dict of its values."""
    path = tmp_path / "lazy.gguf"
    meta = {"llama.block_count": 3, "tokenizer.ggml.tokens": ["a", "b c", "<s>", ""]}
    write_gguf(path, {"w": ("F32", values)}, meta)
    file = packrt_io.open_gguf(path)
    assert file.metadata.length("tokenizer.ggml.tokens") == 4
    assert file.metadata.length("llama.block_count") is None
    assert "tokenizer.ggml.tokens" not in file.metadata._values  # counted, not decoded
    assert "tokenizer.ggml.tokens" in file.metadata and "absent.key" not in file.metadata
    assert file.metadata.get("absent.key") is None
    assert list(file.metadata)[-2:] == ["llama.block_count", "tokenizer.ggml.tokens"]
    assert dict(file.metadata) == {**{k: file.metadata[k] for k in file.metadata}, **meta}
    assert file.metadata["tokenizer.ggml.tokens"] is file.metadata["tokenizer.ggml.tokens"]  # decoded once
    with pytest.raises(KeyError, match=r"absent\.key"):
        file.metadata["absent.key"]


_ITEM_TYPES = {
    "uint8": gguf.GGUFValueType.UINT8,
    "int8": gguf.GGUFValueType.INT8,
    "uint16": gguf.GGUFValueType.UINT16,
    "int16": gguf.GGUFValueType.INT16,
    "uint32": gguf.GGUFValueType.UINT32,
    "int32": gguf.GGUFValueType.INT32,
    "float32": gguf.GGUFValueType.FLOAT32,
    "uint64": gguf.GGUFValueType.UINT64,
    "int64": gguf.GGUFValueType.INT64,
    "float64": gguf.GGUFValueType.FLOAT64,
    "bool": gguf.GGUFValueType.BOOL,
}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    arrays=st.lists(st.tuples(st.sampled_from(sorted(_ITEM_TYPES)), st.integers(1, 40)), max_size=5),
    strings=st.lists(st.text(max_size=12), min_size=1, max_size=60),  # the writer refuses empty arrays
    nested=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_every_metadata_field_reads_as_the_gguf_packages_own_reader_reads_it(
    tmp_path: Path, values: np.ndarray, arrays: list[tuple[str, int]], strings: list[str], nested: bool, seed: int
) -> None:
    """The reader packrt opens files with reads arrays whole (its load-time shortcut): each field's contents
    must be the plain ``gguf.GGUFReader``'s, for arrays of every scalar type, of strings (empty ones, non-ASCII)
    and arrays of arrays, and the scalars and tensors around them."""
    rng = np.random.default_rng(seed)
    path = tmp_path / f"fields-{seed}.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for i, (kind, n) in enumerate(arrays):
        items = rng.integers(0, 100, n).tolist() if kind != "bool" else (rng.random(n) < 0.5).tolist()
        if kind.startswith("float"):
            items = rng.standard_normal(n).tolist()
        writer.add_key_value(f"test.array{i}", items, gguf.GGUFValueType.ARRAY, sub_type=_ITEM_TYPES[kind])
    writer.add_array("tokenizer.ggml.tokens", strings)
    writer.add_uint32("test.after", 7)
    if nested:
        writer.add_array("test.nested", [[1, 2], [3]])
    writer.add_tensor("w", values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    plain = gguf.GGUFReader(path)
    file = packrt_io.open_gguf(path)
    expected = {key: field.contents() for key, field in plain.fields.items()}
    got = {key: field.contents() for key, field in file._reader.fields.items()}
    assert got == expected
    assert [f.types for f in file._reader.fields.values()] == [f.types for f in plain.fields.values()]
    assert file.metadata["tokenizer.ggml.tokens"] == strings
    np.testing.assert_array_equal(file.array("w"), values)


def test_paths_that_are_not_gguf_files_are_refused_naming_them(tmp_path: Path, values: np.ndarray) -> None:
    with pytest.raises(CheckpointError, match="does not exist or is not a regular file"):
        packrt_io.open_gguf(tmp_path / "absent.gguf")
    other = tmp_path / "model.safetensors"
    packrt_io.save_file({"w": values}, other)
    assert not packrt_io.is_gguf(other)
    with pytest.raises(CheckpointError, match="does not start with the GGUF magic"):
        packrt_io.open_gguf(other)
    whole = tmp_path / "whole.gguf"
    write_gguf(whole, {"w": ("F32", values)}, {"general.name": "x"})
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole.read_bytes()[:40])
    assert packrt_io.is_gguf(cut)
    with pytest.raises(CheckpointError, match=r"cut\.gguf': the header gives 2 key/value pairs, .* bytes are left"):
        packrt_io.open_gguf(cut)


def test_the_architecture_is_read_from_the_start_of_the_header_alone(tmp_path: Path, values: np.ndarray) -> None:
    path = tmp_path / "a.gguf"
    write_gguf(path, {"w": ("F32", values)}, {"tokenizer.ggml.tokens": [f"t{i}" for i in range(1000)]})
    assert packrt_io.gguf_architecture(path) == "llama" == packrt_io.open_gguf(path).architecture
    text = tmp_path / "a.txt"
    text.write_text("not a model")
    with pytest.raises(CheckpointError, match=r"does not start with the GGUF magic b'GGUF'; it is not a GGUF file"):
        packrt_io.gguf_architecture(text)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:30])  # inside the first key
    with pytest.raises(CheckpointError, match=r"cut\.gguf'"):
        packrt_io.gguf_architecture(cut)
