"""Messages keep packrt's style (what, where, expected vs actual, the fix) and carry the phrases PyTorch
users search for; bad argument types are TypeErrors and bad values ValueErrors, as in PyTorch."""

from __future__ import annotations

from typing import Any

import pytest

import packrt_core as prt
from packrt_core import nn
from packrt_core.errors import DeviceError, DTypeError, RegistrationError, StateDictError


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)


def test_a_strict_load_names_missing_and_unexpected_keys_in_pytorchs_words_with_the_fix() -> None:
    sd = Net().state_dict()
    del sd["fc.bias"]
    sd["fc.extra"] = prt.zeros(1)
    with pytest.raises(StateDictError) as caught:
        Net().load_state_dict(sd)
    text = str(caught.value)
    assert text.startswith("Error(s) in loading state_dict for Net (load_state_dict failed; nothing was changed):")
    assert 'Missing key(s) in state_dict: "fc.bias" (the model has them, the checkpoint does not; load with ' in text
    assert 'Unexpected key(s) in state_dict: "fc.extra" (the checkpoint has them, the model does not; ' in text
    assert text.index("Missing key(s)") < text.index("Unexpected key(s)")


def test_a_shape_that_does_not_fit_is_a_size_mismatch_naming_the_key_and_both_shapes() -> None:
    sd = Net().state_dict()
    sd["fc.weight"] = prt.zeros(4, 4)
    with pytest.raises(
        StateDictError,
        match=r"size mismatch for fc\.weight: copying a param with shape \(4, 4\) from checkpoint, the shape in "
        r"current model is \(2, 3\); build the model with the configuration the checkpoint was saved from",
    ):
        Net().load_state_dict(sd, strict=False)


def test_a_size_mismatch_under_assign_uses_the_same_words() -> None:
    with prt.meta_init():
        net = Net()
    sd = Net().state_dict()
    sd["fc.bias"] = prt.zeros(7)
    with pytest.raises(StateDictError, match=r"size mismatch for fc\.bias: copying a param with shape \(7,\)"):
        net.load_state_dict(sd, assign=True)


@pytest.mark.parametrize("mode", ["yes", 1, None, prt.Device("cpu")], ids=["str", "int", "none", "device"])
def test_train_with_a_non_bool_mode_is_a_value_error_as_in_pytorch(mode: Any) -> None:
    with pytest.raises(ValueError, match=f"train\\(mode\\) expects a bool training mode, got {type(mode).__name__}"):
        Net().train(mode)


def test_set_submodule_with_a_non_module_is_a_value_error_as_in_pytorch() -> None:
    with pytest.raises(ValueError, match=r"set_submodule\('fc'\) expects a Module, got str"):
        Net().set_submodule("fc", "not a module")  # type: ignore[arg-type]


class _OnlyDevice:
    """Has a device but no dtype: not a tensor to() can match."""

    device = "cpu"


class _OnlyDtype:
    """Has a dtype but no device: not a tensor either."""

    dtype = "float32"


@pytest.mark.parametrize(
    "args",
    [([],), ({},), ("cpu", True), (None, True), ("cpu", prt.zeros(1)), (_OnlyDevice(),), (_OnlyDtype(),)],
    ids=["list", "dict", "device-then-bool", "none-then-bool", "tensor-second", "device-only", "dtype-only"],
)
def test_module_to_with_an_argument_of_the_wrong_kind_is_a_type_error(args: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError, match=r"Module\.to\("):
        Net().to(*args)


def test_module_to_keeps_the_forms_pytorch_takes() -> None:
    net = Net()
    assert net.to("cpu", "float64", False) is net and net.fc.weight.dtype is prt.float64
    assert net.to(prt.float32, True) is net and net.to(prt.zeros(1), False) is net
    assert net.to("cpu", non_blocking=True) is net and net.fc.weight.dtype is prt.float32


def test_module_to_keeps_packrts_own_errors_for_bad_values() -> None:
    with pytest.raises(DeviceError, match="unknown device type 'nonsense'"):
        Net().to("nonsense")
    with pytest.raises(DTypeError, match="target dtype must be floating point; got int64"):
        Net().to(prt.int64)


def test_a_buffer_assigned_over_a_plain_attribute_is_refused_as_in_pytorch() -> None:
    m = nn.Module()
    m.flag = 5
    with pytest.raises(RegistrationError, match="cannot register buffer 'flag' on Module: the name is already taken"):
        m.flag = nn.Buffer(prt.zeros(1))
    assert m.flag == 5 and isinstance(RegistrationError("x"), KeyError)
    m.flag = nn.Parameter(prt.zeros(1))  # a Parameter replaces a plain attribute, as in PyTorch
    assert [name for name, _ in m.named_parameters()] == ["flag"]
