"""Files written by torch's safetensors load identically, and torch reads packrt's files identically.

Both hold for single files and for Hugging Face style shards with a ``model.safetensors.index.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import packrt_core
import packrt_io
from packrt_core import nn

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


# -- sharded checkpoints -----------------------------------------------------------------------------

# Tensor dtypes packrt Tensors hold, for a module saved through save_checkpoint.
_MODULE_DTYPES = ("F64", "F32", "F16", "BF16", "I8", "I16", "I32", "I64", "U8", "BOOL")


def test_a_packrt_written_sharded_checkpoint_loads_in_torch_shard_by_shard(
    tmp_path: Path, torch: ModuleType, file_dtypes: dict[str, np.dtype[Any]], sample: Any, fake_module: Any
) -> None:
    from safetensors.torch import load_file

    arrays = {f"layer.{name}": sample(file_dtypes[name], (4, 6), seed=i) for i, name in enumerate(_MODULE_DTYPES)}
    module = fake_module({key: packrt_core.from_numpy(array) for key, array in arrays.items()})
    index = packrt_io.save_checkpoint(module, tmp_path / "ckpt", max_shard_size=200)
    weight_map = json.loads(index.read_text())["weight_map"]
    assert set(weight_map) == set(arrays)
    shards = sorted(set(weight_map.values()))
    assert len(shards) > 1
    seen: dict[str, Any] = {}
    for shard in shards:
        loaded = load_file(str(index.parent / shard))
        # Each shard holds exactly the tensors the index sends to it.
        assert set(loaded) == {key for key, name in weight_map.items() if name == shard}, shard
        seen.update(loaded)
    for key, array in arrays.items():
        name = key.split(".")[1]
        assert seen[key].dtype == getattr(torch, _TORCH_NAMES[name]), key
        assert tuple(seen[key].shape) == array.shape, key
        assert _torch_bytes(seen[key], torch) == _numpy_bytes(array), key


def test_a_torch_written_sharded_checkpoint_loads_into_packrt_linear_layers(tmp_path: Path, torch: ModuleType) -> None:
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3))
    for parameter in reference.parameters():
        parameter.data = torch.randn(parameter.shape, generator=generator)
    state = {key: value.detach().contiguous() for key, value in reference.state_dict().items()}
    # Hugging Face layout, written with torch's own tools: one shard per layer, then the index.
    shards = {"0": "model-00001-of-00002.safetensors", "1": "model-00002-of-00002.safetensors"}
    weight_map = {key: shards[key.split(".")[0]] for key in state}
    for prefix, shard in shards.items():
        save_file(
            {k: v for k, v in state.items() if k.startswith(prefix + ".")}, str(tmp_path / shard), {"format": "pt"}
        )
    total = sum(value.numel() * value.element_size() for value in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))

    with packrt_core.meta_init():
        model = nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 3))
    result = packrt_io.load_checkpoint(model, tmp_path)
    assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []
    loaded = model.state_dict()
    assert set(loaded) == set(state)
    for key, value in state.items():
        assert _numpy_bytes(loaded[key].numpy()) == _torch_bytes(value, torch), key
    x = torch.randn(2, 6, generator=generator)
    expected = reference(x).detach().numpy()
    served = model(packrt_core.from_numpy(x.numpy())).numpy()
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)
