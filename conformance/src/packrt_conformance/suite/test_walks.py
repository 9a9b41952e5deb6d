"""Registry walks: order, prefix, recurse, and how a tensor or module reachable twice is listed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from packrt_conformance.adapter import Adapter
from packrt_conformance.suite._support import (
    SAMPLE_BUFFERS,
    SAMPLE_PARAMS,
    clause_param,
    names,
    sample_tree,
    shared_child_tree,
    tied_tree,
    two_parent_tree,
)

_IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: not s.startswith("_") and s not in {"training", "forward", "cuda", "cpu", "float", "half", "to"}
)
_PREFIX = st.from_regex(r"[a-z][a-z0-9_.]{0,12}", fullmatch=True)


@pytest.mark.clause("module.order.walks", "named_parameters.order", "named_buffers.order")
def test_walks_list_own_parameters_then_own_buffers_then_children(impl: Adapter) -> None:
    root = sample_tree(impl)
    assert names(root.named_parameters()) == SAMPLE_PARAMS
    assert names(root.named_buffers()) == SAMPLE_BUFFERS


@pytest.mark.clause("named_children.order", "children.direct-in-order")
@given(child_names=st.lists(_IDENT, min_size=1, max_size=6, unique=True))
def test_children_come_back_in_registration_order(impl: Adapter, child_names: list[str]) -> None:
    root = impl.nn.Module()
    kids = []
    for name in child_names:
        kid = impl.nn.Module()
        kid.grandchild = impl.nn.Module()
        setattr(root, name, kid)
        kids.append(kid)
    assert names(root.named_children()) == child_names
    assert [c is k for c, k in zip(root.children(), kids, strict=True)] == [True] * len(kids)


@pytest.mark.clause("module.dedup.walks", "named_parameters.shared-first-name", "parameters.shared-once")
def test_tied_parameter_is_walked_once_under_the_first_name(impl: Adapter) -> None:
    root = tied_tree(impl)
    assert names(root.named_parameters()) == ["a.weight", "a.bias", "b.bias"]
    assert len(list(root.parameters())) == 3


@pytest.mark.clause("named_parameters.remove-duplicate-false")
def test_remove_duplicate_false_yields_every_name_of_a_tie(impl: Adapter) -> None:
    root = tied_tree(impl)
    pairs = list(root.named_parameters(remove_duplicate=False))
    assert names(pairs) == ["a.weight", "a.bias", "b.weight", "b.bias"]
    assert pairs[0][1] is pairs[2][1]


@pytest.mark.parametrize(
    ("walk", "expected"),
    [
        clause_param("named_parameters.prefix", "named_parameters", SAMPLE_PARAMS),
        clause_param("named_buffers.prefix", "named_buffers", SAMPLE_BUFFERS),
    ],
)
@given(prefix=_PREFIX)
def test_named_tensor_walks_prepend_the_prefix(impl: Adapter, walk: str, expected: list[str], prefix: str) -> None:
    root = sample_tree(impl)
    assert sorted(names(getattr(root, walk)())) == sorted(expected)
    # The walk's own order is the order clauses' business: here, each name exactly gains the prefix.
    assert names(getattr(root, walk)(prefix=prefix)) == [f"{prefix}.{n}" for n in names(getattr(root, walk)())]


@pytest.mark.parametrize(
    ("walk", "own"),
    [
        clause_param("named_parameters.recurse-false", "named_parameters", "scale"),
        clause_param("named_buffers.recurse", "named_buffers", "mask"),
    ],
)
def test_named_tensor_walks_without_recursion_stop_at_own(impl: Adapter, walk: str, own: str) -> None:
    assert names(getattr(sample_tree(impl), walk)(recurse=False)) == [own]


@pytest.mark.clause("named_parameters.layer-tensors")
def test_layer_tensors_are_walked_with_loose_parameters(impl: Adapter) -> None:
    root = impl.nn.Module()
    root.loose = impl.parameter([1.0])
    root.layer = impl.linear(2, 2)
    assert names(root.named_parameters()) == ["loose", "layer.weight", "layer.bias"]


@pytest.mark.parametrize(
    ("walk", "own", "everything"),
    [
        clause_param("parameters.recurse", "parameters", "scale", SAMPLE_PARAMS),
        clause_param("buffers.recurse", "buffers", "mask", SAMPLE_BUFFERS),
    ],
)
def test_tensor_walks_recurse_flag(impl: Adapter, walk: str, own: str, everything: list[str]) -> None:
    root = sample_tree(impl)
    assert [t is getattr(root, own) for t in getattr(root, walk)(recurse=False)] == [True]
    assert len(list(getattr(root, walk)())) == len(everything)


@pytest.mark.clause("named_buffers.non-persistent-included")
def test_named_buffers_include_non_persistent(impl: Adapter) -> None:
    assert "decoder.cache" in names(sample_tree(impl).named_buffers())


@pytest.mark.clause("named_buffers.remove-duplicate")
def test_shared_buffer_once_unless_remove_duplicate_false(impl: Adapter) -> None:
    root = impl.nn.Module()
    root.a, root.b = impl.nn.Module(), impl.nn.Module()
    table = impl.tensor([1.0, 2.0])
    root.a.register_buffer("table", table)
    root.b.register_buffer("table", table)
    assert names(root.named_buffers()) == ["a.table"]
    assert names(root.named_buffers(remove_duplicate=False)) == ["a.table", "b.table"]


@pytest.mark.clause("named_children.duplicate-once")
def test_child_under_two_names_is_listed_once(impl: Adapter) -> None:
    root, child = shared_child_tree(impl)
    assert list(root.named_children()) == [("first", child)]


@pytest.mark.clause("modules.self-first-each-once")
def test_modules_yields_self_first_and_each_module_once(impl: Adapter) -> None:
    root, child = shared_child_tree(impl)
    found = list(root.modules())
    assert len(found) == 2
    assert found[0] is root
    assert found[1] is child


@pytest.mark.clause("modules.self-first-each-once")
def test_modules_yields_a_child_of_two_parents_once(impl: Adapter) -> None:
    root, shared = two_parent_tree(impl)
    found = [id(m) for m in root.modules()]
    assert found[0] == id(root)
    assert sorted(found) == sorted({id(root), id(root.left), id(root.right), id(shared)}), "each module once"


@pytest.mark.clause("named_modules.self-first")
def test_named_modules_starts_with_self_under_empty_name(impl: Adapter) -> None:
    root = sample_tree(impl)
    pairs = list(root.named_modules())
    assert pairs[0][0] == ""
    assert pairs[0][1] is root
    assert names(pairs) == ["", "encoder", "decoder"]


@pytest.mark.clause("named_modules.prefix")
@given(prefix=_PREFIX)
def test_named_modules_prefix_names_the_root_and_prefixes_the_rest(impl: Adapter, prefix: str) -> None:
    root = sample_tree(impl)
    plain = names(root.named_modules())
    assert sorted(plain) == ["", "decoder", "encoder"]
    assert names(root.named_modules(prefix=prefix)) == [f"{prefix}.{n}" if n else prefix for n in plain]


@pytest.mark.clause("named_modules.first-path-wins")
def test_module_reachable_twice_is_yielded_once_under_the_first_path(impl: Adapter) -> None:
    root, child = shared_child_tree(impl)
    assert [(n, m is child) for n, m in root.named_modules()][1:] == [("first", True)]


@pytest.mark.clause("named_modules.remove-duplicate-false")
def test_named_modules_remove_duplicate_false_yields_every_path(impl: Adapter) -> None:
    root, _ = shared_child_tree(impl)
    assert names(root.named_modules(remove_duplicate=False)) == ["", "first", "second"]


@pytest.mark.clause("named_modules.recurse")
def test_named_modules_recurse_false_stops_at_direct_children(impl: Adapter) -> None:
    root = impl.nn.Module()
    root.outer = impl.nn.Module()
    root.outer.inner = impl.nn.Module()
    assert names(root.named_modules(recurse=False)) == ["", "outer"]
    assert names(root.named_modules(recurse=True)) == ["", "outer", "outer.inner"]


@pytest.mark.clause("named_modules.recurse-false-once")
def test_named_modules_without_recursion_yields_a_shared_child_once(impl: Adapter) -> None:
    root, child = shared_child_tree(impl)
    root.last = impl.nn.Module()
    pairs = list(root.named_modules(recurse=False))
    assert names(pairs) == ["", "first", "last"]
    assert pairs[1][1] is child
    assert names(root.named_modules(recurse=False, remove_duplicate=False)) == ["", "first", "second", "last"]


@pytest.mark.clause("named_modules.every-depth")
def test_walks_reach_every_depth(impl: Adapter) -> None:
    root = impl.nn.Module()
    mid = impl.nn.Module()
    leaf = impl.nn.Module()
    leaf.w = impl.parameter([1.0])
    leaf.register_buffer("b", impl.tensor([2.0]))
    mid.leaf = leaf
    mid.side = impl.linear(1, 1)
    root.mid = mid
    root.tail = impl.nn.Module()
    assert names(root.named_modules()) == ["", "mid", "mid.leaf", "mid.side", "tail"]
    assert names(root.named_parameters()) == ["mid.leaf.w", "mid.side.weight", "mid.side.bias"]
    assert names(root.named_buffers()) == ["mid.leaf.b"]
    assert list(root.state_dict()) == ["mid.leaf.w", "mid.leaf.b", "mid.side.weight", "mid.side.bias"]


@pytest.mark.parametrize(
    "walk",
    [
        clause_param("named_parameters.remove-duplicate-false-shared-child", "named_parameters"),
        clause_param("named_buffers.remove-duplicate-false-shared-child", "named_buffers"),
    ],
)
def test_remove_duplicate_false_lists_a_shared_childs_tensors_under_every_path(impl: Adapter, walk: str) -> None:
    root, child = shared_child_tree(impl)
    child.register_buffer("b", impl.tensor([2.0]))
    root.last = impl.nn.Module()
    own = "w" if walk == "named_parameters" else "b"
    pairs = list(getattr(root, walk)(remove_duplicate=False))
    assert names(pairs) == [f"first.{own}", f"second.{own}"]
    assert pairs[0][1] is pairs[1][1] is getattr(child, own)
    assert names(getattr(root, walk)()) == [f"first.{own}"]
