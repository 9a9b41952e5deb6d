"""A saved file loads back with the same keys, dtypes, shapes and bits, and is the format's own bytes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packrt_io

Sample = Callable[..., np.ndarray[Any, Any]]
AsBytes = Callable[[np.ndarray[Any, Any]], bytes]


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "read"])
def test_every_supported_dtype_round_trips_bit_exactly(
    tmp_path: Path,
    dtype_name: str,
    mmap: bool,
    file_dtypes: dict[str, np.dtype[Any]],
    sample: Sample,
    as_bytes: AsBytes,
) -> None:
    dtype = file_dtypes[dtype_name]
    original = sample(dtype, (4, 6), seed=len(dtype_name))
    path = tmp_path / "one.safetensors"
    packrt_io.save_file({"t": original}, path)
    arrays, _ = packrt_io.load_arrays(path, mmap=mmap)
    loaded = arrays["t"]
    assert loaded.dtype == dtype
    assert loaded.shape == (4, 6)
    assert as_bytes(loaded) == as_bytes(original)
    with safetensors.safe_open(str(path), framework="numpy") as handle:
        assert handle.get_slice("t").get_dtype() == dtype_name


def test_float_nan_payloads_and_negative_zero_survive(tmp_path: Path, as_bytes: AsBytes) -> None:
    patterns = {
        "f64": np.array([0x8000000000000000, 0x7FF0000000000001, 0xFFF8000000001234], np.uint64).view(np.float64),
        "f32": np.array([0x80000000, 0x7F800001, 0xFFC01234], np.uint32).view(np.float32),
        "f16": np.array([0x8000, 0x7C01, 0xFE34], np.uint16).view(np.float16),
        "bf16": np.array([0x8000, 0x7F81, 0xFFC3], np.uint16).view(ml_dtypes.bfloat16),
        "e4m3": np.array([0x80, 0x7F, 0xFF], np.uint8).view(ml_dtypes.float8_e4m3fn),
        "e5m2": np.array([0x80, 0x7D, 0xFE], np.uint8).view(ml_dtypes.float8_e5m2),
    }
    path = tmp_path / "special.safetensors"
    packrt_io.save_file(patterns, path)
    arrays, _ = packrt_io.load_arrays(path)
    for key, original in patterns.items():
        assert as_bytes(arrays[key]) == as_bytes(original), key
        with np.errstate(invalid="ignore"):  # widening a signalling NaN raises numpy's "invalid" flag
            widened = arrays[key].astype(np.float64)
        assert np.signbit(widened[0]), key
        assert widened[0] == 0.0, key
        assert np.isnan(widened[1:]).all(), key


def test_save_writes_the_same_bytes_as_the_safetensors_library(
    tmp_path: Path, file_dtypes: dict[str, np.dtype[Any]], sample: Sample
) -> None:
    arrays = {f"k{i:02d}_{name}": sample(dtype, (2, 3), seed=i) for i, (name, dtype) in enumerate(file_dtypes.items())}
    arrays["scalar"] = np.array(2.5, np.float32)
    arrays["empty"] = np.zeros((0, 4), np.int16)
    path = tmp_path / "same.safetensors"
    packrt_io.save_file(arrays, path, metadata={"format": "np"})
    assert path.read_bytes() == safetensors.numpy.save(arrays, metadata={"format": "np"})


def test_metadata_round_trips_and_the_library_reads_it(tmp_path: Path) -> None:
    metadata = {"format": "pt", "note": "ünïcode ✓", "empty": "", "json": '{"a": [1, 2]}'}
    path = tmp_path / "meta.safetensors"
    packrt_io.save_file({"w": np.ones(2, np.float32)}, path, metadata=metadata)
    _, report = packrt_io.load_arrays(path)
    assert report.metadata == metadata
    assert packrt_io.read_metadata(path) == metadata
    with safetensors.safe_open(str(path), framework="numpy") as handle:
        assert handle.metadata() == metadata


def test_a_file_without_metadata_reports_empty_metadata(tmp_path: Path) -> None:
    path = tmp_path / "plain.safetensors"
    packrt_io.save_file({"w": np.ones(2, np.float32)}, path)
    assert packrt_io.read_metadata(path) == {}
    assert packrt_io.load_arrays(path)[1].metadata == {}


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "read"])
def test_scalars_and_zero_size_tensors_keep_their_shapes(tmp_path: Path, mmap: bool) -> None:
    arrays = {
        "scalar": np.array(7, np.int64),
        "empty": np.zeros((0,), np.float32),
        "empty2d": np.zeros((3, 0), ml_dtypes.bfloat16),
        "after": np.arange(3, dtype=np.uint8),
    }
    path = tmp_path / "shapes.safetensors"
    packrt_io.save_file(arrays, path)
    loaded, report = packrt_io.load_arrays(path, mmap=mmap)
    assert {key: (value.shape, value.dtype) for key, value in loaded.items()} == {
        key: (value.shape, value.dtype) for key, value in arrays.items()
    }
    assert loaded["scalar"] == 7
    np.testing.assert_array_equal(loaded["after"], [0, 1, 2])
    assert report.tensor_count == 4


def test_an_empty_mapping_saves_a_file_that_loads_empty(tmp_path: Path) -> None:
    path = tmp_path / "nothing.safetensors"
    packrt_io.save_file({}, path)
    assert path.read_bytes() == safetensors.numpy.save({})
    arrays, report = packrt_io.load_arrays(path)
    assert arrays == {}
    assert report.data_bytes == 0


def test_strided_and_big_endian_inputs_save_their_values(tmp_path: Path) -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    arrays = {"transposed": base.T, "sliced": base[::2, 1::2], "big_endian": np.arange(5, dtype=">i4")}
    path = tmp_path / "layouts.safetensors"
    packrt_io.save_file(arrays, path)
    loaded, _ = packrt_io.load_arrays(path)
    for key, original in arrays.items():
        np.testing.assert_array_equal(loaded[key], original)
    assert loaded["big_endian"].dtype == np.dtype("<i4")


def test_saving_again_replaces_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "again.safetensors"
    packrt_io.save_file({"old": np.zeros(3, np.float32)}, path)
    packrt_io.save_file({"new": np.ones(2, np.int8)}, path)
    loaded, _ = packrt_io.load_arrays(path)
    assert list(loaded) == ["new"]
    assert [p.name for p in tmp_path.iterdir()] == ["again.safetensors"]


_NUMPY_ONLY = ["F64", "F32", "F16", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64", "BOOL"]
_ALL = [*_NUMPY_ONLY, "BF16", "F8_E4M3", "F8_E5M2"]


@st.composite
def _checkpoints(draw: st.DrawFn) -> dict[str, tuple[str, tuple[int, ...], int]]:
    keys = draw(st.lists(st.text(max_size=12).filter(lambda k: k != "__metadata__"), max_size=6, unique=True))
    specs = {}
    for key in keys:
        dtype_name = draw(st.sampled_from(_ALL))
        shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
        specs[key] = (dtype_name, shape, draw(st.integers(0, 2**16)))
    return specs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=_checkpoints(), mmap=st.booleans())
def test_any_set_of_tensors_round_trips(
    tmp_path: Path,
    specs: dict[str, tuple[str, tuple[int, ...], int]],
    mmap: bool,
    file_dtypes: dict[str, np.dtype[Any]],
    sample: Sample,
    as_bytes: AsBytes,
) -> None:
    arrays = {
        key: sample(file_dtypes[name], shape, seed=seed)
        if int(np.prod(shape)) >= 3
        else np.zeros(shape, file_dtypes[name])
        for key, (name, shape, seed) in specs.items()
    }
    path = tmp_path / "any.safetensors"
    packrt_io.save_file(arrays, path)
    loaded, report = packrt_io.load_arrays(path, mmap=mmap)
    assert set(loaded) == set(arrays)
    assert report.copy_count == 0
    for key, original in arrays.items():
        assert loaded[key].dtype == original.dtype
        assert loaded[key].shape == original.shape
        assert as_bytes(loaded[key]) == as_bytes(original)
