"""QuantizedLinear: int8 weight-only math vs torch, from_float, residencies, and the refusals that
keep an int8 weight int8 (casts of the tree, float checkpoints)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import packrt_core as prt
from packrt_core.device import Device
from packrt_core.errors import DeviceError, DTypeError, ShapeError, StateDictError
from packrt_core.nn import free_memory_override, memory_report
from packrt_core.nn.linear import Linear
from packrt_core.nn.module import Module
from packrt_core.nn.quantized import QuantizedLinear
from packrt_core.tensor import Tensor
from packrt_kernels_cpu import tolerance

RESIDENCIES = ("packed", "borrowed", "auto", "per_call")
DTYPES = ("float32", "float64", "float16", "bfloat16")
DECLARED = {"weight": "int8", "scale": "float32", "bias": "float32"}


def to_torch(torch: ModuleType, t: Tensor) -> Any:
    a = np.asarray(t)
    if a.dtype == ml_dtypes.bfloat16:  # torch cannot read ml_dtypes' bfloat16; the float32 detour is exact
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(a.copy())


def bits(t: Tensor) -> bytes:
    return np.ascontiguousarray(np.asarray(t)).tobytes()


def fresh(**overrides: Any) -> QuantizedLinear:
    prt.manual_seed(0)
    return QuantizedLinear(**{"in_features": 16, "out_features": 8, **overrides})


def torch_reference(torch: ModuleType, layer: QuantizedLinear, x: Tensor) -> np.ndarray:
    """torch's linear over the dequantized weight, in x's dtype (half computed by torch in half)."""
    xt = to_torch(torch, x)
    dequant = np.asarray(layer.weight).astype(np.float64) * np.asarray(layer.scale).astype(np.float64)[:, None]
    w = torch.from_numpy(dequant)
    b = None if layer.bias is None else torch.from_numpy(np.asarray(layer.bias).copy())
    out = torch.nn.functional.linear(xt, w.to(xt.dtype), None if b is None else b.to(xt.dtype))
    return out.double().numpy()  # type: ignore[no-any-return]


def assert_close(ours: Tensor, ref: np.ndarray, dtype: str) -> None:
    rtol, atol = tolerance(np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else dtype)
    np.testing.assert_allclose(np.asarray(ours).astype(np.float64), ref, rtol=rtol, atol=atol)


def test_quantized_linear_declares_int8_weight_and_float32_scale_and_bias() -> None:
    layer = fresh()
    assert {k: (v.dtype.name, v.shape) for k, v in layer.state_dict().items()} == {
        "weight": ("int8", (8, 16)),
        "scale": ("float32", (8,)),
        "bias": ("float32", (8,)),
    }
    assert list(fresh(bias=False).state_dict()) == ["weight", "scale"]
    assert repr(layer) == "QuantizedLinear(in_features=16, out_features=8, bias=True)"
    q = np.asarray(layer.weight)
    assert np.abs(q).max() == 127  # each row's largest weight maps to the end of the int8 range


def activation_bound(x: np.ndarray, layer: QuantizedLinear) -> np.ndarray:
    """What dynamic int8 may add to each output: half a step of the row's uint8 grid times the L1
    norm of the dequantized weight row (float64, the output's shape but the last axis)."""
    rows = x.astype(np.float64).reshape(-1, x.shape[-1])
    step = (np.maximum(rows.max(axis=1), 0) - np.minimum(rows.min(axis=1), 0)) / 255
    dequant = np.asarray(layer.weight).astype(np.float64) * np.asarray(layer.scale).astype(np.float64)[:, None]
    bound = step[:, None] / 2 * np.abs(dequant).sum(axis=1)[None, :]
    return bound.reshape((*x.shape[:-1], -1))  # type: ignore[no-any-return]


def test_a_float64_input_matches_torch_on_the_dequantized_weight_in_float64(torch: ModuleType) -> None:
    layer = fresh()
    x = prt.randn(3, 5, 16).to("float64")
    out = layer(x)
    assert out.dtype.name == "float64" and out.shape == (3, 5, 8)
    assert_close(out, torch_reference(torch, layer, x), "float64")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_float_input_goes_through_int8_within_half_an_activation_step(torch: ModuleType, dtype: str) -> None:
    layer = fresh()
    x = prt.randn(3, 5, 16).to(dtype)
    out = layer(x)
    assert out.dtype.name == dtype and out.shape == (3, 5, 8)
    xs = np.asarray(x).astype(np.float32)
    ref = torch_reference(torch, layer, prt.tensor(xs).to("float64"))
    rtol, atol = tolerance(np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else dtype)
    error = np.abs(np.asarray(out).astype(np.float64) - ref)
    assert (error <= activation_bound(xs, layer) * (1 + 1e-4) + atol + rtol * np.abs(ref)).all()


def test_from_float_keeps_each_weight_within_half_a_step_and_the_bias_exactly(torch: ModuleType) -> None:
    prt.manual_seed(3)
    linear = Linear(32, 12)
    w, b = np.asarray(linear.weight).copy(), np.asarray(linear.bias).copy()
    q = QuantizedLinear.from_float(linear)
    assert (q.in_features, q.out_features) == (32, 12)
    scale = np.asarray(q.scale)
    np.testing.assert_allclose(scale, np.abs(w).max(axis=1) / 127, rtol=1e-6)
    dequant = np.asarray(q.weight).astype(np.float64) * scale[:, None]
    assert np.all(np.abs(dequant - w) <= scale[:, None] / 2 + 1e-9)
    assert bits(q.bias) == b.tobytes()
    x = prt.randn(4, 32)
    # The quantized layer approximates the float one within the rounding of its weights and of x's rows.
    bound = np.abs(np.asarray(x)) @ (scale[:, None] / 2 * np.ones_like(w)).T + activation_bound(np.asarray(x), q)
    assert np.all(np.abs(np.asarray(q(x)) - np.asarray(linear(x))) <= bound * (1 + 1e-4) + 1e-5)


def test_from_float_reads_a_packed_linear_and_keeps_a_missing_bias_missing() -> None:
    linear = Linear(8, 4, bias=False)
    expected = np.asarray(linear.weight).copy()
    linear(prt.randn(1, 8))  # packed: the raw weight is dropped and rebuilt on read
    assert linear.weight.storage_nbytes == 0
    q = QuantizedLinear.from_float(linear, weight_residency="borrowed")
    assert q.bias is None and q.weight_residency == "borrowed"
    dequant = np.asarray(q.weight).astype(np.float64) * np.asarray(q.scale)[:, None]
    assert np.all(np.abs(dequant - expected) <= np.asarray(q.scale)[:, None] / 2 + 1e-9)


def test_from_float_refuses_what_is_not_a_float_linear() -> None:
    with pytest.raises(TypeError, match=r"takes a packrt\.nn\.Linear, got QuantizedLinear"):
        QuantizedLinear.from_float(fresh())  # type: ignore[arg-type]
    linear = Linear(4, 2)
    linear.weight[0, 1] = float("nan")
    with pytest.raises(ValueError, match=r"cannot quantize the Linear's weight: .*non-finite"):
        QuantizedLinear.from_float(linear)


def test_quantized_linear_outputs_agree_across_the_four_residencies() -> None:
    x = prt.randn(2, 16)
    outputs = []
    for residency in RESIDENCIES:
        layer = fresh(weight_residency=residency)
        outputs += [np.asarray(layer(x)), np.asarray(layer(x))]
    for out in outputs[1:]:
        np.testing.assert_allclose(out, outputs[0], rtol=1e-6, atol=1e-6)


def test_quantized_linear_packs_once_and_borrowed_keeps_no_pack() -> None:
    layer = fresh()
    for _ in range(4):
        layer(prt.randn(2, 16))
    assert layer.pack_count == 1 and layer.is_packed
    borrowed = fresh(weight_residency="borrowed")
    borrowed(prt.randn(2, 16))
    assert not borrowed.is_packed and borrowed.weight.storage_nbytes == 8 * 16


def test_quantized_linear_in_place_edit_through_a_parameter_repacks() -> None:
    layer = fresh(bias=False)
    x = prt.randn(2, 16)
    before = np.asarray(layer(x))
    layer.scale.mul_(2.0)
    np.testing.assert_allclose(np.asarray(layer(x)), 2 * before, rtol=1e-6)
    assert layer.pack_count == 2


def test_quantized_linear_packed_drops_raw_storage_yet_state_dict_is_complete_and_bit_exact() -> None:
    layer = fresh()
    original = {k: bits(v) for k, v in layer.state_dict().items()}
    objects = dict(layer.named_parameters())
    layer(prt.randn(1, 16))
    assert all(p.storage_nbytes == 0 for p in layer.parameters())
    assert dict(layer.named_parameters()) == objects
    sd = layer.state_dict()
    assert {k: v.dtype.name for k, v in sd.items()} == DECLARED
    assert {k: bits(v) for k, v in sd.items()} == original


def test_quantized_linear_under_revision_1_packed_entries_leave_state_dict() -> None:
    packed, borrowed = fresh(), fresh(weight_residency="borrowed")
    with prt.contract_revision(1):
        packed(prt.randn(1, 16))
        borrowed(prt.randn(1, 16))
        assert packed.state_dict() == {}
        assert list(borrowed.state_dict()) == ["weight", "scale", "bias"]


def test_quantized_linear_under_meta_init_is_storage_free_and_packs_at_load() -> None:
    source = fresh()
    sd = {k: v.clone() for k, v in source.state_dict().items()}
    with prt.meta_init():
        layer = fresh()
    assert {k: v.dtype.name for k, v in layer.state_dict().items()} == DECLARED
    assert all(not p.has_storage and p.storage_nbytes == 0 for p in layer.parameters())
    layer.load_state_dict(sd, assign=True, pack=True)
    assert layer.is_packed and layer.pack_count == 1
    x = prt.randn(3, 16)
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(source(x)))
    assert layer.pack_count == 1


