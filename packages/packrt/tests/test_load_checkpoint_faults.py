"""load_checkpoint interrupted at any step of its load leaves the model as it was (issue: nothing lost)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from faults import Stop, fail_at, files_of, steps

import packrt
from packrt import io, nn
from packrt_core.nn import state as state_module
from packrt_core.nn.parameter import Parameter
from packrt_io import _checkpoint
from packrt_io._layout import CheckpointInfo


def model_and_file(tmp_path: Path) -> tuple[nn.Module, Path]:
    packrt.manual_seed(1)
    saved = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 3))
    path = tmp_path / "ckpt.safetensors"
    io.save_checkpoint(saved, path)
    packrt.manual_seed(2)
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 3))
    model(packrt.ones(1, 8))  # both layers packed, raw weights dropped
    return model, path


def snapshot(model: nn.Module) -> dict[str, Any]:
    """Each slot's object and values, and each layer's pack and residency."""
    slots = {
        key: (id(p), np.array(p.detach().numpy(), copy=True)) for key, p in model.state_dict(keep_vars=True).items()
    }
    layers = {
        i: (id(m._served), m.weight_residency, m.pack_count)
        for i, m in enumerate(model)
        if isinstance(m, nn.PackedLayer)
    }
    return {"slots": slots, "layers": layers}


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ids_and_values = all(
        a["slots"][k][0] == b["slots"][k][0] and np.array_equal(a["slots"][k][1], b["slots"][k][1]) for k in a["slots"]
    )
    return ids_and_values and a["layers"] == b["layers"]


# the steps of load_state_dict the counting injector stops at
STEPS = steps(
    {
        Parameter: ("_drop", "_restore"),
        nn.PackedLayer: ("_install", "_release"),
        nn.Linear: ("_pack",),
        state_module: ("_bind",),
    }
)


def inject(monkeypatch: pytest.MonkeyPatch, at: int) -> list[int]:
    seen = [0]
    for owner, name in STEPS:
        original = getattr(owner, name)

        def step(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            seen[0] += 1
            if seen[0] == at:
                raise Stop(f"stopped at step {at}")
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, step)
    return seen


@pytest.mark.parametrize(
    "options",
    [{"weight_residency": "borrowed"}, {"weight_residency": "packed", "pack": True}, {"assign": False, "pack": True}],
)
def test_load_checkpoint_stopped_at_any_step_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    model, path = model_and_file(tmp_path)
    seen = inject(monkeypatch, at=0)
    io.load_checkpoint(model, path, progress=False, **options)
    total = seen[0]
    monkeypatch.undo()
    assert total >= 2
    for at in range(1, total + 1):
        model, path = model_and_file(tmp_path)
        before = snapshot(model)
        inject(monkeypatch, at)
        with pytest.raises(Stop, match=f"stopped at step {at}"):
            io.load_checkpoint(model, path, progress=False, **options)
        monkeypatch.undo()
        assert same(snapshot(model), before), f"{options}: stopping at step {at} of {total} changed the model"


# -- the steps of load_checkpoint itself, around load_state_dict --------------------------------------

_LOAD_STEPS = steps(
    {
        _checkpoint: ("load_checkpoint_arrays", "as_tensors", "FileGuard"),
        CheckpointInfo: ("ties", "extra_state"),
        nn.Module: ("register_forward_pre_hook", "load_state_dict"),
    }
)


def hooks_of(model: nn.Module) -> tuple[Any, ...]:
    guard = getattr(model, "_packrt_io_mapped_files", None)
    files = None if guard is None else guard[0].files
    return tuple(entry.hook for entry in model._forward_pre_hooks._entries), guard, files


# A reload onto a model that already has its guard registers none: those two steps are not taken.
_CASES = [
    pytest.param(owner, name, reload, id=f"{name}-{'reload' if reload else 'first-load'}")
    for reload in (False, True)
    for owner, name in _LOAD_STEPS
    if not (reload and name in ("FileGuard", "register_forward_pre_hook"))
]


@pytest.mark.parametrize(("owner", "name", "reload"), _CASES)
def test_load_checkpoint_failing_at_each_of_its_steps_leaves_model_hooks_and_files_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, reload: bool
) -> None:
    model, path = model_and_file(tmp_path)
    if reload:
        first = tmp_path / "first.safetensors"
        io.save_checkpoint(model, first)
        io.load_checkpoint(model, first, progress=False, weight_residency="borrowed")
    before, hooks, files = snapshot(model), hooks_of(model), files_of(tmp_path)

    called = fail_at(monkeypatch, owner, name)
    with pytest.raises(Stop, match=f"{name} failed"):
        io.load_checkpoint(model, path, progress=False, weight_residency="borrowed")
    monkeypatch.undo()
    assert called == [name]
    assert same(snapshot(model), before), f"a fault in {name} changed the model's tensors or residency"
    assert hooks_of(model) == hooks, f"a fault in {name} changed the model's hooks or guarded files"
    assert files_of(tmp_path) == files, f"a fault in {name} changed the checkpoint files"
    # The model still loads, and the guard then watches the new file only.
    io.load_checkpoint(model, path, progress=False, weight_residency="borrowed")
    watched = hooks_of(model)[2]
    assert watched is not None and [mapped.path for mapped in watched] == [str(path)]


def test_reload_keeps_one_guard_hook_watching_the_latest_files(tmp_path: Path) -> None:
    model, path = model_and_file(tmp_path)
    for _ in range(3):
        io.load_checkpoint(model, path, progress=False, weight_residency="borrowed")
    hooks, guard, watched = hooks_of(model)
    assert len(hooks) == 1 and hooks[0] is guard[0]
    assert watched is not None and [mapped.path for mapped in watched] == [str(path)]
    io.load_checkpoint(model, path, progress=False, assign=False)  # a copy: no file is served from
    assert hooks_of(model)[2] == ()
