"""Tree operations: apply, train/eval, get_* / set_submodule, repr and extra_repr."""

from __future__ import annotations

from typing import Any

import pytest

from packrt_conformance.adapter import Adapter
from packrt_conformance.suite._support import clause_param, sample_tree, shared_child_tree, two_parent_tree


def _deep(impl: Adapter) -> Any:
    """root -> encoder -> layers (Sequential of 4 Linear), root -> decoder(scale, mask)."""
    root = impl.nn.Module()
    root.encoder = impl.nn.Module()
    root.encoder.layers = impl.nn.Sequential(*[impl.linear(2, 2) for _ in range(4)])
    root.decoder = impl.nn.Module()
    root.decoder.scale = impl.parameter([1.0])
    root.decoder.register_buffer("mask", impl.tensor([1.0]))
    return root


@pytest.mark.clause("apply.visits-every-module")
def test_apply_visits_each_module_of_the_tree_once_the_root_included(impl: Adapter) -> None:
    root = sample_tree(impl)
    order: list[Any] = []
    root.apply(order.append)
    assert sorted(id(m) for m in order) == sorted([id(root.encoder), id(root.decoder), id(root)])


@pytest.mark.clause("apply.children-before-parent")
def test_apply_visits_children_before_their_parent(impl: Adapter) -> None:
    root = sample_tree(impl)
    root.encoder.inner = impl.linear(2, 2)
    order: list[Any] = []
    root.apply(order.append)
    seen = [id(m) for m in order]
    pairs = [(root.encoder.inner, root.encoder), (root.encoder, root), (root.decoder, root)]
    met = [(c, p) for c, p in pairs if id(c) in seen and id(p) in seen]
    early = [(type(c).__name__, type(p).__name__) for c, p in met if seen.index(id(c)) > seen.index(id(p))]
    assert met, "apply visited encoder.inner and encoder"
    assert early == [], "a parent visited before its child (whether the root is visited at all is another rule)"


@pytest.mark.clause("apply.returns-self")
def test_apply_returns_the_module(impl: Adapter) -> None:
    root = sample_tree(impl)
    assert root.apply(lambda m: None) is root


@pytest.mark.clause("apply.shared-child-once")
def test_apply_visits_a_child_of_two_parents_once_before_both(impl: Adapter) -> None:
    root, shared = two_parent_tree(impl)
    order: list[Any] = []
    root.apply(order.append)
    assert [id(m) for m in order].count(id(shared)) == 1, "a child two parents hold is one module of the tree"
    assert order.index(shared) < order.index(root.left)
    assert order.index(shared) < order.index(root.right)


@pytest.mark.clause("train.sets-flag-tree", "train.returns-self")
def test_train_sets_the_flag_on_the_whole_tree(impl: Adapter) -> None:
    root = _deep(impl)
    assert root.train(False) is root
    assert {m.training for m in root.modules()} == {False}
    root.train()
    assert {m.training for m in root.modules()} == {True}


@pytest.mark.clause("train.flag-readable-from-construction")
def test_training_flag_is_readable_before_any_train_call(impl: Adapter) -> None:
    class Branching(impl.nn.Module):  # type: ignore[name-defined,misc]
        def forward(self, x: Any) -> Any:
            return x if self.training else None

    fresh = [impl.nn.Module(), impl.linear(2, 2), impl.nn.Sequential(impl.linear(2, 2)), Branching()]
    for module in fresh:
        assert isinstance(module.training, bool), f"{type(module).__name__}.training must be a bool from construction"
    assert all(isinstance(m.training, bool) for m in fresh[2].modules())
    fresh[3](impl.tensor([1.0]))  # a forward branching on the flag runs before any train()/eval()


@pytest.mark.clause("eval.same-as-train-false")
def test_eval_is_train_false(impl: Adapter) -> None:
    root = _deep(impl)
    assert root.eval() is root
    assert {m.training for m in root.modules()} == {False}


@pytest.mark.clause("get_submodule.dotted-path")
def test_get_submodule_follows_numeric_segments(impl: Adapter) -> None:
    root = _deep(impl)
    assert root.get_submodule("encoder.layers.3") is root.encoder.layers[3]


@pytest.mark.clause("get_submodule.empty-is-self")
def test_get_submodule_empty_path_is_the_module(impl: Adapter) -> None:
    root = _deep(impl)
    assert root.get_submodule("") is root


@pytest.mark.clause("get_parameter.dotted-path")
def test_get_parameter_returns_the_parameter_object(impl: Adapter) -> None:
    root = _deep(impl)
    assert root.get_parameter("decoder.scale") is root.decoder.scale
    assert root.get_parameter("encoder.layers.2.weight") is root.encoder.layers[2].weight


@pytest.mark.clause("get_buffer.dotted-path")
def test_get_buffer_returns_the_buffer(impl: Adapter) -> None:
    root = _deep(impl)
    assert root.get_buffer("decoder.mask") is root.decoder.mask


