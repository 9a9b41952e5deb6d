"""load_checkpoint interrupted at any step of its load leaves the model as it was (issue: nothing lost)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packrt
from packrt import io, nn
from packrt_core.nn import state as state_module
from packrt_core.nn.parameter import Parameter


class Stop(BaseException):  # plays KeyboardInterrupt, which pytest itself would act on
    """Raised by the injector at the chosen step."""


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


# owner -> the steps of a load patched on it to fail
_PATCHED: dict[Any, tuple[str, ...]] = {
    Parameter: ("_drop", "_restore"),
    nn.PackedLayer: ("_install", "_release"),
    nn.Linear: ("_pack",),
    state_module: ("_bind",),
}
STEPS = [(owner, name) for owner, names in _PATCHED.items() for name in names]


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
