"""A sharded index is trusted for nothing: every disagreement with its shards is a named CheckpointError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packrt_io
from packrt_core.errors import CheckpointError, PackrtError


def _shard(directory: Path, name: str, keys: list[str], metadata: dict[str, str] | None = None) -> None:
    arrays = {key: np.full((2, 3), float(len(key)), np.float32) for key in keys}
    packrt_io.save_file(arrays, directory / name, metadata=metadata)


def _index(directory: Path, body: Any, name: str = "model.safetensors.index.json") -> Path:
    path = directory / name
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return path


def _good(directory: Path) -> Path:
    _shard(directory, "a.safetensors", ["w1", "w2"])
    _shard(directory, "b.safetensors", ["w3"])
    weight_map = {"w1": "a.safetensors", "w2": "a.safetensors", "w3": "b.safetensors"}
    return _index(directory, {"metadata": {"total_size": 72}, "weight_map": weight_map})


def _refused(path: Path, pattern: str, *, shard: str | None = None, key: str | None = None) -> None:
    """Both the header-only inspection and the full load refuse ``path``, naming index, shard and key."""
    for attempt in (packrt_io.inspect_checkpoint, packrt_io.load_checkpoint_arrays):
        with pytest.raises(CheckpointError, match=pattern) as caught:
            attempt(path)
        message = str(caught.value)
        assert str(path) in message
        if shard is not None:
            assert f"shard {shard!r}" in message
        if key is not None:
            assert f"tensor {key!r}" in message
        assert isinstance(caught.value, ValueError)
        assert isinstance(caught.value, PackrtError)


def test_a_consistent_index_loads_every_tensor_from_its_shard(tmp_path: Path) -> None:
    index = _good(tmp_path)
    arrays, info, reports = packrt_io.load_checkpoint_arrays(index)
    assert sorted(arrays) == ["w1", "w2", "w3"]
    assert (arrays["w3"] == 2.0).all()
    assert info.sharded
    assert info.index_metadata == {"total_size": 72}
    assert [report.path.name for report in reports] == ["a.safetensors", "b.safetensors"]
    assert {key: t.file for key, t in info.tensors.items()} == {
        "w1": "a.safetensors",
        "w2": "a.safetensors",
        "w3": "b.safetensors",
    }


def test_a_missing_shard_is_refused_naming_it(tmp_path: Path) -> None:
    index = _good(tmp_path)
    (tmp_path / "b.safetensors").unlink()
    _refused(index, "the shard does not exist", shard="b.safetensors", key="w3")


@pytest.mark.parametrize(
    "shard",
    ["../outside.safetensors", "sub/a.safetensors", "/etc/passwd", "..", ".", "", "a\\b.safetensors"],
    ids=["dotdot", "subdir", "absolute", "parent", "self", "empty", "backslash"],
)
def test_a_shard_name_escaping_the_index_directory_is_refused(tmp_path: Path, shard: str) -> None:
    _shard(tmp_path, "a.safetensors", ["w1"])
    index = _index(tmp_path, {"weight_map": {"w1": shard}})
    _refused(index, "is not a plain file name", key="w1")


def test_a_tensor_listed_twice_is_refused_not_overwritten(tmp_path: Path) -> None:
    _shard(tmp_path, "a.safetensors", ["w1"])
    _shard(tmp_path, "b.safetensors", ["w1"])
    body = '{"weight_map": {"w1": "a.safetensors", "w1": "b.safetensors"}}'
    index = _index(tmp_path, body)
    _refused(index, "is listed twice in weight_map \\(shard 'a.safetensors', then 'b.safetensors'\\)", key="w1")


def test_a_duplicated_key_elsewhere_in_the_index_is_refused(tmp_path: Path) -> None:
    _shard(tmp_path, "a.safetensors", ["w1"])
    index = _index(tmp_path, '{"metadata": {"x": 1, "x": 2}, "weight_map": {"w1": "a.safetensors"}}')
    _refused(index, "key 'x' appears twice in one JSON object")


def test_a_shard_holding_a_tensor_the_index_does_not_list_is_refused(tmp_path: Path) -> None:
    _shard(tmp_path, "a.safetensors", ["w1", "stowaway"])
    index = _index(tmp_path, {"weight_map": {"w1": "a.safetensors"}})
    _refused(index, "is in the shard but the index does not list it", shard="a.safetensors", key="stowaway")


def test_a_shard_holding_a_tensor_the_index_places_elsewhere_is_refused(tmp_path: Path) -> None:
    _shard(tmp_path, "a.safetensors", ["w1", "w2"])
    _shard(tmp_path, "b.safetensors", ["w2"])
    index = _index(tmp_path, {"weight_map": {"w1": "a.safetensors", "w2": "b.safetensors"}})
    _refused(
        index,
        "is in the shard but the index lists it under shard 'b.safetensors'",
        shard="a.safetensors",
        key="w2",
    )


def test_an_index_listing_a_tensor_its_shard_lacks_is_refused(tmp_path: Path) -> None:
    _shard(tmp_path, "a.safetensors", ["w1"])
    index = _index(tmp_path, {"weight_map": {"w1": "a.safetensors", "ghost": "a.safetensors"}})
    _refused(index, "listed for this shard by the index, but the shard lacks it", shard="a.safetensors", key="ghost")


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        ("{not json", "is not valid JSON"),
        ('{"weight_map": {"w1": NaN}}', "is not valid JSON.*NaN"),
        ("[1, 2]", "must be a JSON object with a 'weight_map', found list"),
        ('{"metadata": {}}', "needs a 'weight_map' object of tensor -> shard file, found none"),
        ('{"weight_map": ["a.safetensors"]}', "needs a 'weight_map' object.*found list"),
        ('{"weight_map": {"w1": 3}}', "weight_map value must be a shard file name string, found 3"),
        ('{"weight_map": {"w1": null}}', "weight_map value must be a shard file name string, found None"),
        ('{"metadata": [], "weight_map": {}}', "'metadata' must be a JSON object, found list"),
        (b'{"weight_map": {"\xff": "a"}}', "is not valid UTF-8"),
    ],
    ids=["cut", "nan", "array", "no-weight-map", "list-map", "int-value", "null-value", "bad-meta", "utf8"],
)
def test_a_malformed_index_is_refused_naming_the_file(tmp_path: Path, body: str | bytes, pattern: str) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_bytes(body if isinstance(body, bytes) else body.encode())
    _refused(index, pattern)


def test_a_damaged_shard_is_refused_naming_the_shard_file(tmp_path: Path) -> None:
    index = _good(tmp_path)
    shard = tmp_path / "b.safetensors"
    shard.write_bytes(shard.read_bytes()[:-4])
    _refused(shard, "truncated")
    with pytest.raises(CheckpointError, match=r"b\.safetensors"):
        packrt_io.inspect_checkpoint(index)


def test_a_shard_from_another_save_is_refused(tmp_path: Path) -> None:
    _shard(tmp_path, "a.safetensors", ["w1"], metadata={"packrt.save_id": "new"})
    _shard(tmp_path, "b.safetensors", ["w2"], metadata={"packrt.save_id": "old"})
    weight_map = {"w1": "a.safetensors", "w2": "b.safetensors"}
    index = _index(tmp_path, {"metadata": {"packrt.save_id": "new"}, "weight_map": weight_map})
    _refused(index, "written by a different save than the index", shard="b.safetensors")


def test_an_empty_weight_map_is_an_empty_checkpoint(tmp_path: Path) -> None:
    index = _index(tmp_path, {"weight_map": {}})
    arrays, info, reports = packrt_io.load_checkpoint_arrays(index)
    assert arrays == {}
    assert info.tensors == {}
    assert reports == ()


class TestPathForms:
    """A path names a file, an index, or a directory holding exactly one of the two."""

    def test_a_directory_with_an_index_loads_the_index(self, tmp_path: Path) -> None:
        _good(tmp_path)
        assert packrt_io.inspect_checkpoint(tmp_path).index == tmp_path / "model.safetensors.index.json"

    def test_a_directory_with_a_single_file_loads_it(self, tmp_path: Path) -> None:
        _shard(tmp_path, "model.safetensors", ["w"])
        info = packrt_io.inspect_checkpoint(tmp_path)
        assert info.path == tmp_path / "model.safetensors"
        assert not info.sharded

    def test_a_directory_with_neither_names_the_directory_and_what_was_looked_for(self, tmp_path: Path) -> None:
        (tmp_path / "other.safetensors").write_bytes(b"")
        pattern = (
            f"checkpoint directory '{tmp_path}' holds no checkpoint: looked for 'model.safetensors' "
            "and 'model.safetensors.index.json'"
        )
        with pytest.raises(CheckpointError, match=pattern):
            packrt_io.inspect_checkpoint(tmp_path)

    def test_with_both_forms_the_index_wins_and_the_single_file_is_reported_as_a_leftover(self, tmp_path: Path) -> None:
        _good(tmp_path)
        _shard(tmp_path, "model.safetensors", ["w"])
        info = packrt_io.inspect_checkpoint(tmp_path)
        assert info.index == tmp_path / "model.safetensors.index.json"
        assert info.ignored == (tmp_path / "model.safetensors",)
        with pytest.warns(packrt_io.CheckpointLeftoverWarning, match=r"ignored 1 leftover file.*'model\.safetensors'"):
            packrt_io.load_checkpoint_arrays(tmp_path)

    def test_a_missing_single_file_falls_back_to_its_index(self, tmp_path: Path) -> None:
        _good(tmp_path)
        info = packrt_io.inspect_checkpoint(tmp_path / "model.safetensors")
        assert info.index == tmp_path / "model.safetensors.index.json"

    def test_a_missing_index_is_refused_with_its_path(self, tmp_path: Path) -> None:
        with pytest.raises(CheckpointError, match=r"nope\.index\.json': does not exist"):
            packrt_io.inspect_checkpoint(tmp_path / "nope.index.json")

    def test_a_missing_file_is_refused_with_its_path(self, tmp_path: Path) -> None:
        with pytest.raises(CheckpointError, match=r"nope\.safetensors': cannot be opened"):
            packrt_io.inspect_checkpoint(tmp_path / "nope.safetensors")
