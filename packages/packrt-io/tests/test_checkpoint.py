"""save_checkpoint / load_checkpoint carry a module's whole state: tensors, ties, extra state, metadata."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packrt_core
import packrt_io
from packrt_core.errors import CheckpointError, DTypeError, StateDictError


def _model(fake: type[Any], seed: int = 0, **kwargs: Any) -> Any:
    rng = np.random.default_rng(seed)
    tensors = {
        "embed.weight": packrt_core.from_numpy(rng.standard_normal((6, 4)).astype(np.float32)),
        "block.0.weight": packrt_core.from_numpy(rng.standard_normal((4, 4)).astype(np.float32)),
        "block.0.bias": packrt_core.from_numpy(rng.standard_normal(4).astype(np.float16)),
        "block.0.steps": packrt_core.from_numpy(np.arange(3, dtype=np.int64)),
    }
    return fake(tensors, **kwargs)


def _values(module: Any) -> dict[str, np.ndarray[Any, Any]]:
    return {key: np.array(value.numpy()) for key, value in module.state_dict().items() if hasattr(value, "numpy")}


def _assert_same_values(left: Any, right: Any) -> None:
    a, b = _values(left), _values(right)
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize("max_shard_size", [None, 1, 64, "1KB"], ids=["single", "one-a-shard", "64B", "1KB"])
def test_a_saved_module_loads_back_with_identical_values(
    tmp_path: Path, fake_module: type[Any], max_shard_size: int | str | None
) -> None:
    source = _model(fake_module, seed=1)
    written = packrt_io.save_checkpoint(source, tmp_path / "ckpt", max_shard_size=max_shard_size)
    target = _model(fake_module, seed=2)
    result = packrt_io.load_checkpoint(target, written)
    assert result.missing_keys == [] and result.unexpected_keys == []
    _assert_same_values(source, target)
    # The directory form finds the same checkpoint.
    again = _model(fake_module, seed=3)
    packrt_io.load_checkpoint(again, tmp_path / "ckpt")
    _assert_same_values(source, again)


def test_sharding_writes_numbered_shards_and_an_index(tmp_path: Path, fake_module: type[Any]) -> None:
    written = packrt_io.save_checkpoint(_model(fake_module), tmp_path, max_shard_size=70)
    assert written == tmp_path / "model.safetensors.index.json"
    index = json.loads(written.read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert shards == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert index["metadata"]["total_size"] == 96 + 64 + 8 + 24
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*shards, written.name])


def test_without_a_shard_limit_one_file_is_written(tmp_path: Path, fake_module: type[Any]) -> None:
    written = packrt_io.save_checkpoint(_model(fake_module), tmp_path / "m.safetensors", max_shard_size="2GB")
    assert written == tmp_path / "m.safetensors"
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]
    assert packrt_io.read_metadata(written) == {"format": "pt"}


def test_loading_binds_copy_on_write_views_of_the_file(tmp_path: Path, fake_module: type[Any]) -> None:
    path = packrt_io.save_checkpoint(_model(fake_module), tmp_path / "m.safetensors")
    before = path.read_bytes()
    target = _model(fake_module, seed=5)
    packrt_io.load_checkpoint(target, path)
    target.slots["embed.weight"].numpy()[...] = 0.0
    assert path.read_bytes() == before
    assert target.load_calls == [{"strict": True, "assign": True, "pack": False, "weight_residency": None}]


def test_load_options_reach_the_module(tmp_path: Path, fake_module: type[Any]) -> None:
    path = packrt_io.save_checkpoint(_model(fake_module), tmp_path / "m.safetensors")
    target = _model(fake_module, seed=5)
    packrt_io.load_checkpoint(target, path, strict=False, assign=False, pack=True, weight_residency="borrowed")
    assert target.load_calls == [{"strict": False, "assign": False, "pack": True, "weight_residency": "borrowed"}]


class TestTies:
    def test_a_tied_tensor_is_saved_once_and_its_other_name_recorded(
        self, tmp_path: Path, fake_module: type[Any]
    ) -> None:
        source = _model(fake_module, ties={"head.weight": "embed.weight"})
        path = packrt_io.save_checkpoint(source, tmp_path / "m.safetensors")
        info = packrt_io.inspect_checkpoint(path)
        assert "head.weight" not in info.tensors
        assert json.loads(info.metadata["packrt.ties"]) == {"head.weight": "embed.weight"}

    @pytest.mark.parametrize("max_shard_size", [None, 1])
    def test_a_tie_comes_back_as_one_object_under_both_names(
        self, tmp_path: Path, fake_module: type[Any], max_shard_size: int | None
    ) -> None:
        source = _model(fake_module, ties={"head.weight": "embed.weight"})
        path = packrt_io.save_checkpoint(source, tmp_path / "ckpt", max_shard_size=max_shard_size)
        # The target is untied: loading with assign=True makes it tied.
        target = _model(fake_module, seed=9)
        target.slots["head.weight"] = packrt_core.from_numpy(np.zeros((6, 4), np.float32))
        packrt_io.load_checkpoint(target, path)
        assert target.slots["head.weight"] is target.slots["embed.weight"]
        np.testing.assert_array_equal(target.slots["head.weight"].numpy(), source.slots["embed.weight"].numpy())

    def test_a_tie_to_a_tensor_the_checkpoint_lacks_is_refused(self, tmp_path: Path, fake_module: type[Any]) -> None:
        path = tmp_path / "m.safetensors"
        packrt_io.save_file({"a": np.zeros(2, np.float32)}, path, metadata={"packrt.ties": '{"b": "zzz"}'})
        target = fake_module({"a": packrt_core.zeros(2), "b": packrt_core.zeros(2)})
        with pytest.raises(CheckpointError, match=r"m\.safetensors'.*tie 'b' -> 'zzz' names a tensor the checkpoint"):
            packrt_io.load_checkpoint(target, path)
        assert target.load_calls == []

    @pytest.mark.parametrize(
        ("ties", "pattern"),
        [
            ("not json", "'packrt.ties' is not valid JSON"),
            ('["a"]', "must be a JSON object of alias -> key strings"),
            ('{"a": "a"}', "'a' is both a saved tensor and a tie to 'a'"),
        ],
    )
    def test_a_malformed_tie_record_is_refused(self, tmp_path: Path, ties: str, pattern: str) -> None:
        path = tmp_path / "m.safetensors"
        packrt_io.save_file({"a": np.zeros(2, np.float32)}, path, metadata={"packrt.ties": ties})
        with pytest.raises(CheckpointError, match=pattern):
            packrt_io.inspect_checkpoint(path).ties()

    def test_one_object_under_two_state_keys_is_saved_once(self, tmp_path: Path, fake_module: type[Any]) -> None:
        class Emitting(fake_module):  # type: ignore[misc]
            def state_dict(self, **kwargs: Any) -> dict[str, Any]:
                return dict(self.slots)  # every name, as PyTorch's state_dict does

        shared = packrt_core.ones(3)
        path = packrt_io.save_checkpoint(Emitting({"a": shared, "b": shared}), tmp_path / "m.safetensors")
        info = packrt_io.inspect_checkpoint(path)
        assert list(info.tensors) == ["a"]
        assert info.ties() == {"b": "a"}


class TestExtraState:
    def test_extra_state_round_trips_as_json(self, tmp_path: Path, fake_module: type[Any]) -> None:
        extra = {"": {"version": 3}, "block.0": ["relu", 1.5, None, True]}
        source = _model(fake_module, extra=extra)
        path = packrt_io.save_checkpoint(source, tmp_path / "m.safetensors", max_shard_size=1)
        metadata = packrt_io.inspect_checkpoint(path).metadata
        assert json.loads(metadata["packrt.extra_state."]) == {"version": 3}
        assert json.loads(metadata["packrt.extra_state.block.0"]) == ["relu", 1.5, None, True]
        target = _model(fake_module, extra={"": None, "block.0": None})
        packrt_io.load_checkpoint(target, path)
        assert target.extra == extra

    @pytest.mark.parametrize(("value", "shown"), [({1, 2}, "set"), (float("nan"), "float"), (object(), "object")])
    def test_extra_state_that_is_not_json_is_a_type_error_naming_the_module(
        self, tmp_path: Path, fake_module: type[Any], value: Any, shown: str
    ) -> None:
        source = _model(fake_module, extra={"block.0": value})
        with pytest.raises(TypeError, match=f"extra state of module 'block.0' is a {shown} that is not JSON"):
            packrt_io.save_checkpoint(source, tmp_path / "m.safetensors")
        assert list(tmp_path.iterdir()) == []

    def test_extra_state_that_is_not_json_on_disk_is_refused(self, tmp_path: Path, fake_module: type[Any]) -> None:
        path = tmp_path / "m.safetensors"
        packrt_io.save_file({"a": np.zeros(2, np.float32)}, path, metadata={"packrt.extra_state.enc": "{oops"})
        target = fake_module({"a": packrt_core.zeros(2)}, extra={"enc": 1})
        with pytest.raises(CheckpointError, match="extra state of module 'enc' is not valid JSON"):
            packrt_io.load_checkpoint(target, path)
        assert target.extra == {"enc": 1}


class TestMetadata:
    def test_user_metadata_is_stored_in_every_file(self, tmp_path: Path, fake_module: type[Any]) -> None:
        meta = {"format": "np", "note": "trained 3 epochs"}
        index = packrt_io.save_checkpoint(_model(fake_module), tmp_path, max_shard_size=1, metadata=meta)
        info = packrt_io.inspect_checkpoint(index)
        assert info.metadata["note"] == "trained 3 epochs"
        assert info.metadata["format"] == "np"
        for shard in info.shards:
            assert packrt_io.read_metadata(shard)["note"] == "trained 3 epochs"

    @pytest.mark.parametrize(
        ("metadata", "pattern"),
        [
            ({"packrt.ties": "{}"}, "metadata key 'packrt.ties' uses the prefix 'packrt.'"),
            ({"epochs": 3}, "metadata entry 'epochs': 3 is not str -> str"),
        ],
    )
    def test_reserved_or_non_string_metadata_is_refused(
        self, tmp_path: Path, fake_module: type[Any], metadata: dict[str, Any], pattern: str
    ) -> None:
        with pytest.raises(CheckpointError, match=pattern):
            packrt_io.save_checkpoint(_model(fake_module), tmp_path / "m.safetensors", metadata=metadata)
        assert list(tmp_path.iterdir()) == []


class TestRefusedLoads:
    def test_a_shape_that_does_not_fit_raises_the_modules_error_and_changes_nothing(
        self, tmp_path: Path, fake_module: type[Any]
    ) -> None:
        path = packrt_io.save_checkpoint(_model(fake_module), tmp_path / "m.safetensors")
        target = _model(fake_module, seed=4)
        target.slots["embed.weight"] = packrt_core.zeros(7, 4)
        before = _values(target)
        with pytest.raises(StateDictError, match=r"size mismatch for 'embed\.weight'"):
            packrt_io.load_checkpoint(target, path)
        after = _values(target)
        assert all(np.array_equal(before[key], after[key]) for key in before)

    def test_a_missing_key_under_strict_raises_and_changes_nothing(
        self, tmp_path: Path, fake_module: type[Any]
    ) -> None:
        path = tmp_path / "m.safetensors"
        packrt_io.save_file({"embed.weight": np.ones((6, 4), np.float32)}, path)
        target = _model(fake_module)
        original = dict(target.slots)
        with pytest.raises(StateDictError, match=r"missing keys \['block\.0\.weight'"):
            packrt_io.load_checkpoint(target, path)
        assert target.slots == original
        result = packrt_io.load_checkpoint(target, path, strict=False)
        assert result.missing_keys == ["block.0.weight", "block.0.bias", "block.0.steps"]

    def test_a_dtype_packrt_tensors_cannot_hold_names_file_and_tensor(
        self, tmp_path: Path, fake_module: type[Any]
    ) -> None:
        path = tmp_path / "m.safetensors"
        packrt_io.save_file({"counts": np.zeros(2, np.uint32)}, path)
        with pytest.raises(DTypeError, match=r"m\.safetensors', tensor 'counts': numpy dtype uint32"):
            packrt_io.load_checkpoint(fake_module({"counts": packrt_core.zeros(2)}), path)

    def test_a_tensor_without_storage_cannot_be_saved(self, tmp_path: Path, fake_module: type[Any]) -> None:
        with packrt_core.meta_init():
            declared = packrt_core.zeros(3)
        with pytest.raises(CheckpointError, match="tensor 'w' has no storage"):
            packrt_io.save_checkpoint(fake_module({"w": declared}), tmp_path / "m.safetensors")

    def test_a_state_value_that_is_not_a_tensor_is_refused_by_key(self, tmp_path: Path, fake_module: type[Any]) -> None:
        with pytest.raises(CheckpointError, match="tensor 'w' is a list"):
            packrt_io.save_checkpoint(fake_module({"w": [1.0]}), tmp_path / "m.safetensors")


class _Bar:
    made: ClassVar[list[_Bar]] = []

    def __init__(self, total: int, desc: str, **kwargs: Any) -> None:
        self.total, self.desc, self.done, self.closed = total, desc, 0, False
        _Bar.made.append(self)

    def update(self, count: int) -> None:
        self.done += count

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_tqdm(monkeypatch: pytest.MonkeyPatch) -> list[_Bar]:
    module = types.ModuleType("tqdm")
    module.tqdm = _Bar  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tqdm", module)
    _Bar.made = []
    return _Bar.made


class TestProgress:
    def test_a_forced_bar_counts_every_shard_byte(
        self, tmp_path: Path, fake_module: type[Any], fake_tqdm: list[_Bar]
    ) -> None:
        index = packrt_io.save_checkpoint(_model(fake_module), tmp_path, max_shard_size=1)
        packrt_io.load_checkpoint(_model(fake_module), index, progress=True)
        (bar,) = fake_tqdm
        assert bar.total == bar.done == packrt_io.inspect_checkpoint(index).total_bytes
        assert bar.closed
        assert "model.safetensors.index.json" in bar.desc

    def test_a_terminal_gets_a_bar_by_default(
        self, tmp_path: Path, fake_module: type[Any], fake_tqdm: list[_Bar], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = packrt_io.save_checkpoint(_model(fake_module), tmp_path / "m.safetensors")
        monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
        packrt_io.load_checkpoint(_model(fake_module), path)
        assert len(fake_tqdm) == 1
        packrt_io.load_checkpoint(_model(fake_module), path, progress=False)
        assert len(fake_tqdm) == 1

    def test_a_non_terminal_stays_quiet_by_default(
        self, tmp_path: Path, fake_module: type[Any], fake_tqdm: list[_Bar]
    ) -> None:
        path = packrt_io.save_checkpoint(_model(fake_module), tmp_path / "m.safetensors")
        packrt_io.load_checkpoint(_model(fake_module), path)
        assert fake_tqdm == []

    def test_without_tqdm_a_forced_bar_is_quietly_skipped(
        self, tmp_path: Path, fake_module: type[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(sys.modules, "tqdm", None)
        path = packrt_io.save_checkpoint(_model(fake_module), tmp_path / "m.safetensors")
        packrt_io.load_checkpoint(_model(fake_module), path, progress=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    limit=st.integers(1, 200),
)
def test_any_shard_limit_round_trips_and_keeps_every_shard_within_it_or_alone(
    tmp_path_factory: pytest.TempPathFactory, fake_module: type[Any], sizes: list[int], limit: int
) -> None:
    directory = tmp_path_factory.mktemp("ckpt")
    tensors = {f"t{i}": packrt_core.from_numpy(np.arange(n, dtype=np.float32) + i) for i, n in enumerate(sizes)}
    written = packrt_io.save_checkpoint(fake_module(tensors), directory, max_shard_size=limit)
    info = packrt_io.inspect_checkpoint(written)
    per_shard: dict[str, list[int]] = {}
    for tensor in info.tensors.values():
        per_shard.setdefault(tensor.file, []).append(tensor.nbytes)
    for held in per_shard.values():
        assert sum(held) <= limit or len(held) == 1
    target = fake_module({key: packrt_core.zeros(n) for key, n in zip(tensors, sizes, strict=True)})
    packrt_io.load_checkpoint(target, written)
    for key, value in tensors.items():
        np.testing.assert_array_equal(target.slots[key].numpy(), value.numpy())