@pytest.mark.parametrize(
    ("getter", "path", "named"),
    [
        clause_param("get_submodule.missing-raises", "get_submodule", "encoder.nowhere", "nowhere"),
        clause_param("get_submodule.wrong-kind-raises", "get_submodule", "decoder.scale", "scale"),
        clause_param("get_parameter.missing-raises", "get_parameter", "decoder.absent", "absent"),
        clause_param("get_parameter.wrong-kind-raises", "get_parameter", "decoder.mask", "mask"),
        clause_param("get_buffer.missing-raises", "get_buffer", "decoder.absent", "absent"),
        clause_param("get_buffer.wrong-kind-raises", "get_buffer", "decoder.scale", "scale"),
    ],
)
def test_a_getter_raises_attribute_error_naming_a_missing_or_wrong_kind_segment(
    impl: Adapter, getter: str, path: str, named: str
) -> None:
    with pytest.raises(AttributeError, match=named):
        getattr(_deep(impl), getter)(path)


@pytest.mark.parametrize(
    ("parent", "name"),
    [
        clause_param("set_submodule.replaces", "encoder.layers", "1"),
        clause_param("set_submodule.default-creates-last", "decoder", "head"),
    ],
)
def test_set_submodule_files_the_module_at_the_path(impl: Adapter, parent: str, name: str) -> None:
    root = _deep(impl)
    new = impl.linear(2, 2)
    root.set_submodule(f"{parent}.{name}", new)
    assert root.get_submodule(f"{parent}.{name}") is new
    assert getattr(root.get_submodule(parent), name) is new
    assert (name, new) in list(root.get_submodule(parent).named_children())


@pytest.mark.clause("set_submodule.replaces")
def test_set_submodule_replacement_keeps_the_childs_place(impl: Adapter) -> None:
    root = impl.nn.Module()
    for name in ("first", "middle", "last"):
        setattr(root, name, impl.linear(2, 2))
    new = impl.linear(2, 2)
    root.set_submodule("middle", new)
    assert [(n, c is new) for n, c in root.named_children()] == [("first", False), ("middle", True), ("last", False)]


@pytest.mark.clause("set_submodule.default-creates-last")
def test_set_submodule_creates_only_the_last_segment(impl: Adapter) -> None:
    root = _deep(impl)
    with pytest.raises(AttributeError, match="missing"):
        root.set_submodule("decoder.missing.head", impl.linear(2, 2))
    assert not hasattr(root.decoder, "missing"), "a missing segment before the last one is not created"
    assert [n for n, _ in root.decoder.named_children()] == []


@pytest.mark.clause("set_submodule.strict-requires-existing")
def test_strict_set_submodule_refuses_a_missing_target(impl: Adapter) -> None:
    root = _deep(impl)
    with pytest.raises(AttributeError, match="head"):
        root.set_submodule("decoder.head", impl.linear(2, 2), strict=True)
    assert not hasattr(root.decoder, "head")


@pytest.mark.clause("extra_repr.in-repr")
def test_extra_repr_text_appears_in_repr(impl: Adapter) -> None:
    class Tagged(impl.nn.Module):  # type: ignore[name-defined,misc]
        def extra_repr(self) -> str:
            return "tag=conformance-7"

    assert "tag=conformance-7" in repr(Tagged())


@pytest.mark.clause("extra_repr.in-repr")
def test_extra_repr_text_appears_beside_children(impl: Adapter) -> None:
    class Tagged(impl.nn.Module):  # type: ignore[name-defined,misc]
        def extra_repr(self) -> str:
            return "tag=conformance-8"

    tagged = Tagged()
    tagged.head = impl.linear(2, 2)
    text = repr(tagged)
    assert "tag=conformance-8" in text
    assert "(head)" in text


@pytest.mark.clause("extra_repr.linear-geometry")
def test_linear_extra_repr_states_its_geometry(impl: Adapter) -> None:
    text = impl.linear(64, 256).extra_repr()
    assert isinstance(text, str)
    assert "in_features=64" in text
    assert "out_features=256" in text


@pytest.mark.clause("module.order.repr")
def test_repr_lists_children_in_registration_order(impl: Adapter) -> None:
    root = impl.nn.Module()
    for name in ("zeta", "alpha", "mid"):
        setattr(root, name, impl.linear(2, 2))
    text = repr(root)
    assert text.index("(zeta)") < text.index("(alpha)") < text.index("(mid)")


@pytest.mark.clause("module.dedup.repr")
def test_repr_prints_a_shared_child_once(impl: Adapter) -> None:
    root, _ = shared_child_tree(impl)
    text = repr(root)
    assert "(first)" in text
    assert "(second)" not in text


@pytest.mark.clause("extra_repr.linear-geometry-no-bias")
@pytest.mark.parametrize(("fan_in", "fan_out"), [(64, 256), (3, 5)])
def test_linear_without_bias_still_states_its_geometry(impl: Adapter, fan_in: int, fan_out: int) -> None:
    layer = impl.linear(fan_in, fan_out, bias=False)
    text = layer.extra_repr()
    assert isinstance(text, str)
    assert f"in_features={fan_in}" in text
    assert f"out_features={fan_out}" in text
    assert "bias=True" not in text
    assert f"in_features={fan_in}" in repr(layer)


@pytest.mark.clause("module.dedup.repr")
def test_repr_prints_a_child_of_two_parents_once(impl: Adapter) -> None:
    root, _ = two_parent_tree(impl)
    text = repr(root)
    assert "(left)" in text
    assert "(right)" in text
    assert text.count("(shared)") == 1, "printed under its first path (left.shared) only"
