"""Packing and weight residency (packrt's additions): pack timing, checkpoint handles, state_dict.

These clauses need the 'packing' / 'residency' capabilities; an implementation without them
(PyTorch) skips them with that reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from packrt_conformance.adapter import Adapter
from packrt_conformance.suite._support import values_equal

W = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
B = np.array([0.5, -0.5, 1.5])
X = np.array([[1.0, -2.0]])
RESIDENCIES = ["packed", "borrowed", "auto", "per_call"]


def _loaded(impl: Adapter, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    layer = impl.linear(2, 3)
    ckpt = {"weight": impl.tensor(W), "bias": impl.tensor(B)}
    layer.load_state_dict(ckpt, assign=True, **kwargs)
    return layer, ckpt


def _out(impl: Adapter, layer: Any) -> Any:
    return impl.to_numpy(layer(impl.tensor(X)))


def _packed_by_a_forward(impl: Adapter) -> Any:
    """A layer assign-loaded with the default residency, then packed by its first forward."""
    layer, _ = _loaded(impl)
    _out(impl, layer)
    assert impl.is_packed(layer), "the first forward packs under the default residency"
    return layer


def _expect(weight: Any = W, bias: Any = B) -> Any:
    return X @ np.asarray(weight).T + np.asarray(bias)


@pytest.mark.clause("load_state_dict.pack.eager")
def test_pack_true_packs_at_the_end_of_the_load(impl: Adapter) -> None:
    lazy, _ = _loaded(impl)
    assert not impl.is_packed(lazy), "without pack=True the layer packs on its first forward"
    eager, _ = _loaded(impl, pack=True)
    assert impl.is_packed(eager)
    np.testing.assert_allclose(_out(impl, eager), _expect(), rtol=1e-5)


@pytest.mark.clause("load_state_dict.pack.handle-live-until-pack")
def test_checkpoint_handle_write_before_pack_is_seen(impl: Adapter) -> None:
    layer, ckpt = _loaded(impl)
    impl.write_(ckpt["weight"], 2 * W)
    np.testing.assert_allclose(_out(impl, layer), _expect(weight=2 * W), rtol=1e-5)


@pytest.mark.clause("load_state_dict.pack.handle-write-after-pack-unseen")
def test_checkpoint_handle_write_after_pack_is_silent(impl: Adapter) -> None:
    layer, ckpt = _loaded(impl, pack=True)
    first = _out(impl, layer)
    impl.write_(ckpt["weight"], 2 * W)  # neither refused ...
    np.testing.assert_allclose(_out(impl, layer), first, rtol=1e-6)  # ... nor seen


@pytest.mark.clause("load_state_dict.pack.edit-through-parameter-repacks")
def test_edit_through_the_parameter_after_pack_is_seen(impl: Adapter) -> None:
    layer, _ = _loaded(impl, pack=True)
    _out(impl, layer)
    impl.write_(layer.bias, B + 1.0)
    np.testing.assert_allclose(_out(impl, layer), _expect(bias=B + 1.0), rtol=1e-5)


@pytest.mark.clause("load_state_dict.residency.borrowed-live-handle")
def test_borrowed_residency_keeps_the_checkpoint_live(impl: Adapter) -> None:
    layer, ckpt = _loaded(impl, weight_residency="borrowed")
    _out(impl, layer)
    assert not impl.is_packed(layer)
    impl.write_(ckpt["weight"], 3 * W)
    np.testing.assert_allclose(_out(impl, layer), _expect(weight=3 * W), rtol=1e-5)


@pytest.mark.clause("load_state_dict.residency.packed-single-copy")
def test_packed_residency_holds_one_copy_and_reads_back(impl: Adapter) -> None:
    layer, _ = _loaded(impl, weight_residency="packed")
    np.testing.assert_allclose(_out(impl, layer), _expect(), rtol=1e-5)
    raw_bytes = (W.size + B.size) * 4
    assert impl.resident_bytes(layer) <= raw_bytes, "packed residency must drop the raw weight"
    assert values_equal(impl, layer.weight, W)


@pytest.mark.clause("load_state_dict.residency.auto")
def test_auto_residency_packs_a_small_layer(impl: Adapter) -> None:
    layer, _ = _loaded(impl, weight_residency="auto")
    np.testing.assert_allclose(_out(impl, layer), _expect(), rtol=1e-5)
    assert impl.is_packed(layer)


@pytest.mark.clause("load_state_dict.residency.auto-no-room-borrows")
@pytest.mark.parametrize("pack", [False, True], ids=["packed-by-forward", "pack-true"])
def test_auto_residency_borrows_when_no_pack_fits_the_free_memory(impl: Adapter, pack: bool) -> None:
    with impl.short_free_memory():  # type: ignore[attr-defined]  # capability free-memory-control
        layer, ckpt = _loaded(impl, weight_residency="auto", pack=pack)
        np.testing.assert_allclose(_out(impl, layer), _expect(), rtol=1e-5)
        assert not impl.is_packed(layer), "auto packed a layer whose pack does not fit the free memory"
        impl.write_(ckpt["weight"], 3 * W)
        np.testing.assert_allclose(_out(impl, layer), _expect(weight=3 * W), rtol=1e-5)


@pytest.mark.clause("load_state_dict.residency.per-call")
def test_per_call_residency_keeps_no_serving_form(impl: Adapter) -> None:
    layer, _ = _loaded(impl, weight_residency="per_call")
    for _ in range(2):
        np.testing.assert_allclose(_out(impl, layer), _expect(), rtol=1e-5)
        assert not impl.is_packed(layer)


@pytest.mark.clause("load_state_dict.residency.none-keeps-default")
def test_no_residency_keeps_the_layer_default(impl: Adapter) -> None:
    layer, _ = _loaded(impl, weight_residency=None)
    np.testing.assert_allclose(_out(impl, layer), _expect(), rtol=1e-5)


@pytest.mark.clause("load_state_dict.residency.plain-parameters-ignore")
@pytest.mark.parametrize("residency", RESIDENCIES)
def test_loose_parameters_ignore_residency(impl: Adapter, residency: str) -> None:
    root = impl.nn.Module()
    root.gain = impl.parameter([1.0, 1.0])
    held = root.gain
    handle = root.state_dict()["gain"]  # a plain handle on the parameter's storage
    root.load_state_dict({"gain": impl.tensor([4.0, 5.0])}, weight_residency=residency)
    assert root.gain is held
    assert values_equal(impl, root.gain, [4.0, 5.0])
    assert impl.shares_storage(root.gain, handle), "a copy load writes into the storage the parameter has"
    assert values_equal(impl, handle, [4.0, 5.0])


@pytest.mark.clause("load_state_dict.residency.only-bound-layers")
@pytest.mark.parametrize("residency", ["borrowed", "per_call"])
def test_residency_reaches_only_the_layers_the_load_binds(impl: Adapter, residency: str) -> None:
    root = impl.nn.Module()
    root.bound = impl.linear(2, 3)
    root.other = impl.linear(2, 3)
    ckpt = {"bound.weight": impl.tensor(W), "bound.bias": impl.tensor(B)}
    result = root.load_state_dict(ckpt, strict=False, weight_residency=residency)
    assert list(result.missing_keys) == ["other.weight", "other.bias"]
    _out(impl, root.other)
    assert impl.is_packed(root.other), "a layer the load did not bind keeps its default (packing) residency"
    _out(impl, root.bound)
    assert not impl.is_packed(root.bound), f"the bound layer serves under {residency}"


@pytest.mark.clause("initialize.packs-eagerly")
def test_initialize_packs_every_bound_weight(impl: Adapter) -> None:
    layer, _ = _loaded(impl)
    assert layer.initialize() is layer
    assert impl.is_packed(layer)
    root = impl.nn.Module()  # a tree: the layers sit below modules that have no weights of their own
    root.block = impl.nn.Sequential(_loaded(impl)[0], _loaded(impl)[0])
    root.head = _loaded(impl)[0]
    assert root.initialize() is root
    assert [impl.is_packed(m) for m in (root.block[0], root.block[1], root.head)] == [True, True, True]


@pytest.mark.clause("state_dict.complete-after-forward")
def test_state_dict_after_forward_is_complete(impl: Adapter) -> None:
    layer, _ = _loaded(impl)
    _out(impl, layer)
    sd = layer.state_dict()
    assert list(sd) == ["weight", "bias"]
    assert values_equal(impl, sd["weight"], W)
    assert values_equal(impl, sd["bias"], B)


@pytest.mark.clause("state_dict.drops-packed-entries")
def test_revision_1_state_dict_omits_packed_entries(impl: Adapter) -> None:
    layer, _ = _loaded(impl)
    _out(impl, layer)
    assert impl.is_packed(layer)
    assert "weight" not in layer.state_dict()


# -- pack=True across the tree and dtypes ---------------------------------------------------------
def _three_layers(impl: Adapter) -> Any:
    root = impl.nn.Module()
    for name in ("a", "b", "c"):
        setattr(root, name, impl.linear(2, 3))
    return root


@pytest.mark.clause("load_state_dict.pack.whole-tree-strict-false")
@pytest.mark.parametrize("named", [("b",), ("a", "c")])
@pytest.mark.parametrize("residency", [None, "auto"])
def test_pack_true_packs_every_layer_even_those_not_named(
    impl: Adapter, named: tuple[str, ...], residency: str | None
) -> None:
    root = _three_layers(impl)
    if residency is not None:  # every layer takes the residency first; then a partial load packs them all
        if "residency" not in impl.capabilities:
            pytest.skip("needs capability ['residency']")
        root.load_state_dict(root.state_dict(), weight_residency=residency)
    ckpt = {f"{n}.{k}": impl.tensor(v) for n in named for k, v in (("weight", W), ("bias", B))}
    result = root.load_state_dict(ckpt, strict=False, pack=True)
    assert sorted(result.missing_keys) == sorted(
        f"{n}.{k}" for n in ("a", "b", "c") if n not in named for k in ("weight", "bias")
    )
    assert {n: impl.is_packed(getattr(root, n)) for n in ("a", "b", "c")} == dict.fromkeys(("a", "b", "c"), True)
    for n in named:
        np.testing.assert_allclose(_out(impl, getattr(root, n)), _expect(), rtol=1e-5)


@pytest.mark.clause("load_state_dict.pack.copy-converts-dtype")
def test_copy_load_of_float64_with_pack_serves_float32(impl: Adapter) -> None:
    layer = impl.linear(2, 3)
    weight = impl.tensor(W, "float64")
    layer.load_state_dict({"weight": weight, "bias": impl.tensor(B, "float64")}, pack=True)
    assert impl.is_packed(layer)
    assert impl.dtype_name(layer.weight) == "float32"
    assert values_equal(impl, layer.weight, W)
    out = layer(impl.tensor(X))
    assert impl.dtype_name(out) == "float32"
    np.testing.assert_allclose(impl.to_numpy(out), _expect(), rtol=1e-5)
    impl.write_(weight, 2 * W)  # a copy load shares nothing with the checkpoint
    np.testing.assert_allclose(_out(impl, layer), _expect(), rtol=1e-5)


@pytest.mark.clause("load_state_dict.pack.assign-half")
def test_assign_load_of_float16_with_pack_serves_the_values(impl: Adapter) -> None:
    layer = impl.linear(2, 3)
    layer.load_state_dict(
        {"weight": impl.tensor(W, "float16"), "bias": impl.tensor(B, "float16")}, assign=True, pack=True
    )
    assert impl.is_packed(layer)
    assert impl.dtype_name(layer.weight) == "float16"
    assert values_equal(impl, layer.weight, W)
    for _ in range(2):  # a float16 layer takes float16 input (the dtypes must agree, as in PyTorch)
        out = impl.to_numpy(layer(impl.tensor(X, "float16")))
        np.testing.assert_allclose(out, _expect(), rtol=1e-2)
        assert impl.is_packed(layer)


# -- residency across loads -------------------------------------------------------------------
@pytest.mark.clause("load_state_dict.pack.borrowed-live-handle")
def test_pack_true_with_borrowed_keeps_the_checkpoint_live(impl: Adapter) -> None:
    layer, ckpt = _loaded(impl, pack=True, weight_residency="borrowed")
    assert not impl.is_packed(layer)
    impl.write_(ckpt["weight"], 2 * W)
    np.testing.assert_allclose(_out(impl, layer), _expect(weight=2 * W), rtol=1e-5)
    assert not impl.is_packed(layer)
    impl.write_(ckpt["weight"], 3 * W)
    np.testing.assert_allclose(_out(impl, layer), _expect(weight=3 * W), rtol=1e-5)
    assert impl.raw_bytes(layer) == (W.size + B.size) * 4


@pytest.mark.clause("load_state_dict.residency.reload-drops-pack")
@pytest.mark.parametrize("residency", ["borrowed", "per_call"])
def test_a_packed_layer_reloaded_borrowed_or_per_call_holds_no_pack(impl: Adapter, residency: str) -> None:
    layer = _packed_by_a_forward(impl)
    ckpt = {"weight": impl.tensor(2 * W), "bias": impl.tensor(B)}
    layer.load_state_dict(ckpt, assign=True, weight_residency=residency)
    assert not impl.is_packed(layer), "the load must drop the pack"
    np.testing.assert_allclose(_out(impl, layer), _expect(weight=2 * W), rtol=1e-5)
    assert not impl.is_packed(layer)
    assert impl.raw_bytes(layer) == (W.size + B.size) * 4
    if residency == "borrowed":
        impl.write_(ckpt["weight"], 3 * W)
        np.testing.assert_allclose(_out(impl, layer), _expect(weight=3 * W), rtol=1e-5)
        assert not impl.is_packed(layer)


@pytest.mark.clause("load_state_dict.residency.partial-reload-restores-raw")
@pytest.mark.parametrize("residency", ["borrowed", "per_call"])
def test_a_partial_reload_gives_the_unbound_weights_back_as_raw_tensors(impl: Adapter, residency: str) -> None:
    layer = _packed_by_a_forward(impl)
    result = layer.load_state_dict({"bias": impl.tensor(B + 1.0)}, strict=False, weight_residency=residency)
    assert list(result.missing_keys) == ["weight"]
    assert not impl.is_packed(layer), "the load must drop the pack"
    assert impl.raw_bytes(layer) == (W.size + B.size) * 4, "the weight the load left alone must be raw again"
    assert values_equal(impl, layer.weight, W)
    np.testing.assert_allclose(_out(impl, layer), _expect(bias=B + 1.0), rtol=1e-5)
    impl.write_(layer.weight, 2 * W)
    np.testing.assert_allclose(_out(impl, layer), _expect(weight=2 * W, bias=B + 1.0), rtol=1e-5)
    assert not impl.is_packed(layer)
    assert impl.raw_bytes(layer) == (W.size + B.size) * 4


@pytest.mark.clause("load_state_dict.residency.packed-drops-raw")
def test_packed_residency_really_drops_the_raw_weights(impl: Adapter) -> None:
    layer, ckpt = _loaded(impl, weight_residency="packed")
    assert impl.raw_bytes(layer) == (W.size + B.size) * 4, "before the first forward the bound tensors are raw"
    first = _out(impl, layer)
    np.testing.assert_allclose(first, _expect(), rtol=1e-5)
    assert impl.is_packed(layer)
    assert impl.raw_bytes(layer) == 0, "the raw weight storage must be released once packed"
    impl.write_(ckpt["weight"], 2 * W)
    np.testing.assert_allclose(_out(impl, layer), first, rtol=1e-6)
    assert impl.raw_bytes(layer) == 0
    assert values_equal(impl, layer.weight, W)


@pytest.mark.clause("load_state_dict.pack.nothing-to-pack-refuses-nothing")
@pytest.mark.parametrize("residency", ["borrowed", "per_call"])
def test_pack_true_under_a_residency_without_a_pack_loads_a_partial_checkpoint(impl: Adapter, residency: str) -> None:
    with impl.meta_init():
        layer = impl.linear(2, 3)
    partial = {"weight": impl.tensor(W)}
    result = layer.load_state_dict(partial, strict=False, assign=True, pack=True, weight_residency=residency)
    assert list(result.missing_keys) == ["bias"]
    assert list(result.unexpected_keys) == []
    assert not impl.is_packed(layer), f"{residency} keeps no packed copy"
    assert values_equal(impl, layer.weight, W)
    assert not impl.has_storage(layer.bias), "the bias the checkpoint lacks stays declared, storage-free"


@pytest.mark.clause("load_state_dict.residency.layer-with-empty-slot")
@pytest.mark.parametrize("assign", [True, False], ids=["assign", "copy"])
@pytest.mark.parametrize("residency", ["packed", "borrowed", "auto", "per_call", None])
def test_every_residency_serves_a_layer_without_bias(impl: Adapter, residency: str | None, assign: bool) -> None:
    layer = impl.linear(2, 3, bias=False)
    result = layer.load_state_dict({"weight": impl.tensor(W)}, assign=assign, weight_residency=residency)
    assert (list(result.missing_keys), list(result.unexpected_keys)) == ([], [])
    for call in ("first", "second"):
        np.testing.assert_allclose(_out(impl, layer), X @ W.T, rtol=1e-5, err_msg=f"{residency}, {call} forward")
    sd = layer.state_dict()
    assert list(sd) == ["weight"], "the empty bias slot is not a key"
    assert values_equal(impl, sd["weight"], W)
