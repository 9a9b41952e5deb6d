"""Signature clauses: argument names, order, keyword-only markers and defaults of every method.

Names and defaults are part of the contract (callers pass them by keyword), so each method's
signature is its own clause; see :func:`~packrt_conformance.suite._support.signature_problems`
for what counts as a match.
"""

from __future__ import annotations

from typing import Any

import pytest

from packrt_conformance.adapter import Adapter
from packrt_conformance.suite._support import NO_DEFAULT, signature_problems

SIGNATURES = [
    pytest.param("__init__", [], marks=pytest.mark.clause("init.signature"), id="init.signature"),
    pytest.param(
        "add_module",
        [("name", "pos", NO_DEFAULT), ("module", "pos", NO_DEFAULT)],
        marks=pytest.mark.clause("add_module.signature"),
        id="add_module.signature",
    ),
    pytest.param(
        "apply",
        [("fn", "pos", NO_DEFAULT)],
        marks=pytest.mark.clause("apply.signature"),
        id="apply.signature",
    ),
    pytest.param("bfloat16", [], marks=pytest.mark.clause("bfloat16.signature"), id="bfloat16.signature"),
    pytest.param("double", [], marks=pytest.mark.clause("double.signature"), id="double.signature"),
    pytest.param("float", [], marks=pytest.mark.clause("float.signature"), id="float.signature"),
    pytest.param("half", [], marks=pytest.mark.clause("half.signature"), id="half.signature"),
    pytest.param("cpu", [], marks=pytest.mark.clause("cpu.signature"), id="cpu.signature"),
    pytest.param("children", [], marks=pytest.mark.clause("children.signature"), id="children.signature"),
    pytest.param("eval", [], marks=pytest.mark.clause("eval.signature"), id="eval.signature"),
    pytest.param("extra_repr", [], marks=pytest.mark.clause("extra_repr.signature"), id="extra_repr.signature"),
    pytest.param("modules", [], marks=pytest.mark.clause("modules.signature"), id="modules.signature"),
    pytest.param(
        "named_children",
        [],
        marks=pytest.mark.clause("named_children.signature"),
        id="named_children.signature",
    ),
    pytest.param(
        "get_extra_state",
        [],
        marks=pytest.mark.clause("get_extra_state.signature"),
        id="get_extra_state.signature",
    ),
    pytest.param(
        "buffers",
        [("recurse", "pos", True)],
        marks=pytest.mark.clause("buffers.signature"),
        id="buffers.signature",
    ),
    pytest.param(
        "parameters",
        [("recurse", "pos", True)],
        marks=pytest.mark.clause("parameters.signature"),
        id="parameters.signature",
    ),
    pytest.param("cuda", [("device", "pos", None)], marks=pytest.mark.clause("cuda.signature"), id="cuda.signature"),
    pytest.param(
        "forward",
        [("args", "*"), ("kwargs", "**")],
        marks=pytest.mark.clause("forward.signature"),
        id="forward.signature",
    ),
    pytest.param(
        "get_buffer",
        [("target", "pos", NO_DEFAULT)],
        marks=pytest.mark.clause("get_buffer.signature"),
        id="get_buffer.signature",
    ),
    pytest.param(
        "get_parameter",
        [("target", "pos", NO_DEFAULT)],
        marks=pytest.mark.clause("get_parameter.signature"),
        id="get_parameter.signature",
    ),
    pytest.param(
        "get_submodule",
        [("target", "pos", NO_DEFAULT)],
        marks=pytest.mark.clause("get_submodule.signature"),
        id="get_submodule.signature",
    ),
    pytest.param(
        "load_state_dict",
        [("state_dict", "pos", NO_DEFAULT), ("strict", "pos", True), ("assign", "pos", False)],
        marks=pytest.mark.clause("load_state_dict.signature"),
        id="load_state_dict.signature",
    ),
    pytest.param(
        "load_state_dict",
        [
            ("state_dict", "pos", NO_DEFAULT),
            ("strict", "pos", True),
            ("assign", "pos", False),
            ("pack", "kw", False),
            ("weight_residency", "kw", None),
        ],
        marks=pytest.mark.clause("load_state_dict.signature.pack-keywords"),
        id="load_state_dict.signature.pack-keywords",
    ),
    pytest.param(
        "named_buffers",
        [("prefix", "pos", ""), ("recurse", "pos", True), ("remove_duplicate", "pos", True)],
        marks=pytest.mark.clause("named_buffers.signature"),
        id="named_buffers.signature",
    ),
    pytest.param(
        "named_parameters",
        [("prefix", "pos", ""), ("recurse", "pos", True), ("remove_duplicate", "pos", True)],
        marks=pytest.mark.clause("named_parameters.signature"),
        id="named_parameters.signature",
    ),
    pytest.param(
        "named_modules",
        [("memo", "pos", None), ("prefix", "pos", ""), ("remove_duplicate", "pos", True)],
        marks=pytest.mark.clause("named_modules.signature"),
        id="named_modules.signature",
    ),
    pytest.param(
        "register_buffer",
        [("name", "pos", NO_DEFAULT), ("tensor", "pos", NO_DEFAULT), ("persistent", "pos", True)],
        marks=pytest.mark.clause("register_buffer.signature"),
        id="register_buffer.signature",
    ),
    pytest.param(
        "register_forward_hook",
        [
            ("hook", "pos", NO_DEFAULT),
            ("prepend", "kw", False),
            ("with_kwargs", "kw", False),
            ("always_call", "kw", False),
        ],
        marks=pytest.mark.clause("register_forward_hook.signature"),
        id="register_forward_hook.signature",
    ),
    pytest.param(
        "register_forward_pre_hook",
        [("hook", "pos", NO_DEFAULT), ("prepend", "kw", False), ("with_kwargs", "kw", False)],
        marks=pytest.mark.clause("register_forward_pre_hook.signature"),
        id="register_forward_pre_hook.signature",
    ),
    pytest.param(
        "register_module",
        [("name", "pos", NO_DEFAULT), ("module", "pos", NO_DEFAULT)],
        marks=pytest.mark.clause("register_module.signature"),
        id="register_module.signature",
    ),
    pytest.param(
        "register_parameter",
        [("name", "pos", NO_DEFAULT), ("param", "pos", NO_DEFAULT)],
        marks=pytest.mark.clause("register_parameter.signature"),
        id="register_parameter.signature",
    ),
    pytest.param(
        "set_extra_state",
        [("state", "pos", NO_DEFAULT)],
        marks=pytest.mark.clause("set_extra_state.signature"),
        id="set_extra_state.signature",
    ),
    pytest.param(
        "set_submodule",
        [("target", "pos", NO_DEFAULT), ("module", "pos", NO_DEFAULT), ("strict", "pos", False)],
        marks=pytest.mark.clause("set_submodule.signature"),
        id="set_submodule.signature",
    ),
    pytest.param(
        "state_dict",
        [("destination", "kw", None), ("prefix", "kw", ""), ("keep_vars", "kw", False)],
        marks=pytest.mark.clause("state_dict.signature"),
        id="state_dict.signature",
    ),
    pytest.param("to", [("args", "*"), ("kwargs", "**")], marks=pytest.mark.clause("to.signature"), id="to.signature"),
    pytest.param(
        "to_empty",
        [("device", "kw", NO_DEFAULT), ("recurse", "kw", True)],
        marks=pytest.mark.clause("to_empty.signature"),
        id="to_empty.signature",
    ),
    pytest.param("train", [("mode", "pos", True)], marks=pytest.mark.clause("train.signature"), id="train.signature"),
    pytest.param("initialize", [], marks=pytest.mark.clause("initialize.signature"), id="initialize.signature"),
    pytest.param(
        "named_buffers",
        [("recurse", "pos", True)],
        marks=pytest.mark.clause("named_buffers.signature-rev1"),
        id="named_buffers.signature-rev1",
    ),
    pytest.param(
        "named_parameters",
        [("recurse", "pos", True)],
        marks=pytest.mark.clause("named_parameters.signature-rev1"),
        id="named_parameters.signature-rev1",
    ),
    pytest.param(
        "named_modules",
        [("prefix", "pos", ""), ("_memo", "pos", None)],
        marks=pytest.mark.clause("named_modules.signature-rev1"),
        id="named_modules.signature-rev1",
    ),
    pytest.param(
        "load_state_dict",
        [("state", "pos", NO_DEFAULT), ("strict", "pos", True)],
        marks=pytest.mark.clause("load_state_dict.signature-rev1"),
        id="load_state_dict.signature-rev1",
    ),
    pytest.param(
        "state_dict",
        [("prefix", "kw", "")],
        marks=pytest.mark.clause("state_dict.signature-rev1"),
        id="state_dict.signature-rev1",
    ),
    pytest.param(
        "to",
        [("target", "pos", NO_DEFAULT)],
        marks=pytest.mark.clause("to.signature-rev1"),
        id="to.signature-rev1",
    ),
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
