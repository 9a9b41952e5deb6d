"""Tree operations: apply, train/eval, get_* / set_submodule, repr and extra_repr."""

from __future__ import annotations

from typing import Any

import pytest

from packrt_conformance.adapter import Adapter
from packrt_conformance.suite._support import sample_tree, shared_child_tree


def _deep(impl: Adapter) -> Any:
    """root -> encoder -> layers (Sequential of 4 Linear), root -> decoder(scale, mask)."""
    root = impl.nn.Module()
    root.encoder = impl.nn.Module()
    root.encoder.layers = impl.nn.Sequential(*[impl.linear(2, 2) for _ in range(4)])
    root.decoder = impl.nn.Module()
    root.decoder.scale = impl.parameter([1.0])
    root.decoder.register_buffer("mask", impl.tensor([1.0]))
    return root


@pytest.mark.clause("apply.visits-every-module", "apply.children-before-parent", "apply.returns-self")
def test_apply_visits_each_module_once_children_first(impl: Adapter) -> None:
    root = sample_tree(impl)
    order: list[Any] = []
    assert root.apply(order.append) is root
    assert [id(m) for m in order] == [id(root.encoder), id(root.decoder), id(root)]


@pytest.mark.clause("train.sets-flag-tree", "train.returns-self")
def test_train_sets_the_flag_on_the_whole_tree(impl: Adapter) -> None:
    root = _deep(impl)
    assert root.train(False) is root
    assert {m.training for m in root.modules()} == {False}
    root.train()
    assert {m.training for m in root.modules()} == {True}


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


@pytest.mark.clause("get_submodule.missing-raises")
def test_get_submodule_missing_segment_raises(impl: Adapter) -> None:
    with pytest.raises(AttributeError, match="nowhere"):
        _deep(impl).get_submodule("encoder.nowhere")


@pytest.mark.clause("get_submodule.wrong-kind-raises")
def test_get_submodule_through_a_parameter_raises(impl: Adapter) -> None:
    with pytest.raises(AttributeError, match="scale"):
        _deep(impl).get_submodule("decoder.scale")


@pytest.mark.clause("get_parameter.dotted-path")
def test_get_parameter_returns_the_parameter_object(impl: Adapter) -> None:
    root = _deep(impl)
    assert root.get_parameter("decoder.scale") is root.decoder.scale
    assert root.get_parameter("encoder.layers.2.weight") is root.encoder.layers[2].weight


@pytest.mark.clause("get_parameter.missing-raises")
def test_get_parameter_missing_raises(impl: Adapter) -> None:
    with pytest.raises(AttributeError, match="absent"):
        _deep(impl).get_parameter("decoder.absent")


@pytest.mark.clause("get_parameter.wrong-kind-raises")
def test_get_parameter_on_a_buffer_raises(impl: Adapter) -> None:
    with pytest.raises(AttributeError, match="mask"):
        _deep(impl).get_parameter("decoder.mask")


@pytest.mark.clause("get_buffer.dotted-path")
def test_get_buffer_returns_the_buffer(impl: Adapter) -> None:
    root = _deep(impl)
    assert root.get_buffer("decoder.mask") is root.decoder.mask


@pytest.mark.clause("get_buffer.missing-raises")
def test_get_buffer_missing_raises(impl: Adapter) -> None:
    with pytest.raises(AttributeError, match="absent"):
        _deep(impl).get_buffer("decoder.absent")


@pytest.mark.clause("get_buffer.wrong-kind-raises")
def test_get_buffer_on_a_parameter_raises(impl: Adapter) -> None:
    with pytest.raises(AttributeError, match="scale"):
        _deep(impl).get_buffer("decoder.scale")


@pytest.mark.clause("set_submodule.replaces")
def test_set_submodule_replaces_the_module_at_the_path(impl: Adapter) -> None:
    root = _deep(impl)
    new = impl.linear(2, 2)
    root.set_submodule("encoder.layers.1", new)
    assert root.get_submodule("encoder.layers.1") is new
    assert root.encoder.layers[1] is new


@pytest.mark.clause("set_submodule.strict-requires-existing")
def test_strict_set_submodule_refuses_a_missing_target(impl: Adapter) -> None:
    root = _deep(impl)
    with pytest.raises(AttributeError, match="head"):
        root.set_submodule("decoder.head", impl.linear(2, 2), strict=True)
    assert not hasattr(root.decoder, "head")


@pytest.mark.clause("set_submodule.default-creates-last")
def test_set_submodule_creates_a_missing_last_segment(impl: Adapter) -> None:
    root = _deep(impl)
    head = impl.linear(2, 2)
    root.set_submodule("decoder.head", head)
    assert root.get_submodule("decoder.head") is head
    assert ("head", head) in list(root.decoder.named_children())


@pytest.mark.clause("extra_repr.in-repr")
def test_extra_repr_text_appears_in_repr(impl: Adapter) -> None:
    class Tagged(impl.nn.Module):  # type: ignore[name-defined,misc]
        def extra_repr(self) -> str:
            return "tag=conformance-7"

    assert "tag=conformance-7" in repr(Tagged())


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
