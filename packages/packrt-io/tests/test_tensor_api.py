"""load_file / save_file speak packrt Tensors, whose storage is the mapped file."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest

import packrt_io
from packrt_core import from_numpy
from packrt_core.errors import DeviceError


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "meta"])
def test_load_file_places_tensors_on_cpu_only(tmp_path: Path, device: str) -> None:
    path = tmp_path / "w.safetensors"
    packrt_io.save_file({"w": np.ones(2, np.float32)}, path)
    with pytest.raises(DeviceError, match=f"places tensors on 'cpu' only, got device '{device}'"):
        packrt_io.load_file(path, device=device)


def test_load_file_returns_tensors_that_view_the_mapped_file(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    packrt_io.save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, path)
    tensors = packrt_io.load_file(path)
    assert list(tensors) == ["w"]
    tensor = tensors["w"]
    assert tuple(tensor.shape) == (2, 3)
    assert tensor.dtype.numpy == np.float32
    view = tensor.numpy()
    np.testing.assert_array_equal(view, np.arange(6).reshape(2, 3))
    owner: object = view
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    if isinstance(owner, memoryview):
        owner = owner.obj
    assert isinstance(owner, mmap.mmap)


def test_save_file_takes_tensors_and_load_file_mmap_false_reads_them_back(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    packrt_io.save_file({"t": from_numpy(np.arange(4, dtype=np.int64))}, path)
    tensors = packrt_io.load_file(path, mmap=False)
    np.testing.assert_array_equal(tensors["t"].numpy(), [0, 1, 2, 3])
