"""Sharded saves: sizes parse, shards fill in order, the index lands last, stale files go."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packrt_core
import packrt_io
from packrt_core.errors import CheckpointError
from packrt_io import _writer
from packrt_io._sharding import plan_shards, target_for


@pytest.mark.parametrize(
    ("size", "count"),
    [
        (123, 123),
        ("500MB", 500 * 10**6),
        ("2GB", 2 * 10**9),
        ("2GiB", 2 * 2**30),
        ("1.5 kb", 1500),
        ("64", 64),
        ("10b", 10),
    ],
)
def test_a_shard_size_is_bytes_or_a_unit_string(size: int | str, count: int) -> None:
    assert packrt_io.parse_size(size) == count


@pytest.mark.parametrize("size", [0, -5, True, "5XB", "MB", "", "0GB", 1.5, None], ids=repr)
def test_a_shard_size_that_is_not_a_positive_size_is_refused(size: Any) -> None:
    with pytest.raises(CheckpointError, match=f"max_shard_size {size!r} is not a positive size"):
        packrt_io.parse_size(size)


def test_shards_fill_in_order_and_an_oversize_tensor_sits_alone() -> None:
    sizes = {"a": 40, "b": 50, "c": 300, "d": 10, "e": 90, "f": 1}
    assert plan_shards(sizes, 100) == [["a", "b"], ["c"], ["d", "e"], ["f"]]


@pytest.mark.parametrize(
    ("name", "single", "index"),
    [
        pytest.param("x.safetensors", "x.safetensors", "x.safetensors.index.json", id="file"),
        pytest.param("x.safetensors.index.json", "x.safetensors", "x.safetensors.index.json", id="index"),
        pytest.param("x.index.json", "x.safetensors", "x.index.json", id="index-without-safetensors"),
        pytest.param("out", "out/model.safetensors", "out/model.safetensors.index.json", id="directory"),
    ],
)
def test_a_save_target_is_a_file_an_index_or_a_directory(tmp_path: Path, name: str, single: str, index: str) -> None:
    target = target_for(tmp_path / name)
    assert target.single == tmp_path / single
    assert target.index == tmp_path / index
    if name == "out":
        assert (tmp_path / "out").is_dir()


def _module(fake: type[Any], count: int, value: float = 1.0) -> Any:
    return fake({f"w{i}": packrt_core.from_numpy(np.full(8, value + i, np.float32)) for i in range(count)})


def test_a_smaller_resave_removes_the_shards_the_new_index_no_longer_names(
    tmp_path: Path, fake_module: type[Any]
) -> None:
    packrt_io.save_checkpoint(_module(fake_module, 4), tmp_path, max_shard_size=32)
    assert len(list(tmp_path.glob("model-*-of-00004.safetensors"))) == 4
    packrt_io.save_checkpoint(_module(fake_module, 4), tmp_path, max_shard_size=64)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]


def test_switching_between_single_and_sharded_leaves_only_the_current_form(
    tmp_path: Path, fake_module: type[Any]
) -> None:
    packrt_io.save_checkpoint(_module(fake_module, 3), tmp_path)
    packrt_io.save_checkpoint(_module(fake_module, 3), tmp_path, max_shard_size=32)
    assert not (tmp_path / "model.safetensors").exists()
    packrt_io.save_checkpoint(_module(fake_module, 3, value=7.0), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]
    arrays, _, _ = packrt_io.load_checkpoint_arrays(tmp_path)
    assert (arrays["w0"] == 7.0).all()


def test_files_an_unreadable_old_index_does_not_name_are_left_alone(tmp_path: Path, fake_module: type[Any]) -> None:
    (tmp_path / "model.safetensors.index.json").write_text("{broken")
    keep = tmp_path / "model-00009-of-00009.safetensors"
    keep.write_bytes(b"user data")
    packrt_io.save_checkpoint(_module(fake_module, 2), tmp_path)
    assert keep.read_bytes() == b"user data"
    assert not (tmp_path / "model.safetensors.index.json").exists()


def test_a_resave_that_dies_before_the_index_switch_keeps_the_previous_checkpoint_loadable(
    tmp_path: Path, fake_module: type[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    packrt_io.save_checkpoint(_module(fake_module, 2), tmp_path, max_shard_size=32)
    index = tmp_path / "model.safetensors.index.json"
    before = index.read_bytes()
    written: list[str] = []

    def crash_at_index(temporary: Path, final: Path) -> None:
        written.append(final.name)
        if final.name.endswith(".json"):
            raise OSError("power cut")

    monkeypatch.setattr(_writer, "before_replace", crash_at_index)
    with pytest.raises(OSError, match="power cut"):
        packrt_io.save_checkpoint(_module(fake_module, 2, value=5.0), tmp_path, max_shard_size=32)
    assert len(written) == 3
    assert written[2] == "model.safetensors.index.json"
    assert index.read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))
    # The new shards have names of their own: the old index still names intact old shards.
    with pytest.warns(packrt_io.CheckpointLeftoverWarning, match="ignored 2 leftover file") as caught:
        arrays, info, _ = packrt_io.load_checkpoint_arrays(tmp_path)
    assert (arrays["w0"] == 1.0).all()
    assert (arrays["w1"] == 2.0).all()
    assert sorted(path.name for path in info.ignored) == sorted(written[:2])
    assert all(name in str(caught[0].message) for name in written[:2])


def test_a_resave_with_the_same_shard_count_writes_beside_the_current_shards(
    tmp_path: Path, fake_module: type[Any]
) -> None:
    packrt_io.save_checkpoint(_module(fake_module, 2), tmp_path, max_shard_size=32)
    first = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    assert first == {"w0": "model-00001-of-00002.safetensors", "w1": "model-00002-of-00002.safetensors"}
    packrt_io.save_checkpoint(_module(fake_module, 2, value=3.0), tmp_path, max_shard_size=32)
    second = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    token = second["w0"].split("-")[1]
    assert second == {
        "w0": f"model-{token}-00001-of-00002.safetensors",
        "w1": f"model-{token}-00002-of-00002.safetensors",
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*second.values(), "model.safetensors.index.json"])
    arrays, _, _ = packrt_io.load_checkpoint_arrays(tmp_path)
    assert (arrays["w1"] == 4.0).all()


def test_the_index_records_the_total_size_and_sorted_weight_map(tmp_path: Path, fake_module: type[Any]) -> None:
    index = packrt_io.save_checkpoint(_module(fake_module, 3), tmp_path / "m.index.json", max_shard_size=40)
    body = json.loads(index.read_text())
    assert body["metadata"]["total_size"] == 3 * 32
    assert body["metadata"]["format"] == "pt"
    assert list(body["weight_map"]) == ["w0", "w1", "w2"]
    assert set(body["weight_map"].values()) == {f"m-0000{i}-of-00003.safetensors" for i in (1, 2, 3)}
