"""Signature clauses: argument names, order, keyword-only markers and defaults of every method.

Names and defaults are part of the contract (callers pass them by keyword), so each method's
signature is its own clause; see :func:`~packrt_conformance.suite._support.signature_problems`
for what counts as a match.
"""

from __future__ import annotations

from typing import Any

import pytest

from packrt_conformance.adapter import Adapter
from packrt_conformance.suite._support import NO_DEFAULT, clause_param, signature_problems

_NAME = ("name", "pos", NO_DEFAULT)
_TARGET = ("target", "pos", NO_DEFAULT)
_RECURSE = ("recurse", "pos", True)
_PREFIX = ("prefix", "pos", "")
_DEDUP = ("remove_duplicate", "pos", True)
_LOAD = [("state_dict", "pos", NO_DEFAULT), ("strict", "pos", True), ("assign", "pos", False)]
_HOOK = [("hook", "pos", NO_DEFAULT), ("prepend", "kw", False), ("with_kwargs", "kw", False)]
_VARIADIC = [("args", "*"), ("kwargs", "**")]

# (clause, method, the (name, kind, default) list its signature must start with: see signature_problems)
SIGNATURES = [
    clause_param("add_module.signature", "add_module", [_NAME, ("module", "pos", NO_DEFAULT)]),
    clause_param("apply.signature", "apply", [("fn", "pos", NO_DEFAULT)]),
    clause_param("bfloat16.signature", "bfloat16", []),
    clause_param("buffers.signature", "buffers", [_RECURSE]),
    clause_param("children.signature", "children", []),
    clause_param("cpu.signature", "cpu", []),
    clause_param("cuda.signature", "cuda", [("device", "pos", None)]),
    clause_param("double.signature", "double", []),
    clause_param("eval.signature", "eval", []),
    clause_param("extra_repr.signature", "extra_repr", []),
    clause_param("float.signature", "float", []),
    clause_param("forward.signature", "forward", _VARIADIC),
    clause_param("get_buffer.signature", "get_buffer", [_TARGET]),
    clause_param("get_extra_state.signature", "get_extra_state", []),
    clause_param("get_parameter.signature", "get_parameter", [_TARGET]),
    clause_param("get_submodule.signature", "get_submodule", [_TARGET]),
    clause_param("half.signature", "half", []),
    clause_param("init.signature", "__init__", []),
    clause_param("initialize.signature", "initialize", []),
    clause_param("load_state_dict.signature", "load_state_dict", _LOAD),
    clause_param(
        "load_state_dict.signature.pack-keywords",
        "load_state_dict",
        [*_LOAD, ("pack", "kw", False), ("weight_residency", "kw", None)],
    ),
    clause_param(
        "load_state_dict.signature-rev1", "load_state_dict", [("state", "pos", NO_DEFAULT), ("strict", "pos", True)]
    ),
    clause_param("modules.signature", "modules", []),
    clause_param("named_buffers.signature", "named_buffers", [_PREFIX, _RECURSE, _DEDUP]),
    clause_param("named_buffers.signature-rev1", "named_buffers", [_RECURSE]),
    clause_param("named_children.signature", "named_children", []),
    clause_param("named_modules.signature", "named_modules", [("memo", "pos", None), _PREFIX, _DEDUP]),
    clause_param("named_modules.signature-rev1", "named_modules", [_PREFIX, ("_memo", "pos", None)]),
    clause_param("named_parameters.signature", "named_parameters", [_PREFIX, _RECURSE, _DEDUP]),
    clause_param("named_parameters.signature-rev1", "named_parameters", [_RECURSE]),
    clause_param("parameters.signature", "parameters", [_RECURSE]),
    clause_param(
        "register_buffer.signature",
        "register_buffer",
        [_NAME, ("tensor", "pos", NO_DEFAULT), ("persistent", "pos", True)],
    ),
    clause_param("register_forward_hook.signature", "register_forward_hook", [*_HOOK, ("always_call", "kw", False)]),
    clause_param("register_forward_pre_hook.signature", "register_forward_pre_hook", _HOOK),
    clause_param("register_module.signature", "register_module", [_NAME, ("module", "pos", NO_DEFAULT)]),
    clause_param("register_parameter.signature", "register_parameter", [_NAME, ("param", "pos", NO_DEFAULT)]),
    clause_param("set_extra_state.signature", "set_extra_state", [("state", "pos", NO_DEFAULT)]),
    clause_param(
        "set_submodule.signature",
        "set_submodule",
        [_TARGET, ("module", "pos", NO_DEFAULT), ("strict", "pos", False)],
    ),
    clause_param(
        "state_dict.signature",
        "state_dict",
        [("destination", "kw", None), ("prefix", "kw", ""), ("keep_vars", "kw", False)],
    ),
    clause_param("state_dict.signature-rev1", "state_dict", [("prefix", "kw", "")]),
    clause_param("to.signature", "to", _VARIADIC),
    clause_param("to.signature-rev1", "to", [_TARGET]),
    clause_param("to_empty.signature", "to_empty", [("device", "kw", NO_DEFAULT), ("recurse", "kw", True)]),
    clause_param("train.signature", "train", [("mode", "pos", True)]),
]


@pytest.mark.parametrize(("method", "expected"), SIGNATURES)
def test_method_signature_matches_the_contract(impl: Adapter, method: str, expected: list[Any]) -> None:
    func = getattr(impl.nn.Module, method, None)
    assert func is not None, f"Module has no method {method!r}"
    problems = signature_problems(func, expected)
    assert not problems, f"Module.{method} signature differs from the contract: " + "; ".join(problems)


@pytest.mark.clause("init.signature")
def test_base_constructor_refuses_arguments(impl: Adapter) -> None:
    with pytest.raises(TypeError, match=r"(?i)argument|takes|unexpected"):
        impl.nn.Module(1)
