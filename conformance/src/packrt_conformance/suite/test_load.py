"""load_state_dict: binding by name, copy versus assign, strictness, ties, failed loads."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from packrt_conformance.adapter import Adapter
from packrt_conformance.suite._support import extra_state_class, shared_child_tree, tied_tree, values_equal

W = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
B = [0.5, -0.5, 1.5]


def _model(impl: Adapter) -> Any:
    root = impl.nn.Module()
    root.proj = impl.linear(2, 3)
    root.gain = impl.parameter([1.0])
    return root


def _checkpoint(impl: Adapter) -> dict[str, Any]:
    return {"proj.weight": impl.tensor(W), "proj.bias": impl.tensor(B), "gain": impl.tensor([2.0])}


@pytest.mark.clause("load_state_dict.binds-by-dotted-name")
def test_each_value_lands_in_the_tensor_its_key_names(impl: Adapter) -> None:
    m = _model(impl)
    m.load_state_dict(_checkpoint(impl))
    assert values_equal(impl, m.proj.weight, W)
    assert values_equal(impl, m.proj.bias, B)
    assert values_equal(impl, m.gain, [2.0])


class _Checkpoint(Mapping[str, Any]):
    """A Mapping that is not a dict: what a lazily read checkpoint file looks like."""

    def __init__(self, entries: dict[str, Any]) -> None:
        self._entries = entries

    def __getitem__(self, key: str) -> Any:
        return self._entries[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


@pytest.mark.clause("load_state_dict.any-mapping")
@pytest.mark.parametrize("wrap", [MappingProxyType, _Checkpoint], ids=["mappingproxy", "user-mapping"])
def test_any_mapping_loads_as_a_dict_does(impl: Adapter, wrap: Any) -> None:
    layer = impl.linear(2, 1)
    result = layer.load_state_dict(wrap({"weight": impl.tensor([[3.0, 4.0]]), "bias": impl.tensor([5.0])}))
    assert (list(result.missing_keys), list(result.unexpected_keys)) == ([], [])
    assert values_equal(impl, layer.weight, [[3.0, 4.0]])
    assert values_equal(impl, layer.bias, [5.0])


@pytest.mark.clause("load_state_dict.returns-accounting")
def test_exact_load_returns_empty_accounting(impl: Adapter) -> None:
    result = _model(impl).load_state_dict(_checkpoint(impl))
    assert list(result.missing_keys) == []
    assert list(result.unexpected_keys) == []


@pytest.mark.clause("load_state_dict.copy.keeps-objects")
def test_default_load_copies_into_the_existing_parameters(impl: Adapter) -> None:
    m = _model(impl)
    weight = m.proj.weight
    ckpt = _checkpoint(impl)
    m.load_state_dict(ckpt)
    assert m.proj.weight is weight
    assert not impl.shares_storage(m.proj.weight, ckpt["proj.weight"])


@pytest.mark.clause("load_state_dict.copy.dtype-converts")
def test_copied_value_takes_the_slot_dtype(impl: Adapter) -> None:
    m = _model(impl)
    ckpt = _checkpoint(impl)
    ckpt["proj.weight"] = impl.tensor(W, "float64")
    m.load_state_dict(ckpt)
    assert impl.dtype_name(m.proj.weight) == "float32"
    assert values_equal(impl, m.proj.weight, W)


# The pages name no exception type for a failed copy; either builtin a user would expect is accepted.
@pytest.mark.clause("load_state_dict.copy.shape-mismatch-raises")
@pytest.mark.parametrize("strict", [True, False])
def test_shape_mismatch_raises_whatever_strict_says(impl: Adapter, strict: bool) -> None:
    ckpt = _checkpoint(impl)
    ckpt["proj.weight"] = impl.tensor([[1.0, 2.0]])
    with pytest.raises((RuntimeError, ValueError), match=r"proj\.weight"):
        _model(impl).load_state_dict(ckpt, strict=strict)


@pytest.mark.clause("load_state_dict.copy.storage-free-raises")
@pytest.mark.parametrize("strict", [True, False])
def test_copy_into_storage_free_slot_raises_pointing_to_assign(impl: Adapter, strict: bool) -> None:
    with impl.meta_init():
        m = _model(impl)
    with pytest.raises(Exception, match=r"assign=True"):
        m.load_state_dict(_checkpoint(impl), strict=strict)


@pytest.mark.clause("load_state_dict.copy.storage-free-value-raises")
@pytest.mark.parametrize("strict", [True, False])
def test_copy_from_a_storage_free_value_raises_naming_the_key(impl: Adapter, strict: bool) -> None:
    with impl.meta_init():
        declared = impl.linear(2, 3)
    m = _model(impl)
    ckpt = _checkpoint(impl)
    ckpt["proj.weight"] = declared.weight  # shape (3, 2), as the slot, but no storage
    with pytest.raises((RuntimeError, ValueError, NotImplementedError), match=r"proj\.weight"):
        m.load_state_dict(ckpt, strict=strict)


@pytest.mark.clause("load_state_dict.copy.integer-into-float")
@pytest.mark.parametrize("source", ["int64", "int32"])
@pytest.mark.parametrize("slot", ["float32", "float64"])
def test_copy_load_converts_integer_values_into_float_weights(impl: Adapter, source: str, slot: str) -> None:
    m = _model(impl)
    m.to(impl.dtype(slot))
    weight = m.proj.weight
    ckpt = {
        "proj.weight": impl.tensor([[1, -2], [3, 4], [5, 600]], source),
        "proj.bias": impl.tensor([7, 0, -8], source),
    }
    ckpt["gain"] = impl.tensor([9], source)
    m.load_state_dict(ckpt)
    assert m.proj.weight is weight
    assert [impl.dtype_name(t) for t in (m.proj.weight, m.proj.bias, m.gain)] == [slot] * 3
    assert impl.to_numpy(m.proj.weight).tolist() == [[1.0, -2.0], [3.0, 4.0], [5.0, 600.0]]
    assert impl.to_numpy(m.proj.bias).tolist() == [7.0, 0.0, -8.0]
    assert impl.to_numpy(m.gain).tolist() == [9.0]


@pytest.mark.clause("load_state_dict.assign.binds-incoming")
def test_assign_binds_the_incoming_tensor_without_copying(impl: Adapter) -> None:
    m = _model(impl)
    ckpt = _checkpoint(impl)
    m.load_state_dict(ckpt, assign=True)
    assert impl.shares_storage(m.proj.weight, ckpt["proj.weight"])
    assert isinstance(m.proj.weight, impl.nn.Parameter)


@pytest.mark.clause("load_state_dict.assign.meta-init")
def test_meta_init_module_receives_values_through_assign(impl: Adapter) -> None:
    with impl.meta_init():
        m = _model(impl)
    assert not impl.has_storage(m.proj.weight)
    m.load_state_dict(_checkpoint(impl), assign=True)
    assert impl.has_storage(m.proj.weight)
    assert values_equal(impl, m.proj.weight, W)
    assert values_equal(impl, m.gain, [2.0])


@pytest.mark.clause("load_state_dict.assign.incoming-dtype")
def test_assign_takes_the_incoming_dtype(impl: Adapter) -> None:
    m = _model(impl)
    ckpt = _checkpoint(impl)
    ckpt["proj.weight"] = impl.tensor(W, "float16")
    m.load_state_dict(ckpt, assign=True)
    assert impl.dtype_name(m.proj.weight) == "float16"


@pytest.mark.clause("load_state_dict.assign.shape-mismatch-raises")
def test_assign_still_requires_matching_shapes(impl: Adapter) -> None:
    ckpt = _checkpoint(impl)
    ckpt["proj.bias"] = impl.tensor([1.0])
    with pytest.raises((RuntimeError, ValueError), match=r"proj\.bias"):
        _model(impl).load_state_dict(ckpt, assign=True)


@pytest.mark.clause("load_state_dict.assign.tied-weight")
def test_one_tensor_under_two_keys_becomes_one_shared_parameter(impl: Adapter) -> None:
    root = impl.nn.Module()
    root.a = impl.linear(2, 2, bias=False)
    root.b = impl.linear(2, 2, bias=False)
    shared = impl.tensor([[1.0, 0.0], [0.0, 1.0]])
    root.load_state_dict({"a.weight": shared, "b.weight": shared}, assign=True)
    assert root.a.weight is root.b.weight
    assert impl.shares_storage(root.a.weight, shared)


@pytest.mark.clause("load_state_dict.strict.raises")
def test_strict_load_with_key_mismatch_raises(impl: Adapter) -> None:
    ckpt = _checkpoint(impl)
    del ckpt["gain"]
    with pytest.raises(Exception, match=r"gain"):
        _model(impl).load_state_dict(ckpt)


@pytest.mark.clause("load_state_dict.strict.runtime-error-lists-keys")
def test_strict_refusal_is_runtime_error_naming_every_key(impl: Adapter) -> None:
    ckpt = _checkpoint(impl)
    del ckpt["gain"]
    ckpt["stray.one"] = impl.tensor([1.0])
    ckpt["stray.two"] = impl.tensor([1.0])
    with pytest.raises(RuntimeError, match=r"gain") as info:
        _model(impl).load_state_dict(ckpt, strict=True)
    for key in ("stray.one", "stray.two"):
        assert re.search(re.escape(key), str(info.value)), f"message does not name {key}: {info.value}"


@pytest.mark.clause("load_state_dict.strict-false.reports")
@given(extra=st.lists(st.from_regex(r"x[a-z]{1,5}(\.[a-z]{1,4})?", fullmatch=True), unique=True, max_size=4))
def test_non_strict_load_reports_keys_and_loads_the_rest(impl: Adapter, extra: list[str]) -> None:
    ckpt = _checkpoint(impl)
    del ckpt["gain"]
    for key in extra:
        ckpt[key] = impl.tensor([0.0])
    m = _model(impl)
    result = m.load_state_dict(ckpt, strict=False)
    assert list(result.missing_keys) == ["gain"]
    assert sorted(result.unexpected_keys) == sorted(extra)
    assert values_equal(impl, m.proj.weight, W)


@pytest.mark.clause("load_state_dict.tie.second-name-accepted")
def test_tied_module_loads_from_first_name_alone_and_accepts_both(impl: Adapter) -> None:
    src = tied_tree(impl)
    only_first = {
        "a.weight": impl.tensor(np.eye(2)),
        "a.bias": impl.tensor([1.0, 2.0]),
        "b.bias": impl.tensor([3.0, 4.0]),
    }
    dst = tied_tree(impl)
    result = dst.load_state_dict(only_first)
    assert list(result.missing_keys) == []
    assert values_equal(impl, dst.b.weight, np.eye(2))
    both = dict(only_first, **{"b.weight": only_first["a.weight"]})
    result = src.load_state_dict(both)
    assert list(result.unexpected_keys) == []


@pytest.mark.clause("load_state_dict.tie.conflicting-values-raise")
def test_two_names_of_a_tie_with_different_values_fail_naming_both(impl: Adapter) -> None:
    ckpt = {
        "a.weight": impl.tensor(np.eye(2)),
        "a.bias": impl.tensor([0.0, 0.0]),
        "b.weight": impl.tensor(2 * np.eye(2)),
        "b.bias": impl.tensor([0.0, 0.0]),
    }
    with pytest.raises(Exception, match=r"a\.weight") as info:
        tied_tree(impl).load_state_dict(ckpt)
    assert "b.weight" in str(info.value)


@pytest.mark.clause("load_state_dict.failed-load-leaves-module-unchanged")
def test_failed_load_changes_nothing(impl: Adapter) -> None:
    m = _model(impl)
    before = {k: impl.to_numpy(v) for k, v in m.state_dict().items()}
    ckpt = _checkpoint(impl)
    ckpt["proj.bias"] = impl.tensor([1.0])  # fails after proj.weight could have been copied
    with pytest.raises((RuntimeError, ValueError), match=r"proj\.bias"):
        m.load_state_dict(ckpt)
    for key, value in m.state_dict().items():
        assert np.array_equal(impl.to_numpy(value), before[key]), f"{key} changed by a failed load"


def _mixed_tree(impl: Adapter) -> Any:
    """root(p_b, p_a; buffers buf_z, buf_y, tmp: non-persistent) -> lin: Linear(2, 2), tail(gain; steps, last)."""
    root = impl.nn.Module()
    root.p_b = impl.parameter([1.0])
    root.register_buffer("buf_z", impl.tensor([2.0]))
    root.p_a = impl.parameter([3.0])
    root.register_buffer("tmp", impl.tensor([0.0]), persistent=False)
    root.register_buffer("buf_y", impl.tensor([4.0]))
    root.lin = impl.linear(2, 2)
    tail = impl.nn.Module()
    tail.register_buffer("steps", impl.tensor([1], "int64"))
    tail.gain = impl.parameter([5.0])
    tail.register_buffer("last", impl.tensor([6.0]))
    root.tail = tail
    return root


MIXED_ORDER = ["p_b", "p_a", "buf_z", "buf_y", "lin.weight", "lin.bias", "tail.gain", "tail.steps", "tail.last"]


@pytest.mark.clause("load_state_dict.missing-keys-order")
@pytest.mark.parametrize("given_keys", [(), ("p_a", "lin.bias"), ("p_b", "buf_y", "tail.steps")])
def test_missing_keys_follow_state_dict_order(impl: Adapter, given_keys: tuple[str, ...]) -> None:
    full = _mixed_tree(impl).state_dict()  # the values only: state_dict's own order is its clause's business
    result = _mixed_tree(impl).load_state_dict({k: full[k] for k in given_keys}, strict=False)
    assert list(result.missing_keys) == [k for k in MIXED_ORDER if k not in given_keys]
    assert list(result.unexpected_keys) == []


def _extra_state_tree(impl: Adapter) -> Any:
    counter = extra_state_class(impl)
    root = impl.nn.Module()
    root.second = counter(seen=2, w=2.0)
    root.plain = impl.linear(1, 1)
    root.first = counter(seen=1, w=1.0)
    return root


@pytest.mark.clause("load_state_dict.missing-extra-state")
def test_missing_extra_state_keys_are_each_reported(impl: Adapter) -> None:
    src = _extra_state_tree(impl)
    tensors_only = {k: v for k, v in src.state_dict().items() if not k.endswith("_extra_state")}
    assert set(src.state_dict()) - set(tensors_only) == {"second._extra_state", "first._extra_state"}
    dst = _extra_state_tree(impl)
    result = dst.load_state_dict(tensors_only, strict=False)
    extra_missing = [k for k in result.missing_keys if k.endswith("_extra_state")]
    assert extra_missing == ["second._extra_state", "first._extra_state"]
    assert list(result.missing_keys) == extra_missing, "every tensor key was given"
    assert (dst.second.seen, dst.first.seen) == (2, 1)
    with pytest.raises(RuntimeError, match=r"second\._extra_state") as info:
        _extra_state_tree(impl).load_state_dict(tensors_only, strict=True)
    assert "first._extra_state" in str(info.value)
    one = dict(tensors_only, **{"first._extra_state": {"seen": 9}})
    dst = _extra_state_tree(impl)
    result = dst.load_state_dict(one, strict=False)
    assert list(result.missing_keys) == ["second._extra_state"]
    assert (dst.second.seen, dst.first.seen) == (2, 9)


@pytest.mark.clause("load_state_dict.shared-child-second-name")
def test_a_shared_child_loads_from_its_second_name(impl: Adapter) -> None:
    root, child = shared_child_tree(impl)
    result = root.load_state_dict({"second.w": impl.tensor([7.0])})
    assert list(result.missing_keys) == []
    assert list(result.unexpected_keys) == []
    assert values_equal(impl, child.w, [7.0])
    assert values_equal(impl, root.first.w, [7.0])
    result = root.load_state_dict({"first.w": impl.tensor([8.0]), "second.w": impl.tensor([8.0])})
    assert (list(result.missing_keys), list(result.unexpected_keys)) == ([], [])
    assert values_equal(impl, child.w, [8.0])


def _failing_restore_tree(impl: Adapter) -> Any:
    """root -> kept: extra state that restores, proj: Linear(2, 3), bad: extra state whose restore raises."""

    kept = extra_state_class(impl)

    class Refuses(kept):  # type: ignore[misc,valid-type]
        def set_extra_state(self, state: Any) -> None:
            if state["seen"] < 0:
                raise ValueError("extra state refused on purpose")
            super().set_extra_state(state)

    root = impl.nn.Module()
    root.kept = kept(seen=1)
    root.proj = impl.linear(2, 3)
    root.bad = Refuses(seen=1)
    return root


@pytest.mark.clause("load_state_dict.failed-load-leaves-module-unchanged")
@pytest.mark.parametrize("assign", [False, True])
def test_a_load_failing_in_set_extra_state_changes_nothing(impl: Adapter, assign: bool) -> None:
    m = _failing_restore_tree(impl)
    x = impl.tensor([[1.0, -2.0]])
    before_out = impl.to_numpy(m.proj(x))  # the first forward packs where the layer packs
    before = {k: impl.to_numpy(v) for k, v in m.state_dict().items() if not k.endswith("_extra_state")}
    ckpt = {
        "kept.w": impl.tensor([5.0]),
        "kept._extra_state": {"seen": 7},
        "proj.weight": impl.tensor(W),
        "proj.bias": impl.tensor(B),
        "bad.w": impl.tensor([6.0]),
        "bad._extra_state": {"seen": -1},
    }
    with pytest.raises(ValueError, match="refused on purpose"):
        m.load_state_dict(ckpt, assign=assign)
    assert (m.kept.seen, m.bad.seen) == (1, 1), "extra state restored before the failure must be put back"
    after = {k: impl.to_numpy(v) for k, v in m.state_dict().items() if not k.endswith("_extra_state")}
    assert {k: v.tolist() for k, v in after.items()} == {k: v.tolist() for k, v in before.items()}
    np.testing.assert_allclose(impl.to_numpy(m.proj(x)), before_out, rtol=1e-6)


@pytest.mark.clause("load_state_dict.tie.second-name-wrong-shape-raises")
@pytest.mark.parametrize("assign", [False, True], ids=["copy", "assign"])
def test_a_tied_tensors_second_name_with_the_wrong_shape_fails_the_load(impl: Adapter, assign: bool) -> None:
    ckpt = {
        "a.weight": impl.tensor(np.eye(2)),
        "a.bias": impl.tensor([0.0, 0.0]),
        "b.weight": impl.tensor(np.ones((3, 2))),  # the model's tied weight is 2 x 2
        "b.bias": impl.tensor([0.0, 0.0]),
    }
    with pytest.raises(RuntimeError, match=r"b\.weight"):
        tied_tree(impl).load_state_dict(ckpt, assign=assign)
