"""Registration: attribute assignment, add_module / register_*, empty slots, buffers' persistence."""

from __future__ import annotations

import re
from typing import Any

import pytest

from packrt_conformance.adapter import Adapter
from packrt_conformance.suite._support import clause_param, forward_module, names


@pytest.mark.clause("init.empty-registries")
def test_fresh_module_has_empty_registries(impl: Adapter) -> None:
    m = impl.nn.Module()
    assert list(m.parameters()) == []
    assert list(m.buffers()) == []
    assert list(m.children()) == []
    assert m.state_dict() == {}


@pytest.mark.clause("module.register.child-by-assignment")
def test_assigning_a_module_registers_a_child(impl: Adapter) -> None:
    m = impl.nn.Module()
    child = impl.nn.Module()
    m.body = child
    assert list(m.named_children()) == [("body", child)]
    assert m.body is child


@pytest.mark.clause("module.register.parameter-by-assignment")
def test_assigning_a_parameter_registers_it(impl: Adapter) -> None:
    m = impl.nn.Module()
    p = impl.parameter([1.0, 2.0])
    m.weight = p
    assert [(n, t is p) for n, t in m.named_parameters()] == [("weight", True)]
    assert m.weight is p


@pytest.mark.clause("module.register.buffer-by-assignment")
def test_assigning_a_buffer_object_registers_a_buffer(impl: Adapter) -> None:
    m = impl.nn.Module()
    m.table = impl.buffer([1.0, 2.0])
    assert names(m.named_buffers()) == ["table"]
    assert list(m.parameters()) == []


@pytest.mark.clause("module.call.runs-forward")
def test_calling_the_module_runs_forward_with_the_call_arguments(impl: Adapter) -> None:
    m = forward_module(impl)
    assert m(3, y=4) == 34
    assert m(5) == 50
    assert m.calls == [(3, 4), (5, 0)]


@pytest.mark.clause("add_module.registers-child")
def test_add_module_files_a_child_readable_as_attribute(impl: Adapter) -> None:
    m = impl.nn.Module()
    child = impl.nn.Module()
    assert m.add_module("head", child) is None
    assert list(m.named_children()) == [("head", child)]
    assert m.head is child


@pytest.mark.clause("add_module.same-as-assignment")
def test_add_module_builds_the_same_registry_as_assignment(impl: Adapter) -> None:
    by_call, by_attr = impl.nn.Module(), impl.nn.Module()
    child = impl.linear(2, 2)
    by_call.add_module("layer", child)
    by_attr.layer = child
    assert list(by_call.named_children()) == list(by_attr.named_children())
    assert names(by_call.named_parameters()) == names(by_attr.named_parameters())
    assert list(by_call.state_dict()) == list(by_attr.state_dict())


@pytest.mark.clause("add_module.dotted-prefix")
def test_child_tensors_enumerate_under_the_dotted_name(impl: Adapter) -> None:
    m = impl.nn.Module()
    m.add_module("proj", impl.linear(2, 3))
    assert names(m.named_parameters()) == ["proj.weight", "proj.bias"]


def _module_with_foo_taken_by(impl: Adapter, taken_by: str) -> tuple[Any, Any]:
    """A module whose name ``foo`` is held by ``taken_by`` (a plain attribute, a parameter, a buffer or
    a child), and what ``m.foo`` returns."""
    m = impl.nn.Module()
    if taken_by == "plain attribute":
        m.foo = 3
    elif taken_by == "parameter":
        m.foo = impl.parameter([1.0])
    elif taken_by == "buffer":
        m.register_buffer("foo", impl.tensor([5.0]))
    else:
        m.foo = impl.nn.Module()
    return m, m.foo


@pytest.mark.parametrize("taken_by", ["plain attribute", "parameter", "buffer"])
@pytest.mark.clause("add_module.existing-name-refused")
def test_add_module_refuses_a_name_already_taken(impl: Adapter, taken_by: str) -> None:
    m, held = _module_with_foo_taken_by(impl, taken_by)
    with pytest.raises(KeyError, match="foo"):
        m.add_module("foo", impl.linear(2, 2))
    assert m.foo is held, "a refused registration leaves the attribute as it was"
    assert names(m.named_children()) == []
    assert names(m.named_modules()) == [""]
    assert list(m.state_dict()) == ([] if taken_by == "plain attribute" else ["foo"])


