"""Checkpoints with real ``packrt.nn`` modules: ties, extra state, meta init, transactional refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packrt_core as p
import packrt_io
from packrt_core.errors import StateDictError

nn = pytest.importorskip("packrt_core.nn")


class Block(nn.Module):  # type: ignore[misc,name-defined]
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(p.randn(width, 4))
        self.bias = nn.Parameter(p.randn(4))
        self.register_buffer("steps", p.arange(3))


class Net(nn.Module):  # type: ignore[misc,name-defined]
    def __init__(self, width: int = 3) -> None:
        super().__init__()
        self.embed = Block(width)
        self.head = Block(width)
        self.head.weight = self.embed.weight
        self.config: dict[str, Any] = {"act": "gelu"}

    def get_extra_state(self) -> Any:
        return self.config

    def set_extra_state(self, state: Any) -> None:
        self.config = state


def _values(module: Any) -> dict[str, np.ndarray[Any, Any]]:
    return {k: np.array(v.numpy()) for k, v in module.state_dict().items() if k != "_extra_state"}


@pytest.mark.parametrize("max_shard_size", [None, 40])
def test_a_meta_declared_net_loads_a_saved_net_with_ties_and_extra_state(
    tmp_path: Path, max_shard_size: int | None
) -> None:
    source = Net()
    source.config = {"act": "silu", "eps": 1e-5}
    packrt_io.save_checkpoint(source, tmp_path, max_shard_size=max_shard_size)
    with p.meta_init():
        target = Net()
    assert not target.embed.weight.has_storage
    result = packrt_io.load_checkpoint(target, tmp_path)
    assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []
    assert target.head.weight is target.embed.weight
    assert target.config == {"act": "silu", "eps": 1e-5}
    expected, got = _values(source), _values(target)
    assert list(expected) == list(got)
    for key in expected:
        np.testing.assert_array_equal(expected[key], got[key], err_msg=key)


def test_a_shape_mismatch_leaves_the_real_module_unchanged(tmp_path: Path) -> None:
    packrt_io.save_checkpoint(Net(width=3), tmp_path / "m.safetensors")
    target = Net(width=5)
    before = _values(target)
    with pytest.raises(StateDictError, match=r"embed\.weight"):
        packrt_io.load_checkpoint(target, tmp_path / "m.safetensors")
    after = _values(target)
    assert all(np.array_equal(before[key], after[key]) for key in before)
    assert target.config == {"act": "gelu"}


def test_check_finds_no_difference_between_a_net_and_its_own_checkpoint(tmp_path: Path) -> None:
    path = packrt_io.save_checkpoint(Net(), tmp_path / "m.safetensors")
    with p.meta_init():
        declared = Net()
    assert packrt_io.check_checkpoint(declared, path).matches
    wide = packrt_io.check_checkpoint(Net(width=5), path)
    assert [m.key for m in wide.mismatched] == ["embed.weight"]
