"""Walks: registration order (own parameters, own buffers, children), each thing once under its first name."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import packrt_core as prt
from packrt_core import nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(prt.ones(2))
        self.register_buffer("b", prt.zeros(2))


def make_tree() -> nn.Module:
    root = nn.Module()
    root.register_buffer("rb", prt.zeros(1))
    root.first = Block()
    root.rp = nn.Parameter(prt.ones(1))  # registered after a child, still walked first
    root.second = Block()
    root.alias = root.first  # the same module under a second name
    root.second.w = root.first.w  # a tied parameter
    return root


def test_named_parameters_lists_own_then_children_in_registration_order() -> None:
    assert [n for n, _ in make_tree().named_parameters()] == ["rp", "first.w"]


def test_named_buffers_lists_persistent_and_non_persistent() -> None:
    root = make_tree()
    root.register_buffer("scratch", prt.zeros(1), persistent=False)
    assert [n for n, _ in root.named_buffers()] == ["rb", "scratch", "first.b", "second.b"]


def test_remove_duplicate_false_yields_shared_things_once_per_name() -> None:
    root = make_tree()
    names = [n for n, _ in root.named_parameters(remove_duplicate=False)]
    assert names == ["rp", "first.w", "second.w", "alias.w"]
    assert [n for n, _ in root.named_modules(remove_duplicate=False)] == ["", "first", "second", "alias"]


def test_prefix_is_prepended_to_every_name() -> None:
    root = make_tree()
    assert [n for n, _ in root.named_parameters(prefix="model")] == ["model.rp", "model.first.w"]
    assert [n for n, _ in root.named_modules(prefix="m")] == ["m", "m.first", "m.second"]


def test_recurse_false_stops_at_the_modules_own_tensors() -> None:
    root = make_tree()
    assert [n for n, _ in root.named_parameters(recurse=False)] == ["rp"]
    assert [n for n, _ in root.named_buffers(recurse=False)] == ["rb"]
    assert list(root.parameters(recurse=False)) == [root.rp]
    assert list(root.buffers(recurse=False)) == [root.rb]


def test_named_modules_recurse_false_yields_the_module_and_its_direct_children() -> None:
    root = nn.Module()
    root.a = nn.Sequential(nn.Identity())
    assert [n for n, _ in root.named_modules(recurse=False)] == ["", "a"]


def test_named_modules_memo_skips_modules_already_seen() -> None:
    root = make_tree()
    assert [n for n, _ in root.named_modules(memo={root.first})] == ["", "second"]


def test_modules_and_children_yield_each_module_once() -> None:
    root = make_tree()
    assert list(root.modules()) == [root, root.first, root.second]
    assert list(root.children()) == [root.first, root.second]
    assert [n for n, _ in root.named_children()] == ["first", "second"]


def test_parameters_yields_a_shared_tensor_once() -> None:
    root = make_tree()
    assert [id(p) for p in root.parameters()] == [id(root.rp), id(root.first.w)]


def test_apply_visits_children_before_their_parent_and_returns_the_module() -> None:
    root = make_tree()
    seen: list[nn.Module] = []
    assert root.apply(seen.append) is root
    assert seen == [root.first, root.second, root]


def test_apply_visits_a_child_of_two_parents_once_before_either_parent() -> None:
    root, shared = nn.Module(), nn.Module()
    root.left, root.right = nn.Module(), nn.Module()
    root.left.shared = shared
    root.right.shared = shared
    seen: list[nn.Module] = []
    root.apply(seen.append)
    assert [id(m) for m in seen] == [id(shared), id(root.left), id(root.right), id(root)]


def test_train_and_eval_set_the_flag_on_the_whole_tree() -> None:
    root = make_tree()
    assert root.eval() is root
    assert not any(m.training for m in root.modules())
    assert root.train() is root and all(m.training for m in root.modules())


# -- property tests over random trees -----------------------------------------------------------


@st.composite
def trees(draw: Any) -> tuple[nn.Module, list[str], list[str]]:
    """A random tree, with the state_dict keys and module names a reference walk expects."""
    modules: list[nn.Module] = []
    tensors: list[prt.Tensor] = []
    root = nn.Module()
    modules.append(root)
    for step in range(draw(st.integers(1, 12))):
        owner = modules[draw(st.integers(0, len(modules) - 1))]
        action = draw(st.sampled_from(["param", "buffer", "nonpersistent", "child", "shared_child", "tie", "none"]))
        name = f"n{step}"
        if action == "param":
            p = nn.Parameter(prt.full((1,), float(step)))
            tensors.append(p)
            owner.register_parameter(name, p)
        elif action == "buffer":
            owner.register_buffer(name, prt.full((1,), float(step)))
        elif action == "nonpersistent":
            owner.register_buffer(name, prt.full((1,), float(step)), persistent=False)
        elif action == "child":
            child = nn.Module()
            modules.append(child)
            owner.add_module(name, child)
        elif action == "shared_child" and len(modules) > 1:
            candidate = modules[draw(st.integers(1, len(modules) - 1))]
            if owner not in list(candidate.modules()):
                owner.add_module(name, candidate)
        elif action == "tie" and tensors:
            owner.register_parameter(name, tensors[draw(st.integers(0, len(tensors) - 1))])
        else:
            owner.register_parameter(name, None)
    keys, names = _reference_walk(root)
    return root, keys, names


def _reference_walk(root: nn.Module) -> tuple[list[str], list[str]]:
    keys: list[str] = []
    names: list[str] = []
    seen_modules: set[int] = set()
    seen_tensors: set[int] = set()

    def visit(module: nn.Module, path: str) -> None:
        if id(module) in seen_modules:
            return
        seen_modules.add(id(module))
        names.append(path)
        prefix = path + "." if path else ""
        for n, p in module._parameters.items():
            if p is not None and id(p) not in seen_tensors:
                seen_tensors.add(id(p))
                keys.append(prefix + n)
        for n, b in module._buffers.items():
            if b is not None and n not in module._non_persistent and id(b) not in seen_tensors:
                seen_tensors.add(id(b))
                keys.append(prefix + n)
        for n, c in module._modules.items():
            if c is not None:
                visit(c, prefix + n)

    visit(root, "")
    return keys, names


@given(trees())
def test_walk_order_and_dedup_match_a_reference_walk(case: tuple[nn.Module, list[str], list[str]]) -> None:
    root, keys, names = case
    assert list(root.state_dict()) == keys
    assert [n for n, _ in root.named_modules()] == names
    params = [n for n, _ in root.named_parameters()]
    assert params == [k for k in keys if k in dict(root.named_parameters())]
    assert len({id(p) for p in root.parameters()}) == len(params)


@given(trees())
def test_the_state_dict_round_trips_into_a_fresh_copy(case: tuple[nn.Module, list[str], list[str]]) -> None:
    import copy

    root, _, _ = case
    twin = copy.deepcopy(root)
    for t in twin.parameters():
        t.fill_(-1.0)
    result = twin.load_state_dict(root.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    for key, value in twin.state_dict().items():
        assert value.tolist() == root.state_dict()[key].tolist(), key