@pytest.mark.parametrize("name", ["a.b", ""], ids=["dotted", "empty"])
@pytest.mark.clause("add_module.name-is-one-segment")
def test_add_module_refuses_a_name_that_is_not_one_path_segment(impl: Adapter, name: str) -> None:
    m = impl.nn.Module()
    # The page names no wording: a dotted name must be quoted back, an empty one only said to be a bad name.
    with pytest.raises(KeyError, match=re.escape(name) if name else r"(?i)name|empty|blank|segment"):
        m.add_module(name, impl.linear(2, 2))
    assert names(m.named_children()) == []
    assert m.state_dict() == {}


@pytest.mark.parametrize(
    ("register", "walk"),
    [
        clause_param("add_module.none-slot", "add_module", "children"),
        clause_param("register_parameter.none-empty-slot", "register_parameter", "parameters"),
        clause_param("register_buffer.none-empty-slot", "register_buffer", "buffers"),
    ],
)
def test_registering_none_files_an_empty_slot_that_reads_back_none_and_is_not_walked(
    impl: Adapter, register: str, walk: str
) -> None:
    m = impl.nn.Module()
    getattr(m, register)("slot", None)
    assert m.slot is None
    assert list(getattr(m, walk)()) == []
    assert names(m.named_modules()) == [""]
    assert m.state_dict() == {}


@pytest.mark.clause("register_module.same-as-add-module")
def test_register_module_is_add_module(impl: Adapter) -> None:
    a, b = impl.nn.Module(), impl.nn.Module()
    child = impl.nn.Module()
    a.register_module("x", child)
    b.add_module("x", child)
    assert list(a.named_children()) == list(b.named_children()) == [("x", child)]
    a.register_module("slot", None)
    b.add_module("slot", None)
    assert (a.slot, b.slot) == (None, None), "None files an empty slot through either name"
    assert list(a.named_children()) == list(b.named_children()) == [("x", child)]
    a.register_module("slot", child)
    b.add_module("slot", child)
    assert (a.slot, b.slot) == (child, child)


@pytest.mark.clause("register_parameter.files-parameter")
def test_register_parameter_matches_assignment(impl: Adapter) -> None:
    a, b = impl.nn.Module(), impl.nn.Module()
    p = impl.parameter([1.0])
    a.register_parameter("w", p)
    b.w = p
    assert a.w is p
    assert [(n, t is p) for n, t in a.named_parameters()] == [(n, t is p) for n, t in b.named_parameters()]


@pytest.mark.clause("register_buffer.files-buffer")
def test_register_buffer_files_a_buffer_not_a_parameter(impl: Adapter) -> None:
    m = impl.nn.Module()
    t = impl.tensor([1.0, 0.0])
    m.register_buffer("mask", t)
    assert names(m.named_buffers()) == ["mask"]
    assert list(m.parameters()) == []


@pytest.mark.clause("register_buffer.reads-back-as-attribute")
def test_registered_buffer_reads_back_as_attribute(impl: Adapter) -> None:
    m = impl.nn.Module()
    t = impl.tensor([4.0])
    m.register_buffer("table", t)
    assert impl.shares_storage(m.table, t)
    assert dict(m.named_buffers())["table"] is m.table


@pytest.mark.clause("register_buffer.persistent-in-state-dict")
def test_persistent_buffer_is_in_state_dict(impl: Adapter) -> None:
    m = impl.nn.Module()
    m.register_buffer("mask", impl.tensor([1.0]))
    assert list(m.state_dict()) == ["mask"]


@pytest.mark.clause("register_buffer.non-persistent-excluded")
def test_non_persistent_buffer_is_not_in_state_dict(impl: Adapter) -> None:
    m = impl.nn.Module()
    m.register_buffer("cache", impl.tensor([1.0]), persistent=False)
    m.register_buffer("kept", impl.tensor([2.0]))
    assert list(m.state_dict()) == ["kept"]