def test_quantized_linear_auto_records_its_decision() -> None:
    small, large = fresh(weight_residency="auto"), fresh(weight_residency="auto")
    with free_memory_override(0):
        small(prt.randn(1, 16))
    with free_memory_override(8 * 16 + 8 * 4 * 2):  # int8 weight plus float32 scale and bias
        large(prt.randn(1, 16))
    assert (small.residency_decision, large.residency_decision) == ("borrowed", "packed")


class Mixed(Module):
    def __init__(self) -> None:
        super().__init__()
        prt.manual_seed(5)
        self.q = QuantizedLinear(16, 8)
        self.lin = Linear(8, 4)


def test_quantized_linear_memory_report_shows_int8_packed_and_borrowed_bytes() -> None:
    model = Mixed()
    model.q(prt.randn(1, 16))
    row = {r.path: r for r in memory_report(model)}["q"]
    _, _, panels = model.q._serving_pack().int8_operands()  # the VNNI road's repacked weight, where taken
    derived = 0 if panels is None else panels.nbytes
    assert (row.raw, row.packed, row.borrowed) == (0, 8 * 16 + 8 * 4 + 8 * 4 + derived, 0)
    model.q.set_weight_residency("borrowed")
    model.q(prt.randn(1, 16))
    row = {r.path: r for r in memory_report(model)}["q"]
    assert (row.raw, row.packed, row.borrowed) == (0, 0, 8 * 16 + 8 * 4 + 8 * 4)
    assert "QuantizedLinear" in str(memory_report(model))


