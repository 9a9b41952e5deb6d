"""Dotted paths, repr, deepcopy, the containers, the call path and the revision switch."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import packrt_core as prt
from packrt_core import nn
from packrt_core.errors import ModulePathError


class Lin(nn.Module):
    def __init__(self, i: int, o: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(prt.ones(o, i))
        self.i, self.o = i, o

    def extra_repr(self) -> str:
        return f"in_features={self.i}, out_features={self.o}"

    def forward(self, x: prt.Tensor) -> prt.Tensor:
        return x @ self.weight.T


def model() -> nn.Module:
    root = nn.Module()
    root.encoder = nn.Module()
    root.encoder.layers = nn.ModuleList([Lin(2, 2), Lin(2, 2)])
    root.decoder = Lin(2, 3)
    root.decoder.register_buffer("table", prt.zeros(1))
    return root


def test_get_submodule_of_the_empty_path_is_the_module_itself() -> None:
    root = model()
    assert root.get_submodule("") is root


def test_get_submodule_walks_dotted_paths() -> None:
    root = model()
    assert root.get_submodule("encoder.layers.1") is root.encoder.layers[1]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("encoder.layers.7", "segment '7' names nothing in encoder.layers"),
        ("encoder.missing.x", "segment 'missing' names nothing in encoder"),
        ("decoder.weight", "segment 'weight' is a parameter, not a module in decoder"),
    ],
)
def test_get_submodule_names_the_failing_segment(path: str, message: str) -> None:
    with pytest.raises(AttributeError, match=message):
        model().get_submodule(path)


def test_get_parameter_and_get_buffer() -> None:
    root = model()
    assert root.get_parameter("decoder.weight") is root.decoder.weight
    assert root.get_buffer("decoder.table") is root.decoder.table
    with pytest.raises(ModulePathError, match="'table' is a buffer, not a parameter"):
        root.get_parameter("decoder.table")
    with pytest.raises(ModulePathError, match="'weight' is a parameter, not a buffer"):
        root.get_buffer("decoder.weight")
    with pytest.raises(ModulePathError, match="'nothing' names nothing"):
        root.get_parameter("decoder.nothing")


def test_set_submodule_replaces_and_creates_a_missing_last_segment() -> None:
    root = model()
    new = Lin(2, 2)
    root.set_submodule("encoder.layers.0", new)
    assert root.encoder.layers[0] is new
    root.set_submodule("encoder.head", Lin(2, 5))
    assert root.get_submodule("encoder.head").o == 5


def test_set_submodule_strict_requires_an_existing_module() -> None:
    with pytest.raises(ModulePathError, match=r"strict=True\): Module has no submodule 'head'"):
        model().set_submodule("encoder.head", Lin(1, 1), strict=True)
    with pytest.raises(ModulePathError, match="'weight' is a parameter, not a module"):
        model().set_submodule("decoder.weight", Lin(1, 1))
    with pytest.raises(ValueError, match="expects a Module, got int"):
        model().set_submodule("x", 3)  # type: ignore[arg-type]


def test_repr_shows_the_tree_in_registration_order_with_extra_repr() -> None:
    assert repr(model()) == (
        "Module(\n"
        "  (encoder): Module(\n"
        "    (layers): ModuleList(\n"
        "      (0): Lin(in_features=2, out_features=2)\n"
        "      (1): Lin(in_features=2, out_features=2)\n"
        "    )\n"
        "  )\n"
        "  (decoder): Lin(in_features=2, out_features=3)\n"
        ")"
    )


def test_repr_shows_a_shared_module_once() -> None:
    root = nn.Module()
    root.a = Lin(1, 1)
    root.b = root.a
    assert repr(root) == "Module(\n  (a): Lin(in_features=1, out_features=1)\n)"


def test_deepcopy_gives_an_independent_tree_with_ties_preserved() -> None:
    root = model()
    root.decoder.tied = root.encoder.layers[0].weight
    twin = copy.deepcopy(root)
    assert twin.decoder.tied is twin.encoder.layers[0].weight
    twin.decoder.weight.fill_(5.0)
    assert root.decoder.weight.tolist()[0][0] == 1.0
    assert [n for n, _ in twin.named_parameters()] == [n for n, _ in root.named_parameters()]


def test_sequential_calls_its_children_in_order_and_indexes_like_a_list() -> None:
    seq = nn.Sequential(Lin(2, 3), nn.Identity(), Lin(3, 1))
    out = seq(prt.ones(1, 2))
    assert out.tolist() == [[6.0]]
    assert len(seq) == 3 and isinstance(seq[-1], Lin) and len(seq[:2]) == 2
    named = nn.Sequential({"first": Lin(1, 1)})
    assert [n for n, _ in named.named_children()] == ["first"]
    with pytest.raises(IndexError, match="Sequential index 5 is out of range for 3"):
        seq[5]


def test_module_list_and_dict_register_what_they_hold() -> None:
    ml = nn.ModuleList([Lin(1, 1)])
    ml.append(Lin(1, 2))
    ml.insert(0, nn.Identity())
    assert [n for n, _ in ml.named_children()] == ["0", "1", "2"]
    assert isinstance(ml[0], nn.Identity)
    del ml[0]
    assert len(ml) == 2 and isinstance(ml[0], Lin) and [n for n, _ in ml.named_children()] == ["0", "1"]
    md = nn.ModuleDict({"a": Lin(1, 1)})
    md["b"] = Lin(1, 1)
    assert list(md.keys()) == ["a", "b"] and "a" in md and list(md.state_dict()) == ["a.weight", "b.weight"]
    with pytest.raises(KeyError, match="ModuleDict has no module 'z'; it has 'a', 'b'"):
        md["z"]
    assert md.pop("a") is not None and len(md) == 1


def test_identity_returns_its_input() -> None:
    x = prt.ones(1)
    assert nn.Identity()(x) is x


def test_calling_a_module_without_hooks_calls_forward() -> None:
    class Double(nn.Module):
        def forward(self, x: Any, *, scale: int = 2) -> Any:
            return x * scale

    m = Double()
    assert m(3) == 6 and m(3, scale=3) == 9


def test_the_call_runs_pre_hooks_forward_and_forward_hooks() -> None:
    calls: list[str] = []

    class Echo(nn.Module):
        def forward(self, x: Any) -> Any:
            calls.append("forward")
            return x

    m = Echo()
    m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    handle = m.register_forward_hook(lambda mod, args, out: out * 10)
    assert m(1) == 20 and calls == ["forward"]
    handle.remove()
    assert m(1) == 2


def test_a_module_without_forward_says_so() -> None:
    with pytest.raises(NotImplementedError, match="Module defines no forward"):
        nn.Module()(1)


def test_contract_revision_switches_and_restores() -> None:
    assert prt.current_revision() == 2
    with prt.contract_revision(1):
        assert prt.current_revision() == 1
    assert prt.current_revision() == 2
    with pytest.raises(ValueError, match=r"contract revision 3 is not implemented"):
        prt.contract_revision(3)


def test_initialize_returns_the_module() -> None:
    root = model()
    assert root.initialize() is root


def test_the_call_path_tests_one_flag_that_follows_every_registration_and_removal() -> None:
    m = nn.Identity()
    assert m._hooked is False
    pre = m.register_forward_pre_hook(lambda mod, args: None)
    post = m.register_forward_hook(lambda mod, args, out: None)
    pre.remove()
    assert m._hooked is True
    post.remove()
    assert m._hooked is False and m(3) == 3


def test_a_deep_copy_keeps_its_own_hook_flag() -> None:
    m = nn.Identity()
    handle = m.register_forward_hook(lambda mod, args, out: out + 1)
    twin = copy.deepcopy(m)
    handle.remove()
    assert m(1) == 1 and twin(1) == 2
