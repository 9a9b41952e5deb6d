"""state_dict and load_state_dict: keys, sharing, ties, extra state, assign, strictness, transactions."""

from __future__ import annotations

from collections import OrderedDict
from types import MappingProxyType, ModuleType
from typing import Any

import numpy as np
import pytest

import packrt_core as prt
from packrt_core import nn
from packrt_core.errors import ResidencyError, StateDictError


class Lin(nn.Module):
    def __init__(self, i: int = 3, o: int = 2) -> None:
        super().__init__()
        self.weight = nn.Parameter(prt.randn(o, i))
        self.bias = nn.Parameter(prt.zeros(o))

    def forward(self, x: prt.Tensor) -> prt.Tensor:
        return x @ self.weight.T + self.bias


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = Lin()
        self.dec = Lin(2, 3)
        self.register_buffer("steps", prt.zeros(1, dtype=prt.int64))


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = Lin(4, 4)
        self.head = Lin(4, 4)
        self.head.weight = self.embed.weight


def snapshot(m: nn.Module) -> list[tuple[str, int, list[Any], str]]:
    """Names, object identities, values and dtypes of every tensor: what a failed load must not change."""
    out = []
    for name, t in [*m.named_parameters(remove_duplicate=False), *m.named_buffers(remove_duplicate=False)]:
        out.append((name, id(t), t.tolist() if t.has_storage else None, t.dtype.name))
    return out


def test_state_dict_holds_parameters_and_persistent_buffers_under_dotted_keys_in_order() -> None:
    assert list(Net().state_dict()) == ["steps", "enc.weight", "enc.bias", "dec.weight", "dec.bias"]


def test_state_dict_values_share_storage_with_the_module() -> None:
    net = Net()
    sd = net.state_dict()
    assert type(sd["enc.bias"]) is prt.Tensor
    sd["enc.bias"].add_(5.0)
    assert net.enc.bias.tolist() == [5.0, 5.0]


def test_keep_vars_hands_out_the_parameter_objects() -> None:
    net = Net()
    sd = net.state_dict(keep_vars=True)
    assert sd["enc.weight"] is net.enc.weight and sd["steps"] is net.steps


def test_destination_is_filled_in_place_and_prefix_is_prepended() -> None:
    dest: dict[str, Any] = {"other": 1}
    out = Net().state_dict(destination=dest, prefix="model.")
    assert out is dest
    assert list(dest) == [
        "other",
        "model.steps",
        "model.enc.weight",
        "model.enc.bias",
        "model.dec.weight",
        "model.dec.bias",
    ]


def test_a_tied_tensor_appears_once_under_its_first_name() -> None:
    assert list(Tied().state_dict()) == ["embed.weight", "embed.bias", "head.bias"]