CASTS: dict[str, Callable[[Module], Any]] = {
    "to(float16)": lambda m: m.to(prt.float16),
    "to('cpu', 'bfloat16')": lambda m: m.to("cpu", "bfloat16"),
    "to(dtype=float64)": lambda m: m.to(dtype=prt.float64),
    "half()": lambda m: m.half(),
    "float()": lambda m: m.float(),
    "double()": lambda m: m.double(),
    "bfloat16()": lambda m: m.bfloat16(),
}


@pytest.mark.parametrize("cast", list(CASTS))
def test_a_dtype_change_on_a_tree_holding_a_quantized_linear_raises_and_changes_nothing(cast: str) -> None:
    model = Mixed()
    model.lin(model.q(prt.randn(1, 16)))  # both packed: dropped storage must survive the refusal too
    objects = {name: (p, p.dtype, bits(p)) for name, p in model.named_parameters()}
    with pytest.raises(DTypeError, match=r"^q \(QuantizedLinear\): int8 weights cannot change dtype"):
        CASTS[cast](model)
    for name, p in model.named_parameters():
        obj, dtype, values = objects[name]
        assert p is obj and p.dtype is dtype and bits(p) == values
    model.to("cpu")  # a move without a cast is fine


def test_quantized_linear_refuses_a_dtype_other_than_float32_at_construction() -> None:
    with pytest.raises(DTypeError, match="int8 weight with float32 scale and bias; dtype='float16' cannot apply"):
        QuantizedLinear(4, 2, dtype="float16")
    assert QuantizedLinear(4, 2, dtype="float32").scale.dtype is prt.float32


def test_loading_a_float_weight_in_copy_mode_is_refused_naming_the_key() -> None:
    model = Mixed()
    sd = model.state_dict()
    before = bits(model.q.weight)
    bad = dict(sd, **{"q.weight": prt.randn(8, 16)})
    with pytest.raises(StateDictError, match=r"q\.weight: QuantizedLinear expects int8, the checkpoint has float32"):
        model.load_state_dict(bad)
    assert bits(model.q.weight) == before
    model.load_state_dict({k: v.clone() for k, v in sd.items()})  # int8 loads, and copy mode converts the rest
    model.load_state_dict(dict(sd, **{"q.scale": sd["q.scale"].double()}))
    assert model.q.scale.dtype is prt.float32


def test_assigning_a_scale_or_bias_of_another_dtype_is_refused() -> None:
    layer = fresh()
    sd = {k: v.clone() for k, v in layer.state_dict().items()}
    for key in ("scale", "bias"):
        bad = dict(sd, **{key: sd[key].double()})
        with pytest.raises(StateDictError, match=f"{key}: QuantizedLinear expects float32, the checkpoint has float64"):
            layer.load_state_dict(bad, assign=True)
    with pytest.raises(StateDictError, match="weight: QuantizedLinear expects int8, the checkpoint has int16"):
        layer.load_state_dict(dict(sd, weight=sd["weight"].to("int16")), assign=True)
    layer.load_state_dict(sd, assign=True)
    assert layer.weight.data_ptr() == sd["weight"].data_ptr()


def test_quantized_linear_rejects_the_wrong_input() -> None:
    layer = fresh()
    with pytest.raises(ShapeError, match=r"expects input \(\.\.\., 16\), got shape \(2, 15\)"):
        layer(prt.randn(2, 15))
    with pytest.raises(DTypeError, match=r"takes floating-point input .*got int64"):
        layer(prt.zeros(2, 16, dtype="int64"))
    with pytest.raises(TypeError, match="takes a packrt Tensor, got list"):
        layer([0.0] * 16)
    with pytest.raises(DeviceError, match="input on cuda:0, weights on cpu"):
        layer(Tensor._make(np.zeros((2, 16), np.float32), Device("cuda:0")))
