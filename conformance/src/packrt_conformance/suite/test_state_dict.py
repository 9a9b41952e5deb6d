"""state_dict: keys, order, prefix, what the values are, destination, ties, extra state, round trip."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from packrt_conformance.adapter import Adapter
from packrt_conformance.suite._support import SAMPLE_STATE, extra_state_class, sample_tree, tied_tree, values_equal

_FLOATS = st.floats(-1e3, 1e3, allow_nan=False, width=32)


def _with_extra_state(impl: Adapter) -> Any:
    root = impl.nn.Module()
    root.counter = extra_state_class(impl)(seen=0)
    return root


@pytest.mark.clause("state_dict.flat-dotted-keys", "module.order.state-dict")
def test_state_dict_is_flat_with_dotted_keys_in_registration_order(impl: Adapter) -> None:
    sd = sample_tree(impl).state_dict()
    assert isinstance(sd, dict)
    assert list(sd) == SAMPLE_STATE


@pytest.mark.clause("state_dict.params-and-persistent-buffers")
def test_state_dict_holds_parameters_and_persistent_buffers_only(impl: Adapter) -> None:
    root = sample_tree(impl)
    keys = set(root.state_dict())
    assert {n for n, _ in root.named_parameters()} <= keys
    assert "decoder.cache" not in keys
    assert keys == {n for n, _ in root.named_parameters()} | {"mask", "decoder.steps"}


@pytest.mark.clause("state_dict.prefix")
@given(prefix=st.from_regex(r"[a-z][a-z0-9_.]{0,10}\.", fullmatch=True))
def test_state_dict_prefix_is_prepended_to_every_key(impl: Adapter, prefix: str) -> None:
    root = sample_tree(impl)
    assert sorted(root.state_dict()) == sorted(SAMPLE_STATE)
    assert list(root.state_dict(prefix=prefix)) == [prefix + k for k in root.state_dict()]


@pytest.mark.clause("state_dict.values-share-storage")
def test_state_dict_values_are_plain_tensors_sharing_storage(impl: Adapter) -> None:
    root = sample_tree(impl)
    sd = root.state_dict()
    assert not isinstance(sd["scale"], impl.nn.Parameter)
    assert sd["scale"] is not root.scale
    assert impl.shares_storage(sd["scale"], root.scale)
    assert impl.shares_storage(sd["mask"], root.mask)


@pytest.mark.clause("state_dict.keep-vars")
def test_keep_vars_hands_out_the_objects_themselves(impl: Adapter) -> None:
    root = sample_tree(impl)
    sd = root.state_dict(keep_vars=True)
    assert sd["scale"] is root.scale
    assert sd["encoder.weight"] is root.encoder.weight
    assert sd["mask"] is root.mask


@pytest.mark.clause("state_dict.destination")
def test_destination_is_filled_in_place_and_returned(impl: Adapter) -> None:
    dest: dict[str, Any] = {"already": 1}
    root = sample_tree(impl)
    out = root.state_dict(destination=dest)
    assert out is dest
    assert list(dest) == ["already", *root.state_dict()]
    assert sorted(root.state_dict()) == sorted(SAMPLE_STATE)


@pytest.mark.clause("state_dict.round-trip")
@given(
    weight=hnp.arrays(np.float32, (3, 2), elements=_FLOATS),
    gain=hnp.arrays(np.float32, (1,), elements=_FLOATS),
)
def test_loading_a_state_dict_into_a_fresh_module_reproduces_it(
    impl: Adapter, weight: np.ndarray, gain: np.ndarray
) -> None:
    src = sample_tree(impl)
    impl.write_(src.encoder.weight, weight)
    impl.write_(src.decoder.gain, gain)
    dst = sample_tree(impl)
    dst.load_state_dict(src.state_dict())
    for key, value in src.state_dict().items():
        assert values_equal(impl, dst.state_dict()[key], impl.to_numpy(value)), key


@pytest.mark.clause("module.dedup.state-dict")
def test_tied_tensor_has_one_state_dict_entry_under_the_first_name(impl: Adapter) -> None:
    assert list(tied_tree(impl).state_dict()) == ["a.weight", "a.bias", "b.bias"]


@pytest.mark.clause("get_extra_state.base-has-none")
def test_base_module_has_no_extra_state(impl: Adapter) -> None:
    m = impl.nn.Module()
    with pytest.raises(RuntimeError, match=r"(?i)extra.?state"):
        m.get_extra_state()
    m.w = impl.parameter([1.0])
    assert list(m.state_dict()) == ["w"]


@pytest.mark.clause("get_extra_state.in-state-dict")
def test_overridden_extra_state_is_stored_under_extra_state_key(impl: Adapter) -> None:
    root = _with_extra_state(impl)
    root.counter.seen = 7
    sd = root.state_dict()
    assert list(sd) == ["counter.w", "counter._extra_state"]
    assert sd["counter._extra_state"] == {"seen": 7}


@pytest.mark.clause("set_extra_state.called-by-load")
def test_load_hands_extra_state_back_to_set_extra_state(impl: Adapter) -> None:
    src = _with_extra_state(impl)
    src.counter.seen = 11
    dst = _with_extra_state(impl)
    dst.load_state_dict(src.state_dict())
    assert dst.counter.seen == 11


@pytest.mark.clause("state_dict.own-buffers-order")
def test_several_own_buffers_keep_registration_order(impl: Adapter) -> None:
    root = impl.nn.Module()
    root.register_buffer("zeta", impl.tensor([1.0]))
    root.w2 = impl.parameter([2.0])
    root.register_buffer("alpha", impl.tensor([3.0]))
    root.register_buffer("scratch", impl.tensor([0.0]), persistent=False)
    root.register_buffer("mid", impl.tensor([4], "int64"))
    root.w1 = impl.parameter([5.0])
    child = impl.nn.Module()
    child.register_buffer("yy", impl.tensor([6.0]))
    child.register_buffer("bb", impl.tensor([7.0]))
    root.child = child
    expected = ["w2", "w1", "zeta", "alpha", "mid", "child.yy", "child.bb"]
    assert list(root.state_dict()) == expected
    assert list(root.state_dict(keep_vars=True)) == expected
    root.alpha = impl.tensor([8.0])  # a new value in a registered slot keeps the slot's place
    assert list(root.state_dict()) == expected
    assert values_equal(impl, root.state_dict()["alpha"], [8.0])
    assert [n for n, _ in root.named_buffers()] == ["zeta", "alpha", "scratch", "mid", "child.yy", "child.bb"]


@pytest.mark.clause("module.dedup.state-dict")
def test_shared_buffer_has_one_state_dict_entry_under_the_first_name(impl: Adapter) -> None:
    root = impl.nn.Module()
    root.a = impl.nn.Module()
    root.b = impl.nn.Module()
    table = impl.tensor([1.0, 2.0])
    root.a.register_buffer("table", table)
    root.b.register_buffer("table", table)
    root.b.register_buffer("own", impl.tensor([3.0]))
    assert list(root.state_dict()) == ["a.table", "b.own"]