@pytest.mark.clause("register_buffer.buffer-flag-wins")
def test_buffer_objects_own_persistent_flag_wins(impl: Adapter) -> None:
    m = impl.nn.Module()
    m.register_buffer("dropped", impl.buffer([1.0], persistent=False))
    m.register_buffer("kept", impl.buffer([2.0], persistent=True), persistent=False)
    assert list(m.state_dict()) == ["kept"], "the Buffer's flag must decide, not register_buffer's argument"


# -- re-registration ---------------------------------------------------------------------------
@pytest.mark.clause("module.register.child-over-none-attribute")
def test_a_none_attribute_then_a_module_becomes_the_child(impl: Adapter) -> None:
    m = impl.nn.Module()
    m.body = impl.linear(2, 2)
    m.head = None
    assert m.head is None
    assert names(m.named_children()) == ["body"]
    head = impl.linear(2, 3)
    m.head = head
    assert m.head is head
    assert list(m.named_children()) == [("body", m.body), ("head", head)]
    assert names(m.named_parameters()) == ["body.weight", "body.bias", "head.weight", "head.bias"]
    assert list(m.state_dict()) == ["body.weight", "body.bias", "head.weight", "head.bias"]
    replacement = impl.linear(2, 1)
    m.head = replacement  # and once more: a registered child replaced by another
    assert m.head is replacement
    assert list(m.named_children()) == [("body", m.body), ("head", replacement)]


def _file_over_a_plain_attribute(impl: Adapter, file: Any) -> None:
    """``file(m)`` files buffer ``foo`` where ``m.foo = 3`` already stands and returns the tensor
    the buffer must share storage with."""
    m = impl.nn.Module()
    m.foo = 3
    try:
        filed = file(m)
    except Exception:  # the pages name no type for the refusal; any exception refuses
        assert m.foo == 3, "a refused registration must leave the attribute as it was"
        assert names(m.named_buffers()) == []
        assert m.state_dict() == {}
        return
    assert not isinstance(m.foo, int), "the buffer was filed but the plain attribute still hides it"
    assert impl.shares_storage(m.foo, filed)
    assert names(m.named_buffers()) == ["foo"]
    assert list(m.state_dict()) == ["foo"]


@pytest.mark.clause("register_buffer.over-plain-attribute")
def test_register_buffer_over_a_plain_attribute_refuses_or_reads_back(impl: Adapter) -> None:
    def register(m: Any) -> Any:
        t = impl.tensor([1.0, 2.0])
        m.register_buffer("foo", t)
        return t

    _file_over_a_plain_attribute(impl, register)


@pytest.mark.clause("module.register.buffer-over-plain-attribute")
def test_assigning_a_buffer_over_a_plain_attribute_refuses_or_reads_back(impl: Adapter) -> None:
    def assign(m: Any) -> Any:
        b = impl.buffer([1.0, 2.0])
        m.foo = b
        return b

    _file_over_a_plain_attribute(impl, assign)


@pytest.mark.clause("module.register.none-empties-slot")
def test_assigning_none_to_a_child_empties_its_slot(impl: Adapter) -> None:
    m = impl.nn.Module()
    m.body = impl.linear(2, 2)
    m.head = impl.linear(2, 2)
    m.body = None
    assert m.body is None
    assert names(m.named_children()) == ["head"]
    assert names(m.named_modules()) == ["", "head"]
    assert list(m.state_dict()) == ["head.weight", "head.bias"]
    again = impl.linear(2, 1)
    m.body = again
    assert m.body is again
    assert names(m.named_children()) == ["body", "head"]


@pytest.mark.clause("module.register.none-empties-slot")
def test_assigning_none_to_a_parameter_empties_its_slot(impl: Adapter) -> None:
    m = impl.nn.Module()
    m.first = impl.parameter([1.0])
    m.second = impl.parameter([2.0])
    m.first = None
    assert m.first is None
    assert names(m.named_parameters()) == ["second"]
    assert list(m.state_dict()) == ["second"]
    again = impl.parameter([3.0])
    m.first = again
    assert m.first is again
    assert names(m.named_parameters()) == ["first", "second"]


