"""Module registration: attribute assignment, the register_* methods, empty slots, deletion."""

from __future__ import annotations

from typing import Any

import pytest

import packrt_core as prt
from packrt_core import nn
from packrt_core.errors import ModuleInitError, PackrtError, RegistrationError


class Leaf(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(prt.ones(2, 2))
        self.register_buffer("mask", prt.zeros(2))


def test_assigning_a_parameter_registers_it() -> None:
    m = Leaf()
    assert list(m._parameters) == ["weight"]
    assert m.weight is m._parameters["weight"]


def test_assigning_a_module_files_it_as_a_child() -> None:
    outer = nn.Module()
    outer.leaf = Leaf()
    assert dict(outer.named_children()) == {"leaf": outer.leaf}


@pytest.mark.parametrize(
    "value",
    [nn.Parameter(prt.ones(1)), nn.Identity(), nn.Buffer(prt.ones(1))],
    ids=["parameter", "module", "buffer"],
)
def test_assigning_before_super_init_says_to_call_it_first(value: object) -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            self.x = value
            super().__init__()

    with pytest.raises(ModuleInitError, match=r"before Module.__init__\(\) ran: call super\(\).__init__\(\) first"):
        Broken()


@pytest.mark.parametrize(
    "register",
    [
        lambda m: m.register_parameter("w", nn.Parameter(prt.ones(1))),
        lambda m: m.register_buffer("b", prt.ones(1)),
        lambda m: m.add_module("c", nn.Identity()),
    ],
    ids=["register_parameter", "register_buffer", "add_module"],
)
def test_registering_before_super_init_says_to_call_it_first(register: Any) -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            register(self)
            super().__init__()

    with pytest.raises(ModuleInitError, match=r"before Module.__init__\(\) ran: call super\(\).__init__\(\) first"):
        Broken()


def test_add_module_and_register_module_are_the_same() -> None:
    m = nn.Module()
    m.add_module("a", nn.Identity())
    m.register_module("b", nn.Identity())
    assert [name for name, _ in m.named_children()] == ["a", "b"]


def test_none_files_an_empty_slot_that_reads_back_as_none_and_stays_out_of_walks() -> None:
    m = nn.Module()
    m.register_parameter("bias", None)
    m.register_buffer("table", None)
    m.add_module("child", None)
    assert m.bias is None and m.table is None and m.child is None
    assert list(m.named_parameters()) == [] and list(m.named_buffers()) == [] and list(m.children()) == []
    assert m.state_dict() == {}


def test_a_checkpoint_key_for_an_empty_slot_is_unexpected() -> None:
    m = nn.Module()
    m.register_parameter("bias", None)
    result = m.load_state_dict({"bias": prt.zeros(1)}, strict=False)
    assert result.unexpected_keys == ["bias"] and result.missing_keys == []


def test_assigning_none_to_a_parameter_keeps_an_empty_slot() -> None:
    m = Leaf()
    m.weight = None
    assert "weight" in m._parameters and m.weight is None
    assert list(m.parameters()) == []


def test_a_plain_tensor_cannot_replace_a_parameter() -> None:
    m = Leaf()
    with pytest.raises(TypeError, match="cannot assign a Tensor to parameter 'weight' of Leaf"):
        m.weight = prt.ones(2, 2)


def test_a_plain_tensor_replaces_a_buffers_value() -> None:
    m = Leaf()
    m.mask = prt.ones(2)
    assert m.mask.tolist() == [1.0, 1.0] and "mask" in m.state_dict()


def test_deleting_an_attribute_unregisters_it() -> None:
    m = Leaf()
    del m.weight
    del m.mask
    assert list(m.named_parameters()) == [] and list(m.named_buffers()) == []
    with pytest.raises(AttributeError, match="'Leaf' object has no attribute 'weight'"):
        _ = m.weight


def test_register_buffer_persistent_false_keeps_it_out_of_state_dict_but_in_walks() -> None:
    m = nn.Module()
    m.register_buffer("cache", prt.zeros(1), persistent=False)
    assert [n for n, _ in m.named_buffers()] == ["cache"]
    assert "cache" not in m.state_dict()


def test_a_buffers_own_persistent_flag_wins_over_register_buffer() -> None:
    m = nn.Module()
    m.register_buffer("a", nn.Buffer(prt.zeros(1), persistent=False), persistent=True)
    m.register_buffer("b", nn.Buffer(prt.zeros(1), persistent=True), persistent=False)
    m.c = nn.Buffer(prt.zeros(1), persistent=False)
    assert list(m.state_dict()) == ["b"]


@pytest.mark.parametrize(("name", "message"), [("a.b", "cannot contain '.'"), ("", "cannot be empty")])
def test_malformed_names_are_refused(name: str, message: str) -> None:
    with pytest.raises(RegistrationError, match=message):
        nn.Module().register_parameter(name, nn.Parameter(prt.ones(1)))


def test_a_name_taken_by_a_plain_attribute_is_refused() -> None:
    m = nn.Module()
    m.scale = 2.0
    with pytest.raises(RegistrationError, match="'scale' on Module: the name is already taken"):
        m.register_buffer("scale", prt.ones(1))
    assert issubclass(RegistrationError, KeyError) and issubclass(RegistrationError, PackrtError)


def test_register_parameter_refuses_a_plain_tensor_and_says_to_wrap_it() -> None:
    with pytest.raises(TypeError, match=r"a packrt.nn.Parameter or None is expected \(wrap it: Parameter\(t\)\)"):
        nn.Module().register_parameter("w", prt.ones(1))  # type: ignore[arg-type]


def test_register_buffer_and_add_module_refuse_other_types() -> None:
    with pytest.raises(TypeError, match="cannot register a list as buffer 'b'"):
        nn.Module().register_buffer("b", [1.0])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot add a int as child module 'c'"):
        nn.Module().add_module("c", 3)  # type: ignore[arg-type]


def test_parameter_shares_the_storage_it_wraps() -> None:
    t = prt.zeros(2)
    p = nn.Parameter(t)
    p.add_(1.0)
    assert t.tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="Parameter wraps a packrt Tensor, got list"):
        nn.Parameter([1.0])  # type: ignore[arg-type]


def test_dir_lists_registered_names() -> None:
    assert {"weight", "mask"} <= set(dir(Leaf()))
