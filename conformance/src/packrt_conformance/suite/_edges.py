"""The edge matrix: for each method, the keyword values and tree shapes its matrix test crosses.

The matrix tests (``test_edges.py``) parametrize over :func:`cases`, the full product of a method's
keyword values, so every boolean keyword is tried both ways and combined with the others; the
table in ``docs/conformance.md`` is generated from :data:`EDGES` (``packrt_conformance.docgen``),
so the documented matrix is the one that runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

__all__ = ["EDGES", "OMITTED", "Edges", "call_kwargs", "case_id", "cases"]


class _Omitted:
    """A keyword left out of the call, so the method's own default applies."""

    def __repr__(self) -> str:
        return "(omitted)"


#: Marks a keyword value that is not passed at all.
OMITTED: Any = _Omitted()


@dataclass(frozen=True)
class Edges:
    """One method's matrix: the clause its cases check, the keyword values crossed, the trees walked."""

    clause: str
    keywords: dict[str, tuple[Any, ...]]
    shapes: tuple[str, ...]
    also: str = ""
    #: (clause, predicate, which cases): the cases the predicate picks are checked under that clause
    #: instead; a rule an implementation may fail on its own keeps its own clause, so one expectation
    #: entry silences exactly one rule.
    split: tuple[str, Callable[[dict[str, Any]], bool], str] | None = None

    def clause_of(self, values: dict[str, Any]) -> str:
        """The clause one combination checks."""
        if self.split is not None and self.split[1](values):
            return self.split[0]
        return self.clause


# The trees the walks are checked on (``test_edges.edge_tree``): a tensor filed twice on one module,
# a tensor shared between modules, a child filed under two names, a non-persistent buffer.
_WALK_SHAPES = (
    "own tensor under two names",
    "tensor shared across modules",
    "child under two names",
    "non-persistent buffer",
)
_WALK = {"prefix": ("", "pre"), "recurse": (True, False), "remove_duplicate": (True, False)}


def _flags_disagree(values: dict[str, Any]) -> bool:
    """A Buffer object whose own flag differs from the persistent argument in force (default True)."""
    if values["value"] == "tensor":
        return False
    own = values["value"].endswith("True)")
    given = True if values["persistent"] is OMITTED else values["persistent"]
    return bool(own != given)


EDGES: dict[str, Edges] = {
    "named_parameters": Edges("named_parameters.keyword-matrix", dict(_WALK), _WALK_SHAPES),
    "named_buffers": Edges("named_buffers.keyword-matrix", dict(_WALK), _WALK_SHAPES),
    "parameters": Edges("parameters.recurse-matrix", {"recurse": (True, False)}, _WALK_SHAPES),
    "buffers": Edges("buffers.recurse-matrix", {"recurse": (True, False)}, _WALK_SHAPES),
    "named_modules": Edges(
        "named_modules.keyword-matrix",
        {"prefix": ("", "pre"), "recurse": (OMITTED, True, False), "remove_duplicate": (True, False)},
        _WALK_SHAPES,
        split=("named_modules.recurse", lambda v: v["recurse"] is not OMITTED, "recurse passed"),
    ),
    "state_dict": Edges(
        "state_dict.keyword-matrix",
        {"prefix": ("", "pre."), "keep_vars": (True, False)},
        ("own parameters, buffers, a layer", "non-persistent buffer", "int64 buffer"),
    ),
    "load_state_dict": Edges(
        "load_state_dict.keyword-matrix",
        {
            "strict": (True, False),
            "assign": (True, False),
            "keys": ("exact", "one missing", "one unexpected"),
            "dtype": ("float32", "float64", "float16", "int64"),
        },
        ("plain parameter", "buffer", "layer weight (float values; int64 on the copy road)"),
    ),
    "load_state_dict (weight_residency)": Edges(
        "load_state_dict.residency-matrix",
        {
            "weight_residency": ("packed", "borrowed", "auto", "per_call"),
            "assign": (True, False),
            "dtype": ("float32", "float64", "float16", "int64"),
        },
        ("plain parameter", "layer weight and bias (float values; int64 on the copy road)"),
    ),
    "register_forward_hook": Edges(
        "register_forward_hook.keyword-matrix",
        {
            "prepend": (True, False),
            "with_kwargs": (True, False),
            "always_call": (True, False),
            "forward": ("returns", "raises"),
        },
        ("one hook registered before, one after",),
        also="returns None, 0, 0.0, False, (), '' under clause register_forward_hook.falsy-value-replaces-output",
    ),
    "register_forward_pre_hook": Edges(
        "register_forward_pre_hook.keyword-matrix",
        {"prepend": (True, False), "with_kwargs": (True, False)},
        ("one hook registered before, one after",),
        also="returns None, 0, 0.0, False under clause register_forward_pre_hook.falsy-value-replaces-args",
    ),
    "to_empty": Edges(
        "to_empty.keyword-matrix",
        {"recurse": (True, False), "device": (None, "the adapter's device")},
        ("own parameter and buffer", "child layer"),
    ),
    "register_buffer": Edges(
        "register_buffer.persistent-matrix",
        {
            "persistent": (OMITTED, True, False),
            "value": ("tensor", "Buffer(persistent=True)", "Buffer(persistent=False)"),
        },
        ("own buffer",),
        split=(
            "register_buffer.buffer-flag-wins",
            lambda v: _flags_disagree(v),
            "a Buffer whose flag the call contradicts",
        ),
    ),
}


def case_id(values: dict[str, Any]) -> str:
    """A readable test ID for one combination: ``prefix=''-recurse=False``."""
    return "-".join(f"{k}={v!r}" for k, v in values.items())


def cases(method: str) -> list[Any]:
    """Every combination of ``method``'s keyword values, each a ``pytest.param`` marked with its clause."""
    edges = EDGES[method]
    keys = list(edges.keywords)
    combos = [dict(zip(keys, values, strict=True)) for values in itertools.product(*edges.keywords.values())]
    return [pytest.param(c, marks=pytest.mark.clause(edges.clause_of(c)), id=case_id(c)) for c in combos]


def call_kwargs(values: dict[str, Any], *names: str) -> dict[str, Any]:
    """The keyword arguments among ``names`` to pass (an :data:`OMITTED` value is left out)."""
    return {n: values[n] for n in names if values[n] is not OMITTED}
