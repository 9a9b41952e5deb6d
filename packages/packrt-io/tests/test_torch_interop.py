"""Files written by torch's safetensors load identically, and torch reads packrt's files identically."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import packrt_io

# safetensors dtype name -> torch dtype attribute name.
_TORCH_NAMES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64",
    "U8": "uint8", "U16": "uint16", "U32": "uint32", "U64": "uint64", "BOOL": "bool",
}  # fmt: skip


def _torch_bytes(tensor: Any, torch: ModuleType) -> bytes:
    flat = tensor.contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).numpy().tobytes()) if flat.numel() else b""


def _numpy_bytes(array: np.ndarray[Any, Any]) -> bytes:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).tobytes()


def test_a_torch_written_file_loads_with_identical_values(
    tmp_path: Path, torch: ModuleType, file_dtypes: dict[str, np.dtype[Any]]
) -> None:
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for name, attr in _TORCH_NAMES.items():
        raw = torch.randint(0, 256, (3, 4 * file_dtypes[name].itemsize), generator=generator, dtype=torch.uint8)
        tensors[f"t_{name}"] = (raw % 2).bool() if name == "BOOL" else raw.view(getattr(torch, attr))
    tensors["scalar"] = torch.tensor(1.25)
    path = tmp_path / "torch.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    arrays, report = packrt_io.load_arrays(path)
    assert report.metadata == {"format": "pt"}
    assert report.copy_count == 0
    assert set(arrays) == set(tensors)
    for key, tensor in tensors.items():
        assert arrays[key].shape == tuple(tensor.shape), key
        assert _numpy_bytes(arrays[key]) == _torch_bytes(tensor, torch), key
    for name in _TORCH_NAMES:
        assert arrays[f"t_{name}"].dtype == file_dtypes[name]


def test_a_packrt_written_file_loads_in_torch_with_identical_values(
    tmp_path: Path, torch: ModuleType, dtype_name: str, file_dtypes: dict[str, np.dtype[Any]], sample: Any
) -> None:
    from safetensors.torch import load_file

    array = sample(file_dtypes[dtype_name], (5, 3), seed=3)
    path = tmp_path / "packrt.safetensors"
    packrt_io.save_file({"x": array, "empty": np.zeros((0, 2), file_dtypes[dtype_name])}, path)
    loaded = load_file(str(path))
    assert loaded["x"].dtype == getattr(torch, _TORCH_NAMES[dtype_name])
    assert tuple(loaded["x"].shape) == (5, 3)
    assert _torch_bytes(loaded["x"], torch) == _numpy_bytes(array)
    assert tuple(loaded["empty"].shape) == (0, 2)


def test_torch_tensors_are_accepted_through_their_numpy_view(tmp_path: Path, torch: ModuleType) -> None:
    path = tmp_path / "direct.safetensors"
    packrt_io.save_file({"w": torch.arange(4, dtype=torch.float32)}, path)
    np.testing.assert_array_equal(packrt_io.load_arrays(path)[0]["w"], [0.0, 1.0, 2.0, 3.0])


@pytest.mark.parametrize("shape", [(), (1,), (2, 1, 3)], ids=["0d", "1d", "3d"])
def test_shapes_agree_with_torch_both_ways(tmp_path: Path, torch: ModuleType, shape: tuple[int, ...]) -> None:
    from safetensors.torch import load_file, save_file

    path = tmp_path / "shape.safetensors"
    save_file({"t": torch.zeros(shape)}, str(path))
    assert packrt_io.load_arrays(path)[0]["t"].shape == shape
    packrt_io.save_file({"t": np.zeros(shape, np.float32)}, path)
    assert tuple(load_file(str(path))["t"].shape) == shape
