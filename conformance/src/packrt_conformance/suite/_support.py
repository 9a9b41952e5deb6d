"""Shared builders and assertions for the suite: standard module trees, signature matching, clause cases.

Everything here goes through the adapter, so the same trees are built on every implementation.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

from packrt_conformance.adapter import Adapter

NO_DEFAULT: Any = inspect.Parameter.empty
_KINDS = {
    "pos": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "kw": inspect.Parameter.KEYWORD_ONLY,
    "*": inspect.Parameter.VAR_POSITIONAL,
    "**": inspect.Parameter.VAR_KEYWORD,
}

# The sample tree's names in registration order (own parameters, own buffers, then children).
SAMPLE_PARAMS = ["scale", "encoder.weight", "encoder.bias", "decoder.gain"]
SAMPLE_BUFFERS = ["mask", "decoder.steps", "decoder.cache"]
SAMPLE_STATE = ["scale", "mask", "encoder.weight", "encoder.bias", "decoder.gain", "decoder.steps"]


def clause_param(clause: str, *values: Any) -> Any:
    """One parametrized case that checks ``clause`` and is named after it."""
    return pytest.param(*values, marks=pytest.mark.clause(clause), id=clause)


# The two hook registries' register methods; their clause IDs start with these names.
HOOK_REGISTRIES = ("register_forward_hook", "register_forward_pre_hook")


def hook_registry_cases(rule: str) -> list[Any]:
    """One case per hook registry for a rule both keep: the value is the register method's name, and
    the case checks (and is named after) that registry's clause, ``<method>.<rule>``."""
    return [clause_param(f"{method}.{rule}", method) for method in HOOK_REGISTRIES]


def sample_tree(impl: Adapter) -> Any:
    """root(scale, mask) -> encoder: Linear(2, 3), decoder(gain, steps:int64, cache: non-persistent)."""
    root = impl.nn.Module()
    root.scale = impl.parameter([1.0, 2.0])
    root.register_buffer("mask", impl.tensor([1.0, 0.0]))
    root.encoder = impl.linear(2, 3)
    decoder = impl.nn.Module()
    decoder.gain = impl.parameter([3.0])
    decoder.register_buffer("steps", impl.tensor([5], "int64"))
    decoder.register_buffer("cache", impl.tensor([0.0]), persistent=False)
    root.decoder = decoder
    return root


def tied_tree(impl: Adapter) -> Any:
    """root -> a: Linear(2, 2), b: Linear(2, 2) whose weight is a's weight (one tensor, two names)."""
    root = impl.nn.Module()
    root.a = impl.linear(2, 2)
    root.b = impl.linear(2, 2)
    root.b.weight = root.a.weight
    return root


def shared_child_tree(impl: Adapter) -> tuple[Any, Any]:
    """root -> first: child, second: the same child object; the child holds one parameter 'w'."""
    root = impl.nn.Module()
    child = impl.nn.Module()
    child.w = impl.parameter([1.0])
    root.first = child
    root.second = child
    return root, child


def two_parent_tree(impl: Adapter) -> tuple[Any, Any]:
    """root -> left -> shared, root -> right -> shared: one child object under two parents
    (reachable as left.shared and right.shared); the shared child holds one parameter 'w'."""
    root = impl.nn.Module()
    shared = impl.nn.Module()
    shared.w = impl.parameter([1.0])
    root.left = impl.nn.Module()
    root.right = impl.nn.Module()
    root.left.shared = shared
    root.right.shared = shared
    return root, shared


def forward_module(impl: Adapter) -> Any:
    """A module whose forward(x, y=0) returns x * 10 + y on plain numbers and records its calls."""

    class Affine(impl.nn.Module):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[Any, Any]] = []

        def forward(self, x: Any, y: Any = 0) -> Any:
            self.calls.append((x, y))
            return x * 10 + y

    return Affine()


def extra_state_class(impl: Adapter) -> Any:
    """A Module class ``(seen, w=1.0)``: a parameter ``w`` ([w]) and extra state ``{"seen": seen}``,
    which ``set_extra_state`` restores."""

    class Counter(impl.nn.Module):  # type: ignore[name-defined,misc]
        def __init__(self, seen: int, w: float = 1.0) -> None:
            super().__init__()
            self.w = impl.parameter([w])
            self.seen = seen

        def get_extra_state(self) -> Any:
            return {"seen": self.seen}

        def set_extra_state(self, state: Any) -> None:
            self.seen = state["seen"]

    return Counter


def raising_module(impl: Adapter) -> Any:
    """A module whose forward always raises ValueError('forward failed on purpose')."""

    class Broken(impl.nn.Module):  # type: ignore[name-defined,misc]
        def forward(self, x: Any) -> Any:
            raise ValueError("forward failed on purpose")

    return Broken()


def names(pairs: Any) -> list[str]:
    """The names of (name, value) pairs."""
    return [name for name, _ in pairs]


def values_equal(impl: Adapter, tensor: Any, expected: Any) -> bool:
    """Whether ``tensor`` holds ``expected`` (compared as float64)."""
    return bool(np.array_equal(impl.to_numpy(tensor).astype(np.float64), np.asarray(expected, np.float64)))


def signature_problems(func: Any, expected: list[tuple[Any, ...]]) -> list[str]:
    """Differences between ``func``'s signature and ``expected`` (empty when it conforms).

    ``expected`` lists (name, kind, default) after ``self``; kind is 'pos', 'kw', '*' or '**'
    (variadics as (name, kind)). The named parameters must start with the expected ones, in order,
    with the same kind and default; an extra trailing named parameter is allowed only with a
    default (an addition no conforming caller can trip over); expected variadics must exist, extra ones may.
    """
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError) as err:
        return [f"no inspectable signature ({err})"]
    params = [p for p in sig.parameters.values() if p.name != "self"]
    named = [p for p in params if p.kind not in (_KINDS["*"], _KINDS["**"])]
    variadic = {p.kind for p in params} - {_KINDS["pos"], _KINDS["kw"]}
    exp_named = [e for e in expected if e[1] in ("pos", "kw")]
    problems: list[str] = []
    for i, exp in enumerate(exp_named):
        name, kind, default = exp
        if i >= len(named):
            problems.append(f"parameter {name!r} is missing")
            continue
        got = named[i]
        if got.name != name:
            problems.append(f"parameter {i + 1} is {got.name!r}, expected {name!r}")
        if got.kind != _KINDS[kind]:
            problems.append(f"parameter {name!r} is {got.kind.description}, expected {_KINDS[kind].description}")
        if got.default is not default and got.default != default:
            problems.append(f"parameter {name!r} defaults to {got.default!r}, expected {default!r}")
    for extra in named[len(exp_named) :]:
        if extra.default is NO_DEFAULT:
            problems.append(f"unexpected required parameter {extra.name!r} ({extra.kind.description})")
    for exp in expected:
        if exp[1] in ("*", "**") and _KINDS[exp[1]] not in variadic:
            problems.append(f"missing {exp[1]}{exp[0]}")
    return problems
