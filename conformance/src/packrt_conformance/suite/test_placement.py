"""Placement: casts, device moves, the forms of to(), and to_empty."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from packrt_conformance.adapter import Adapter
from packrt_conformance.suite._support import SAMPLE_BUFFERS, SAMPLE_PARAMS, names, sample_tree, tied_tree


def _dtypes(impl: Adapter, root: Any) -> dict[str, str]:
    pairs = [*root.named_parameters(), *root.named_buffers()]
    return {n: impl.dtype_name(t) for n, t in pairs}


def _expect_cast(impl: Adapter, root: Any, floating: str) -> None:
    got = _dtypes(impl, root)
    assert got.pop("decoder.steps") == "int64", "integer buffers must keep their dtype"
    assert set(got.values()) == {floating}, got


@pytest.mark.parametrize(
    ("method", "dtype"),
    [
        pytest.param("half", "float16", marks=pytest.mark.clause("half.casts-floating"), id="half"),
        pytest.param("float", "float32", marks=pytest.mark.clause("float.casts-floating"), id="float"),
        pytest.param("double", "float64", marks=pytest.mark.clause("double.casts-floating"), id="double"),
        pytest.param("bfloat16", "bfloat16", marks=pytest.mark.clause("bfloat16.casts-floating"), id="bfloat16"),
    ],
)
def test_cast_method_converts_floating_tensors_only(impl: Adapter, method: str, dtype: str) -> None:
    root = sample_tree(impl)
    if method == "float":
        root.double()
    assert getattr(root, method)() is root
    _expect_cast(impl, root, dtype)


@pytest.mark.clause("to.only-floating", "to.dtype-object", "to.returns-self")
def test_to_dtype_object_casts_floating_tensors_in_place(impl: Adapter) -> None:
    root = sample_tree(impl)
    assert root.to(impl.dtype("float64")) is root
    _expect_cast(impl, root, "float64")


@pytest.mark.clause("to.dtype-name")
@pytest.mark.parametrize(("name", "dtype"), [("half", "float16"), ("float16", "float16"), ("double", "float64")])
def test_to_accepts_a_dtype_name(impl: Adapter, name: str, dtype: str) -> None:
    root = sample_tree(impl)
    root.to(name)
    _expect_cast(impl, root, dtype)


@pytest.mark.clause("to.datatype-value")
def test_to_accepts_a_datatype_value(impl: Adapter) -> None:
    root = sample_tree(impl)
    root.to(impl.datatype("float16"))
    _expect_cast(impl, root, "float16")


@pytest.mark.clause("to.device-string", "cpu.same-as-to-cpu")
def test_to_cpu_and_cpu_place_every_tensor_on_the_cpu(impl: Adapter) -> None:
    a, b = sample_tree(impl), sample_tree(impl)
    assert a.to("cpu") is a
    assert b.cpu() is b
    for root in (a, b):
        assert {impl.device_of(t) for t in [*root.parameters(), *root.buffers()]} == {"cpu"}


@pytest.mark.clause("to.device-and-dtype")
def test_to_device_and_dtype_in_one_call(impl: Adapter) -> None:
    root = sample_tree(impl)
    root.to("cpu", impl.dtype("float16"))
    _expect_cast(impl, root, "float16")


@pytest.mark.clause("to.keywords")
def test_to_accepts_device_and_dtype_keywords(impl: Adapter) -> None:
    root = sample_tree(impl)
    root.to(device="cpu", dtype=impl.dtype("float64"))
    _expect_cast(impl, root, "float64")


@pytest.mark.clause("to.tensor-form")
def test_to_tensor_adopts_its_dtype(impl: Adapter) -> None:
    root = sample_tree(impl)
    root.to(impl.tensor([1.0], "float16"))
    _expect_cast(impl, root, "float16")


@pytest.mark.clause("to.identity-kept")
def test_cast_keeps_parameter_and_buffer_objects(impl: Adapter) -> None:
    root = sample_tree(impl)
    before = dict([*root.named_parameters(), *root.named_buffers()])
    root.half()
    after = dict([*root.named_parameters(), *root.named_buffers()])
    replaced = [n for n in before if before[n] is not after[n]]
    assert replaced == [], f"these objects were replaced by the cast: {replaced}"
    assert impl.dtype_name(before["scale"]) == "float16", "a held reference must see the cast"


@pytest.mark.clause("register_buffer.moves-with-module")
def test_floating_buffer_follows_a_cast(impl: Adapter) -> None:
    root = sample_tree(impl)
    root.half()
    assert impl.dtype_name(root.mask) == "float16"
    assert impl.dtype_name(dict(root.named_buffers())["decoder.cache"]) == "float16"


@pytest.mark.clause("module.order.placement")
def test_placement_change_keeps_walk_order(impl: Adapter) -> None:
    root = sample_tree(impl)
    root.half().to("cpu").float()
    assert names(root.named_parameters()) == SAMPLE_PARAMS
    assert names(root.named_buffers()) == SAMPLE_BUFFERS


@pytest.mark.clause("module.dedup.placement")
def test_tied_tensor_stays_one_object_through_a_cast(impl: Adapter) -> None:
    root = tied_tree(impl)
    root.double()
    assert root.a.weight is root.b.weight
    assert impl.dtype_name(root.b.weight) == "float64"


@pytest.mark.clause("cuda.default-first-device")
def test_cuda_without_argument_uses_the_first_device(impl: Adapter) -> None:
    root = sample_tree(impl)
    assert root.cuda() is root
    assert {impl.device_of(t) for t in root.parameters()} == {"cuda:0"}


@pytest.mark.clause("cpu.back-from-cuda")
def test_cpu_brings_a_cuda_tree_back_with_its_values(impl: Adapter) -> None:
    root = sample_tree(impl)
    tensors = [*root.parameters(), *root.buffers()]
    before = [impl.to_numpy(t) for t in tensors]
    root.cuda()
    assert root.cpu() is root
    after = [*root.parameters(), *root.buffers()]
    assert {impl.device_of(t) for t in after} == {"cpu"}
    for old, new in zip(before, after, strict=True):
        np.testing.assert_array_equal(impl.to_numpy(new), old)


@pytest.mark.clause("cuda.explicit-device")
def test_cuda_with_index_uses_that_device(impl: Adapter) -> None:
    root = sample_tree(impl)
    root.cuda(0)
    assert {impl.device_of(t) for t in root.buffers()} == {"cuda:0"}


@pytest.mark.clause("to.refusal-raises")
def test_layer_that_cannot_cast_raises(impl: Adapter) -> None:
    layer = impl.quantized_linear(4, 4)
    with pytest.raises(Exception, match=r"(?i)dtype|quantiz"):
        layer.to(impl.dtype("float16"))


@pytest.mark.clause("to_empty.fresh-storage", "to_empty.device-none-keeps")
def test_to_empty_gives_fresh_storage_of_same_shape_and_dtype(impl: Adapter) -> None:
    root = sample_tree(impl)
    old = root.state_dict()  # plain handles on the old storage
    shapes = {n: tuple(t.shape) for n, t in [*root.named_parameters(), *root.named_buffers()]}
    dtypes = _dtypes(impl, root)
    assert root.to_empty(device=None) is root
    new = dict([*root.named_parameters(), *root.named_buffers()])
    assert {n: tuple(t.shape) for n, t in new.items()} == shapes
    assert _dtypes(impl, root) == dtypes
    assert {impl.device_of(t) for t in new.values()} == {impl.device_of(impl.tensor([0.0]))}  # the run's device
    assert [n for n in old if impl.shares_storage(new[n], old[n])] == []


@pytest.mark.clause("to_empty.keeps-device-index")
def test_to_empty_keeps_the_device_index(impl: Adapter) -> None:
    # The run's own device when it names an index (--device cuda:1 shows a dropped index), else cuda:0.
    target = impl.device if impl.device.startswith("cuda:") else "cuda:0"
    root = sample_tree(impl)
    assert root.to_empty(device=target) is root
    assert {impl.device_of(t) for t in [*root.parameters(), *root.buffers()]} == {target}


@pytest.mark.clause("to_empty.recurse-false")
def test_to_empty_without_recursion_leaves_children(impl: Adapter) -> None:
    root = sample_tree(impl)
    child_weight = impl.to_numpy(root.encoder.weight)
    held = root.encoder.weight
    handles = root.state_dict()  # plain handles on the old storage, the child's buffer among them
    root.to_empty(device=None, recurse=False)
    assert root.encoder.weight is held
    assert (impl.to_numpy(root.encoder.weight) == child_weight).all()
    children = [k for k in handles if "." in k]
    assert children == ["encoder.weight", "encoder.bias", "decoder.gain", "decoder.steps"]
    live = root.state_dict()
    assert [k for k in children if not impl.shares_storage(live[k], handles[k])] == [], "children's storage kept"


@pytest.mark.clause("to_empty.storage-free-stays")
def test_to_empty_keeps_meta_tensors_storage_free_until_assign(impl: Adapter) -> None:
    with impl.meta_init():
        layer = impl.linear(2, 3)
    layer.to_empty(device="cpu")
    assert not impl.has_storage(layer.weight)
    assert impl.resident_bytes(layer) == 0
    layer.load_state_dict({"weight": impl.tensor([[1.0, 2.0]] * 3), "bias": impl.tensor([0.0] * 3)}, assign=True)
    assert impl.has_storage(layer.weight)


@pytest.mark.clause("to.none-changes-nothing")
def test_to_none_asks_for_nothing(impl: Adapter) -> None:
    root = sample_tree(impl)
    before = {n: (impl.dtype_name(t), impl.device_of(t)) for n, t in root.state_dict(keep_vars=True).items()}
    assert root.to(None) is root
    after = {n: (impl.dtype_name(t), impl.device_of(t)) for n, t in root.state_dict(keep_vars=True).items()}
    assert after == before


@pytest.mark.clause("to.already-there-keeps-storage")
@pytest.mark.parametrize(
    "request_",
    [("device",), ("float32",), ("device", "float32"), (None,)],
    ids=["device", "dtype", "device-and-dtype", "none"],
)
def test_to_where_a_tensor_already_is_keeps_its_checkpoint_storage(impl: Adapter, request_: tuple[Any, ...]) -> None:
    root = impl.nn.Module()
    root.scale = impl.parameter([0.0, 0.0])
    root.register_buffer("shift", impl.tensor([0.0]))
    ckpt = {"scale": impl.tensor([1.0, 2.0]), "shift": impl.tensor([3.0])}
    root.load_state_dict(ckpt, assign=True)
    # The suite's own device and dtype: where every tensor of this tree already is.
    args = [{"device": impl.device, "float32": impl.dtype("float32")}.get(a, a) for a in request_]
    assert root.to(*args) is root
    impl.write_(ckpt["scale"], [5.0, 6.0])
    impl.write_(ckpt["shift"], [7.0])
    np.testing.assert_array_equal(impl.to_numpy(root.scale), [5.0, 6.0])
    np.testing.assert_array_equal(impl.to_numpy(root.shift), [7.0])


@pytest.mark.clause("to.forward-serves-cast-weights")
@pytest.mark.parametrize("casts", [("float64",), ("float16", "float32")], ids=["double", "half-then-float"])
def test_a_forward_after_a_cast_computes_with_the_cast_weights(impl: Adapter, casts: tuple[str, ...]) -> None:
    # Values float16 cannot hold exactly: the round trip through half changes them.
    weight = np.array([[0.1, 0.2], [0.3, 0.7], [1.1, -0.9]])
    layer = impl.linear(2, 3)
    layer.load_state_dict({"weight": impl.tensor(weight), "bias": impl.tensor([0.3, -0.1, 0.7])})
    x = np.array([[1.0, -2.0]])
    layer(impl.tensor(x))  # a layer that packs its weights has packed them by now
    for name in casts:
        assert layer.to(impl.dtype(name)) is layer
    final = casts[-1]
    now_w, now_b = (impl.to_numpy(t).astype(np.float64) for t in (layer.weight, layer.bias))
    if "float16" in casts:
        assert not np.array_equal(now_w, weight.astype(np.float32)), "the half round trip rounds these values"
    out = layer(impl.tensor(x, final))
    assert impl.dtype_name(out) == final
    np.testing.assert_allclose(impl.to_numpy(out), x @ now_w.T + now_b, rtol=1e-6)
