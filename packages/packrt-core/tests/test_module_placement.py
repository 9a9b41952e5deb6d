"""to(), cpu(), cuda(), the casts and to_empty(): identities kept, refusals change nothing."""

from __future__ import annotations

from typing import Any

import pytest

import packrt_core as prt
from packrt_core import nn
from packrt_core.errors import DeviceUnavailableError, DTypeError, ModuleCopyError


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(prt.randn(2, 2))
        self.register_buffer("ids", prt.arange(3))
        self.register_buffer("mask", prt.ones(2, dtype="bool"))
        self.inner = nn.Module()
        self.inner.scale = nn.Parameter(prt.ones(1))


def dtypes(m: nn.Module) -> dict[str, str]:
    return {n: t.dtype.name for n, t in [*m.named_parameters(), *m.named_buffers()]}


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((prt.float16,), {}),
        (("half",), {}),
        ((prt.DataType.FLOAT16,), {}),
        (("cpu", prt.float16), {}),
        ((), {"dtype": prt.float16}),
        ((), {"device": "cpu", "dtype": "float16", "non_blocking": True}),
        ((prt.zeros(1, dtype="half"),), {}),
    ],
    ids=["object", "name", "datatype", "device-and-dtype", "keyword", "keywords", "tensor"],
)
def test_to_reads_every_documented_form_and_casts_floating_tensors_only(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    net = Net()
    assert net.to(*args, **kwargs) is net
    assert dtypes(net) == {"weight": "float16", "inner.scale": "float16", "ids": "int64", "mask": "bool"}


def test_parameter_and_buffer_objects_keep_their_identity() -> None:
    net = Net()
    held = [net.weight, net.ids, net.inner.scale]
    values = net.weight.tolist()
    net.half().float()
    assert all(a is b for a, b in zip([net.weight, net.ids, net.inner.scale], held, strict=True))
    assert net.weight.numpy().ravel().tolist() == pytest.approx([v for row in values for v in row], rel=1e-3)


@pytest.mark.parametrize(
    ("method", "dtype"),
    [("half", "float16"), ("float", "float32"), ("double", "float64"), ("bfloat16", "bfloat16")],
)
def test_cast_methods_cast_floating_tensors(method: str, dtype: str) -> None:
    net = Net()
    assert getattr(net, method)() is net
    assert dtypes(net)["weight"] == dtype and dtypes(net)["ids"] == "int64"


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((prt.float16,), {"copy": True}),
        ((), {"dtype": prt.float16, "copy": False}),
        ((prt.float16, False, True), {}),
        (("cpu", prt.float16, False, True), {}),
    ],
    ids=["copy-true", "copy-false", "positional-after-dtype", "positional-after-device-and-dtype"],
)
def test_module_to_refuses_copy_as_torch_does_and_names_deepcopy(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    net = Net()
    before = dtypes(net)
    with pytest.raises(RuntimeError, match=r"does not accept copy argument.*copy\.deepcopy\(module\)\.to") as err:
        net.to(*args, **kwargs)
    assert isinstance(err.value, ModuleCopyError) and isinstance(err.value, TypeError), "what packrt 0.2 raised"
    assert dtypes(net) == before  # refused before anything cast: no in-place cast passed off as a copy


def test_tensor_to_still_copies_when_asked_where_module_to_refuses() -> None:
    t = prt.ones(2)
    assert t.to(prt.float32, copy=True) is not t
    assert t.to(prt.float32, False, True) is not t


def test_to_an_integer_dtype_is_refused_before_anything_changes() -> None:
    net = Net()
    before = dtypes(net)
    with pytest.raises(DTypeError, match="target dtype must be floating point; got int8"):
        net.to(prt.int8)
    assert dtypes(net) == before


def test_moving_to_an_unreachable_device_raises_and_changes_nothing() -> None:
    if prt.cuda.is_available():
        pytest.skip("a GPU answered")
    net = Net()
    ptr = net.weight.data_ptr()
    with pytest.raises(DeviceUnavailableError, match="cuda:0"):
        net.cuda()
    with pytest.raises(DeviceUnavailableError, match="cuda:1"):
        net.to("cuda:1", prt.float16)
    assert net.weight.data_ptr() == ptr and dtypes(net)["weight"] == "float32"


def test_to_empty_onto_an_unreachable_device_raises_and_changes_nothing() -> None:
    if prt.cuda.is_available():
        pytest.skip("a GPU answered")
    with prt.meta_init():
        storage_free = Net()
    for net in (storage_free, Net()):
        before = [(t.device, t.has_storage) for t in net.parameters()]
        with pytest.raises(DeviceUnavailableError, match="cuda:0"):
            net.to_empty(device="cuda")
        assert [(t.device, t.has_storage) for t in net.parameters()] == before


def test_a_layer_refusal_raises_and_leaves_the_whole_tree_unchanged() -> None:
    class Quantized(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = nn.Parameter(prt.ones(2, dtype="int8"))

        def _check_placement(self, path: str, device: Any, dtype: Any) -> None:
            if dtype is not None:
                raise DTypeError(f"{path}: an int8 layer cannot change dtype")

    net = Net()
    net.quant = Quantized()
    before = dtypes(net)
    with pytest.raises(DTypeError, match="quant: an int8 layer cannot change dtype"):
        net.half()
    assert dtypes(net) == before
    net.cpu()  # a move without a cast is served


def test_cpu_is_to_cpu() -> None:
    net = Net()
    assert net.cpu() is net and net.weight.device == prt.Device("cpu")


def test_a_move_gives_each_tensor_a_new_lineage_so_layers_repack() -> None:
    net = Net()
    lineage = net.weight._lineage
    net.half()
    assert net.weight._lineage is not lineage


def test_to_empty_gives_fresh_storage_of_the_same_shape_and_dtype() -> None:
    net = Net().half()
    ptr = net.weight.data_ptr()
    assert net.to_empty(device="cpu") is net
    assert net.weight.has_storage and net.weight.data_ptr() != ptr
    assert net.weight.shape == (2, 2) and net.weight.dtype is prt.float16 and net.ids.dtype is prt.int64


def test_to_empty_on_meta_tensors_re_declares_them_storage_free_until_assign() -> None:
    with prt.meta_init():
        net = Net()
    net.to_empty(device=None)
    assert not any(t.has_storage for t in net.parameters())
    assert sum(t.storage_nbytes for t in net.parameters()) == 0
    net.load_state_dict(Net().state_dict(), assign=True)
    assert all(t.has_storage for t in net.parameters())


def test_to_empty_recurse_false_stops_at_own_tensors() -> None:
    real = Net()
    ptr = real.inner.scale.data_ptr()
    real.to_empty(device="cpu", recurse=False)
    assert real.inner.scale.data_ptr() == ptr