class WithExtra(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(prt.ones(1))
        self.vocab = ["a", "b"]

    def get_extra_state(self) -> Any:
        return {"vocab": self.vocab}

    def set_extra_state(self, state: Any) -> None:
        if not isinstance(state, dict):
            raise TypeError(f"extra state must be a dict, got {type(state).__name__}")
        self.vocab = list(state["vocab"])


def test_extra_state_is_stored_under_prefix_extra_state_and_round_trips() -> None:
    outer = nn.Module()
    outer.inner = WithExtra()
    sd = outer.state_dict()
    assert list(sd) == ["inner.scale", "inner._extra_state"]
    fresh = nn.Module()
    fresh.inner = WithExtra()
    fresh.inner.vocab = []
    fresh.load_state_dict(sd)
    assert fresh.inner.vocab == ["a", "b"]


def test_the_base_class_has_no_extra_state() -> None:
    with pytest.raises(RuntimeError, match="Module has no extra state"):
        nn.Module().get_extra_state()
    assert "_extra_state" not in "".join(Net().state_dict())


def test_a_failing_set_extra_state_leaves_the_module_unchanged() -> None:
    m = WithExtra()
    before = snapshot(m)
    with pytest.raises(TypeError, match="extra state must be a dict"):
        m.load_state_dict({"scale": prt.full((1,), 9.0), "_extra_state": "bad"})
    assert snapshot(m) == before and m.vocab == ["a", "b"]


def test_load_copies_into_the_existing_tensors_converting_dtype() -> None:
    net = Net()
    weight = net.enc.weight
    sd = {k: v.clone() for k, v in Net().state_dict().items()}
    sd["enc.bias"] = prt.tensor([1.0, 2.0], dtype="float64")
    result = net.load_state_dict(sd)
    assert net.enc.weight is weight and net.enc.bias.dtype is prt.float32
    assert net.enc.bias.tolist() == [1.0, 2.0]
    assert (
        result.missing_keys == [] and result.unexpected_keys == [] and repr(result) == "<All keys matched successfully>"
    )


@pytest.mark.parametrize("mapping", [OrderedDict, MappingProxyType, dict])
def test_load_accepts_any_mapping(mapping: Any) -> None:
    net = Net()
    net.load_state_dict(mapping(Net().state_dict()))


def test_load_refuses_a_non_mapping() -> None:
    with pytest.raises(TypeError, match="expects a Mapping"):
        Net().load_state_dict([("a", prt.zeros(1))])  # type: ignore[arg-type]


def test_strict_load_raises_listing_every_missing_and_unexpected_key() -> None:
    sd = Net().state_dict()
    del sd["enc.bias"], sd["steps"]
    sd["extra.thing"] = prt.zeros(1)
    with pytest.raises(
        StateDictError,
        match=r'Missing key\(s\) in state_dict: "steps", "enc.bias" .*\n'
        r'.*Unexpected key\(s\) in state_dict: "extra.thing"',
    ):
        Net().load_state_dict(sd)
    assert issubclass(StateDictError, RuntimeError)


def test_non_strict_load_reports_keys_and_loads_the_rest() -> None:
    net = Net()
    sd = Net().state_dict()
    sd["enc.bias"] = prt.full((2,), 7.0)
    del sd["dec.bias"]
    sd["junk"] = prt.zeros(1)
    result = net.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["dec.bias"] and result.unexpected_keys == ["junk"]
    assert net.enc.bias.tolist() == [7.0, 7.0]
    from packrt_core.nn import LoadResult, _IncompatibleKeys

    assert LoadResult is _IncompatibleKeys and isinstance(result, _IncompatibleKeys)


def test_copying_into_a_storage_free_tensor_says_to_load_with_assign() -> None:
    with prt.meta_init():
        net = Net()
    with pytest.raises(
        StateDictError, match=r"enc.weight: the model's tensor is storage-free .* load with assign=True"
    ):
        net.load_state_dict(Net().state_dict())


def test_a_checkpoint_value_that_is_not_a_tensor_is_refused() -> None:
    sd: dict[str, Any] = dict(Net().state_dict())
    sd["enc.bias"] = [1.0, 2.0]
    with pytest.raises(StateDictError, match=r"enc.bias: the checkpoint value is a list; a packrt Tensor is expected"):
        Net().load_state_dict(sd)


@pytest.mark.parametrize("assign", [False, True])
@pytest.mark.parametrize("strict", [True, False])
def test_a_numpy_value_is_refused_on_every_load_road_naming_the_key_and_from_numpy(strict: bool, assign: bool) -> None:
    net = Lin()
    before = snapshot(net)
    sd: dict[str, Any] = {"weight": np.ones((2, 3), dtype=np.float32), "bias": prt.zeros(2)}
    with pytest.raises(
        StateDictError,
        match=r"weight: the checkpoint value is a numpy\.ndarray; a packrt Tensor is expected: "
        r"convert it with packrt\.from_numpy\(value\)",
    ):
        net.load_state_dict(sd, strict=strict, assign=assign)
    assert snapshot(net) == before  # refused before anything was written, the bias included


def test_a_dlpack_value_such_as_a_torch_tensor_is_refused_naming_from_dlpack(torch: ModuleType) -> None:
    net = Lin()
    sd: dict[str, Any] = {"weight": torch.ones(2, 3), "bias": prt.zeros(2)}
    with pytest.raises(StateDictError, match=r"weight: the checkpoint value is a torch\.Tensor; .*packrt\.from_dlpack"):
        net.load_state_dict(sd)


def test_a_numpy_checkpoint_loads_once_converted_with_from_numpy() -> None:
    net = Lin()
    arrays = {"weight": np.ones((2, 3), dtype=np.float32), "bias": np.zeros(2, dtype=np.float32)}
    net.load_state_dict({key: prt.from_numpy(array) for key, array in arrays.items()})
    assert net.weight.tolist() == [[1.0] * 3] * 2


@pytest.mark.parametrize(
    "corrupt",
    ["shape", "missing", "unexpected", "storage_free_value", "not_a_tensor", "tie_conflict", "bad_residency"],
)
def test_a_failed_load_leaves_every_tensor_binding_and_object_as_it_was(corrupt: str) -> None:
    model = Tied()
    before = snapshot(model)
    sd: dict[str, Any] = {k: v.clone().fill_(3.0) for k, v in Tied().state_dict().items()}
    kwargs: dict[str, Any] = {}
    if corrupt == "shape":
        sd["head.bias"] = prt.zeros(9)
    elif corrupt == "missing":
        del sd["head.bias"]
    elif corrupt == "unexpected":
        sd["nope"] = prt.zeros(1)
    elif corrupt == "storage_free_value":
        with prt.meta_init():
            sd["head.bias"] = prt.zeros(4)
    elif corrupt == "not_a_tensor":
        sd["head.bias"] = 3
    elif corrupt == "tie_conflict":
        sd["head.weight"] = prt.zeros(4, 4)
    else:
        kwargs["weight_residency"] = "sometimes"
    for assign in (False, True):
        with pytest.raises(
            (StateDictError, ResidencyError), match=r"failed; nothing was changed|unknown weight_residency"
        ):
            model.load_state_dict(sd, assign=assign, **kwargs)
        assert snapshot(model) == before


def test_an_unknown_weight_residency_is_a_value_error_naming_the_choices() -> None:
    with pytest.raises(
        ValueError,
        match="unknown weight_residency 'pinned': expected one of packed, borrowed, auto, per_call",
    ):
        Net().load_state_dict(Net().state_dict(), weight_residency="pinned")


@pytest.mark.parametrize("residency", [None, "packed", "borrowed", "auto", "per_call"])
def test_plain_parameters_accept_every_residency_and_ignore_it(residency: str | None) -> None:
    net = Net()
    net.load_state_dict(Net().state_dict(), pack=True, weight_residency=residency)


def test_a_second_name_of_a_tie_the_model_has_is_accepted_not_unexpected() -> None:
    model = Tied()
    sd = {k: v.clone() for k, v in Tied().state_dict().items()}
    sd["head.weight"] = sd["embed.weight"].clone()
    result = model.load_state_dict(sd)
    assert result.unexpected_keys == []
    assert model.head.weight is model.embed.weight
    assert model.embed.weight.tolist() == sd["embed.weight"].tolist()


def test_the_second_name_alone_provides_the_tied_value() -> None:
    model = Tied()
    sd = {k: v.clone() for k, v in Tied().state_dict().items()}
    sd["head.weight"] = sd.pop("embed.weight")
    result = model.load_state_dict(sd)
    assert result.missing_keys == [] and model.embed.weight.tolist() == sd["head.weight"].tolist()


def test_two_names_of_one_tie_with_different_values_fail_naming_both_keys() -> None:
    sd = dict(Tied().state_dict())
    sd["head.weight"] = prt.zeros(4, 4)
    with pytest.raises(StateDictError, match=r"embed.weight and head.weight name one tied tensor"):
        Tied().load_state_dict(sd)


def test_assign_binds_the_incoming_tensor_itself_with_its_dtype() -> None:
    with prt.meta_init():
        net = Net()
    sd = {k: v.half() if v.is_floating_point() else v for k, v in Net().state_dict().items()}
    net.load_state_dict(sd, assign=True)
    assert isinstance(net.enc.weight, nn.Parameter) and net.enc.weight.dtype is prt.float16
    assert net.enc.weight.data_ptr() == sd["enc.weight"].data_ptr()
    assert all(t.has_storage for t in net.parameters())


def test_assign_makes_one_tensor_under_two_keys_one_shared_parameter() -> None:
    with prt.meta_init():
        net = Net()
        net.dec = Lin(3, 2)
    sd = Net().state_dict()
    shared = prt.randn(2, 3)
    sd["enc.weight"] = shared
    sd["dec.weight"] = shared
    sd["dec.bias"] = prt.zeros(2)
    net.load_state_dict(sd, assign=True)
    assert net.enc.weight is net.dec.weight
    assert list(net.state_dict()) == ["steps", "enc.weight", "enc.bias", "dec.bias"]


def test_assign_gives_the_bound_parameter_its_own_lineage() -> None:
    net = Lin()
    incoming = {"weight": prt.randn(2, 3), "bias": prt.zeros(2)}
    net.load_state_dict(incoming, assign=True)
    incoming["bias"].add_(1.0)  # the checkpoint's handle writes the shared storage ...
    assert net.bias.tolist() == [1.0, 1.0]
    assert net.bias._version == 0  # ... but does not count as an edit through the module
    net.bias.add_(1.0)
    assert net.bias._version == 1


def test_assign_keeps_a_buffers_persistent_flag() -> None:
    m = nn.Module()
    m.register_buffer("b", nn.Buffer(prt.zeros(1), persistent=True))
    m.load_state_dict({"b": prt.ones(1)}, assign=True)
    assert isinstance(m.b, nn.Buffer) and m.b.persistent and m.b.tolist() == [1.0]


def test_a_model_built_under_meta_init_round_trips_through_assign() -> None:
    source = Net()
    with prt.meta_init():
        target = Net()
    assert not any(t.has_storage for t in target.parameters())
    target.load_state_dict(source.state_dict(), assign=True)
    x = prt.randn(4, 3)
    np.testing.assert_array_equal(target.enc(x).numpy(), source.enc(x).numpy())