@pytest.mark.parametrize("taken_by", ["plain attribute", "buffer", "child"])
@pytest.mark.clause("register_parameter.existing-name-refused")
def test_register_parameter_refuses_a_name_already_taken(impl: Adapter, taken_by: str) -> None:
    m, held = _module_with_foo_taken_by(impl, taken_by)
    with pytest.raises(KeyError, match="foo"):
        m.register_parameter("foo", impl.parameter([1.0]))
    assert m.foo is held, "a refused registration leaves the attribute as it was"
    assert names(m.named_parameters()) == []
    assert names(m.named_buffers()) == (["foo"] if taken_by == "buffer" else [])
    assert list(m.state_dict()) == (["foo"] if taken_by == "buffer" else [])
    assert names(m.named_children()) == (["foo"] if taken_by == "child" else [])


@pytest.mark.clause("register_buffer.re-registration-sets-persistence")
@pytest.mark.parametrize("first", [False, True], ids=["hidden-then-persistent", "persistent-then-hidden"])
def test_registering_a_buffer_again_takes_the_new_persistent_flag(impl: Adapter, first: bool) -> None:
    m = impl.nn.Module()
    m.register_buffer("table", impl.tensor([1.0]), persistent=first)
    again = impl.tensor([2.0])
    m.register_buffer("table", again, persistent=not first)
    assert m.table is again
    assert names(m.named_buffers()) == ["table"]
    assert list(m.state_dict()) == ([] if first else ["table"])


@pytest.mark.parametrize(
    ("before", "after"),
    [("buffer", "parameter"), ("child", "parameter"), ("buffer", "child")],
)
@pytest.mark.clause("module.register.assignment-replaces-another-kind")
def test_assigning_over_another_kind_replaces_it(impl: Adapter, before: str, after: str) -> None:
    def make(kind: str) -> Any:
        if kind == "parameter":
            return impl.parameter([1.0, 2.0])
        if kind == "buffer":
            return impl.buffer([3.0, 4.0])
        return impl.linear(2, 2)

    m = impl.nn.Module()
    m.foo = make(before)
    new = make(after)
    m.foo = new
    assert m.foo is new
    assert names(m.named_parameters()) == (["foo"] if after == "parameter" else ["foo.weight", "foo.bias"])
    assert names(m.named_buffers()) == []
    assert names(m.named_children()) == (["foo"] if after == "child" else [])
    assert list(m.state_dict()) == names(m.named_parameters())


@pytest.mark.clause("register_buffer.non-persistent-key-unexpected")
def test_a_checkpoint_key_for_a_non_persistent_buffer_is_unexpected(impl: Adapter) -> None:
    m = impl.nn.Module()
    m.w = impl.parameter([1.0])
    m.register_buffer("cache", impl.tensor([0.0]), persistent=False)
    result = m.load_state_dict({"w": impl.tensor([2.0]), "cache": impl.tensor([9.0])}, strict=False)
    assert (list(result.missing_keys), list(result.unexpected_keys)) == ([], ["cache"])
    assert impl.to_numpy(m.cache).tolist() == [0.0], "the non-persistent buffer is not loaded"
    with pytest.raises(RuntimeError, match="cache"):
        m.load_state_dict({"w": impl.tensor([3.0]), "cache": impl.tensor([9.0])})


@pytest.mark.clause("module.register.parameter-after-forward")
def test_a_bias_given_to_a_linear_after_a_run_is_used(impl: Adapter) -> None:
    layer = impl.linear(2, 3, bias=False)
    impl.write_(layer.weight, [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    x = impl.tensor([[1.0, 2.0]])
    assert impl.to_numpy(layer(x)).tolist() == [[1.0, 2.0, 3.0]]
    layer.bias = impl.parameter([10.0, 20.0, 30.0])
    assert impl.to_numpy(layer(x)).tolist() == [[11.0, 22.0, 33.0]], "the next forward adds the new bias"
    assert impl.to_numpy(layer(x)).tolist() == [[11.0, 22.0, 33.0]]
