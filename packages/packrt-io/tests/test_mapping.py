"""Mapped loads are zero-copy views, copy-on-write, and copy only what they must (misaligned data)."""

from __future__ import annotations

import mmap
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packrt_io

RawWriter = Callable[..., Path]


def _buffer_owner(array: np.ndarray[Any, Any]) -> object:
    # Follow the view chain down to the object that owns the memory (a memoryview wraps the mmap).
    owner: object = array
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    if isinstance(owner, memoryview):
        owner = owner.obj
    return owner


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    packrt_io.save_file(
        {"weight": np.arange(12, dtype=np.float32).reshape(3, 4), "bias": np.full(4, 0.5, np.float64)}, path
    )
    return path


def test_mapped_arrays_are_views_of_one_file_mapping(checkpoint: Path) -> None:
    arrays, report = packrt_io.load_arrays(checkpoint)
    owners = {key: _buffer_owner(array) for key, array in arrays.items()}
    assert all(isinstance(owner, mmap.mmap) for owner in owners.values())
    assert owners["weight"] is owners["bias"]
    mapping = owners["weight"]
    assert isinstance(mapping, mmap.mmap)
    assert len(mapping) == checkpoint.stat().st_size
    whole = np.frombuffer(mapping, dtype=np.uint8)
    assert np.shares_memory(arrays["weight"], whole)
    assert np.shares_memory(arrays["bias"], whole)
    assert report.mapped
    assert report.copy_count == 0
    assert report.copied_bytes == 0


def test_writing_to_a_mapped_array_never_changes_the_file(checkpoint: Path) -> None:
    before = checkpoint.read_bytes()
    arrays, _ = packrt_io.load_arrays(checkpoint)
    assert arrays["weight"].flags.writeable
    arrays["weight"][:] = -1.0
    arrays["bias"] += 1.0
    assert (arrays["weight"] == -1.0).all()
    assert checkpoint.read_bytes() == before
    fresh, _ = packrt_io.load_arrays(checkpoint)
    np.testing.assert_array_equal(fresh["weight"], np.arange(12, dtype=np.float32).reshape(3, 4))
    np.testing.assert_array_equal(fresh["bias"], np.full(4, 0.5))


def test_read_mode_gives_each_tensor_fresh_memory_of_its_own(checkpoint: Path) -> None:
    before = checkpoint.read_bytes()
    arrays, report = packrt_io.load_arrays(checkpoint, mmap=False)
    assert not report.mapped
    for array in arrays.values():
        assert array.flags.owndata or (isinstance(array.base, np.ndarray) and array.base.flags.owndata)
        assert not isinstance(_buffer_owner(array), mmap.mmap)
        assert array.flags.aligned
    assert not np.shares_memory(arrays["weight"], arrays["bias"])
    arrays["weight"][:] = 9.0
    assert checkpoint.read_bytes() == before


def test_saving_over_a_mapped_checkpoint_leaves_loaded_arrays_intact(checkpoint: Path) -> None:
    arrays, _ = packrt_io.load_arrays(checkpoint)
    packrt_io.save_file({"weight": np.zeros((3, 4), np.float32)}, checkpoint)
    # The old mapping still holds the old file's pages: the rename gave the path a new inode.
    np.testing.assert_array_equal(arrays["weight"], np.arange(12, dtype=np.float32).reshape(3, 4))
    fresh, _ = packrt_io.load_arrays(checkpoint)
    assert list(fresh) == ["weight"]
    assert not fresh["weight"].any()


def _misaligned_file(write_raw: RawWriter) -> tuple[Path, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    # One U8 byte first pushes the F32 tensor to data offset 1; the header pads to a multiple of 8,
    # so the F32 data sits at an odd file offset.
    small = np.array([7], np.uint8)
    values = np.array([1.5, -2.25, 3.0], np.float32)
    header = {
        "a_byte": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        "b_floats": {"dtype": "F32", "shape": [3], "data_offsets": [1, 13]},
        "c_tail": {"dtype": "U8", "shape": [3], "data_offsets": [13, 16]},
    }
    data = small.tobytes() + values.tobytes() + bytes([4, 5, 6])
    return write_raw(header, data), values, small


def test_a_misaligned_tensor_is_copied_and_counted_in_the_report(write_raw: RawWriter) -> None:
    path, values, small = _misaligned_file(write_raw)
    arrays, report = packrt_io.load_arrays(path)
    np.testing.assert_array_equal(arrays["b_floats"], values)
    np.testing.assert_array_equal(arrays["a_byte"], small)
    np.testing.assert_array_equal(arrays["c_tail"], [4, 5, 6])
    assert arrays["b_floats"].flags.aligned
    assert report.unaligned_copies == ("b_floats",)
    assert report.copy_count == 1
    assert report.copied_bytes == 12
    # Single bytes are always aligned, so those stay views of the mapping.
    assert isinstance(_buffer_owner(arrays["a_byte"]), mmap.mmap)
    assert not isinstance(_buffer_owner(arrays["b_floats"]), mmap.mmap)


def test_read_mode_loads_misaligned_tensors_without_counting_copies(write_raw: RawWriter) -> None:
    path, values, _ = _misaligned_file(write_raw)
    arrays, report = packrt_io.load_arrays(path, mmap=False)
    np.testing.assert_array_equal(arrays["b_floats"], values)
    assert report.copy_count == 0


def test_no_load_path_unpickles(monkeypatch: pytest.MonkeyPatch, checkpoint: Path) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a load path used pickle")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    for use_mmap in (True, False):
        arrays, _ = packrt_io.load_arrays(checkpoint, mmap=use_mmap)
        assert set(arrays) == {"weight", "bias"}
    assert packrt_io.read_metadata(checkpoint) == {}
