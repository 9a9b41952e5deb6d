"""A load that fails at any step leaves the module exactly as it was: values bit for bit, every
Parameter/Buffer object in its slot, each layer's pack, residency and storage, and extra state.

The fault injector wraps the steps a load goes through (copies, rebinding, pack builds and
installs, releases, extra state) and raises at the k-th of them, for every k a clean load takes,
once as a KeyboardInterrupt-like BaseException and once as a MemoryError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import packrt_core as prt
from packrt_core import nn
from packrt_core.nn import state as state_module
from packrt_core.nn.packed import PackedLayer
from packrt_core.nn.parameter import Parameter


class Interrupt(BaseException):  # stands for KeyboardInterrupt, which pytest would not let through
    """What the injector raises: like KeyboardInterrupt, not an Exception."""


class Stateful(nn.Module):
    """A module with a buffer and extra state (restored by set_extra_state)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", prt.zeros(3))
        self.note = {"v": 1}

    def get_extra_state(self) -> Any:
        return dict(self.note)

    def set_extra_state(self, state: Any) -> None:
        self.note = dict(state)


def build() -> nn.Module:
    prt.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(6, 6),
        nn.Linear(6, 6, weight_residency="borrowed"),
        nn.Embedding(5, 6),
        nn.QuantizedLinear(6, 4),
        Stateful(),
    )
    model[0](prt.ones(1, 6))  # packed by a forward: its raw weight is dropped, the pack holds it
    return model


def checkpoint(dtype: Any = None) -> dict[str, Any]:
    sd: dict[str, Any] = {}
    for key, value in build().state_dict().items():
        if key.endswith("_extra_state"):
            sd[key] = {"v": 2}
        elif value.dtype.is_floating_point and not key.startswith("3."):
            sd[key] = (value + 1.0).to(dtype) if dtype is not None else value + 1.0
        else:
            sd[key] = value.clone()
    return sd


def fingerprint(model: nn.Module) -> list[Any]:
    """Everything a load may touch, as comparable values (bytes for tensor values)."""
    out: list[Any] = []
    for path, module in model.named_modules():
        for registry in ("_parameters", "_buffers"):
            for name, t in getattr(module, registry).items():
                if t is None:
                    out.append((path, name, None))
                    continue
                values = np.ascontiguousarray(t._array()).tobytes()
                source = getattr(t, "_source", None)
                storage = (t._data is None, source is not None, id(t._lineage), t._lineage.version)
                out.append((path, name, id(t), t.dtype.name, t.shape, values, *storage))
        if isinstance(module, PackedLayer):
            out.append((path, id(module._served), module._residency, module._decision, module.pack_count))
        if isinstance(module, Stateful):
            out.append((path, dict(module.note)))
    return out


# owner -> the steps of a load on it that the injector counts and may fail
STEPS: dict[Any, tuple[str, ...]] = {
    prt.Tensor: ("copy_",),
    Parameter: ("_restore", "_drop"),
    PackedLayer: ("_install", "_release", "_pack_now"),
    nn.Linear: ("_pack",),
    nn.Embedding: ("_pack",),
    nn.QuantizedLinear: ("_pack",),
    Stateful: ("set_extra_state",),
    state_module: ("_bind",),
}


@contextmanager
def faults(monkeypatch: pytest.MonkeyPatch, at: int | None, error: type[BaseException]) -> Iterator[list[int]]:
    """Count calls of every step; raise ``error`` at call number ``at`` (1-based), once."""
    calls = [0]
    for owner, names in STEPS.items():
        for name in names:
            original: Callable[..., Any] = getattr(owner, name)

            def wrapped(*args: Any, __original: Callable[..., Any] = original, **kwargs: Any) -> Any:
                calls[0] += 1
                if calls[0] == at:
                    raise error(f"injected at step {at}")
                return __original(*args, **kwargs)

            monkeypatch.setattr(owner, name, wrapped)
    try:
        yield calls
    finally:
        monkeypatch.undo()


ROADS: dict[str, tuple[dict[str, Any], Any]] = {
    "copy": ({}, None),
    "copy-pack": ({"pack": True}, None),
    "copy-float64-pack": ({"pack": True}, "float64"),
    "assign": ({"assign": True}, None),
    "assign-pack-packed": ({"assign": True, "pack": True, "weight_residency": "packed"}, None),
    "assign-borrowed": ({"assign": True, "weight_residency": "borrowed"}, None),
    "assign-per_call": ({"assign": True, "weight_residency": "per_call"}, None),
    "assign-pack-auto": ({"assign": True, "pack": True, "weight_residency": "auto"}, None),
    "copy-pack-packed": ({"pack": True, "weight_residency": "packed"}, None),
}


@pytest.mark.parametrize("error", [Interrupt, MemoryError])
@pytest.mark.parametrize("road", sorted(ROADS))
def test_a_load_interrupted_at_any_step_leaves_the_module_as_it_was(
    road: str, error: type[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    kwargs, dtype = ROADS[road]
    model, sd = build(), checkpoint(dtype)
    with faults(monkeypatch, None, error) as calls:
        model.load_state_dict(sd, **kwargs)
    steps = calls[0]
    assert steps >= 3, f"the {road} load went through only {steps} steps: the injector sees nothing"
    for k in range(1, steps + 1):
        model, sd = build(), checkpoint(dtype)
        before = fingerprint(model)
        with faults(monkeypatch, k, error), pytest.raises(error, match=f"injected at step {k}"):
            model.load_state_dict(sd, **kwargs)
        assert fingerprint(model) == before, f"{road}: a failure at step {k} of {steps} changed the module"
        out = model[0](prt.ones(1, 6))  # and it still serves, from the pack it had
        assert out.shape == (1, 6)


def test_a_read_only_parameter_fails_a_copy_load_before_anything_is_written() -> None:
    model = build()
    frozen = np.zeros((6, 6), np.float32)
    frozen.flags.writeable = False
    model[1].weight = nn.Parameter(prt.from_numpy(frozen))
    before = fingerprint(model)
    with pytest.raises(state_module.StateDictError, match=r"1\.weight: cannot write into a read-only tensor"):
        model.load_state_dict(checkpoint())
    assert fingerprint(model) == before


def test_integer_weights_assigned_to_a_float_layer_are_refused_naming_the_key() -> None:
    model = build()
    sd = checkpoint()
    sd["0.weight"] = prt.zeros(6, 6, dtype="int32")
    before = fingerprint(model)
    with pytest.raises(state_module.StateDictError, match=r"0\.weight: Linear serves floating-point weights, .* int32"):
        model.load_state_dict(sd, assign=True, pack=True)
    assert fingerprint(model) == before
