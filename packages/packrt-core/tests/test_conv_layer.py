"""Conv2d: torch's results and state dicts, the four residencies, packing once, and its errors."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packrt_core as prt
from packrt_core.device import Device
from packrt_core.errors import DeviceError, DTypeError, ShapeError
from packrt_core.nn import free_memory_override, memory_report
from packrt_core.nn.conv import Conv2d
from packrt_core.nn.module import Module
from packrt_core.tensor import Tensor
from packrt_kernels_cpu import tolerance

RESIDENCIES = ("packed", "borrowed", "auto", "per_call")
DTYPES = ("float32", "float64", "float16", "bfloat16")


def to_torch(torch: ModuleType, t: Tensor | np.ndarray) -> Any:
    a = np.asarray(t)
    if a.dtype == ml_dtypes.bfloat16:  # torch cannot read ml_dtypes' bfloat16; the float32 detour is exact
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(a.copy())


def from_torch(t: Any) -> Any:
    return t.detach().double().numpy() if t.dtype.is_floating_point else t.detach().numpy()


def packrt_state(torch_layer: Any, dtype: str) -> dict[str, Tensor]:
    """torch's state_dict as packrt tensors of ``dtype`` (bfloat16 through float32, exactly)."""
    return {k: prt.tensor(v.detach().float().numpy(), dtype=dtype) for k, v in torch_layer.state_dict().items()}


def assert_close(ours: Tensor, ref: np.ndarray, dtype: str) -> None:
    rtol, atol = tolerance(np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else dtype)
    np.testing.assert_allclose(np.asarray(ours).astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


def bits(t: Tensor) -> bytes:
    return np.ascontiguousarray(np.asarray(t)).tobytes()


def fresh(**overrides: Any) -> Conv2d:
    prt.manual_seed(0)
    args: dict[str, Any] = {"in_channels": 4, "out_channels": 6, "kernel_size": 3, "padding": 1, "groups": 2}
    args.update(overrides)
    return Conv2d(**args)


def test_conv2d_constructor_and_repr_follow_torch(torch: ModuleType) -> None:
    configs: list[dict[str, Any]] = [
        {"in_channels": 3, "out_channels": 8, "kernel_size": 3},
        {"in_channels": 4, "out_channels": 6, "kernel_size": (3, 2), "stride": 2, "padding": (1, 0), "groups": 2},
        {"in_channels": 4, "out_channels": 4, "kernel_size": 3, "padding": "same", "dilation": 2, "bias": False},
        {"in_channels": 2, "out_channels": 2, "kernel_size": 1, "padding": "valid"},
    ]
    for cfg in configs:
        ours, ref = Conv2d(**cfg), torch.nn.Conv2d(**cfg)
        assert repr(ours) == repr(ref)
        assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == {
            k: tuple(v.shape) for k, v in ref.state_dict().items()
        }


def test_conv2d_initialization_is_uniform_within_one_over_sqrt_fan_in() -> None:
    prt.manual_seed(1)
    layer = Conv2d(8, 16, 3, groups=2)
    bound = 1.0 / np.sqrt(8 // 2 * 9)
    w, b = np.asarray(layer.weight), np.asarray(layer.bias)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert np.abs(w).max() > 0.9 * bound  # spread over the range, not bunched near zero


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv2d_with_torch_weights_matches_torch_per_dtype(torch: ModuleType, dtype: str) -> None:
    torch.manual_seed(0)
    cfg: dict[str, Any] = {
        "in_channels": 4,
        "out_channels": 6,
        "kernel_size": 3,
        "stride": 2,
        "padding": 1,
        "groups": 2,
    }
    ref = torch.nn.Conv2d(**cfg).to(getattr(torch, dtype))
    ours = Conv2d(**cfg, dtype=dtype)
    assert not ours.load_state_dict(packrt_state(ref, dtype)).missing_keys
    x = prt.randn(2, 4, 9, 7).to(dtype)
    assert_close(ours(x), from_torch(ref(to_torch(torch, x))), dtype)
    unbatched = x[0]
    assert_close(ours(unbatched), from_torch(ref(to_torch(torch, unbatched))), dtype)


@pytest.mark.filterwarnings("ignore:Using padding='same'")  # torch's own performance note
@settings(max_examples=40, deadline=None)
@given(
    groups=st.integers(1, 3),
    in_per=st.integers(1, 3),
    out_per=st.integers(1, 3),
    kernel=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilation=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pad=st.one_of(st.tuples(st.integers(0, 3), st.integers(0, 3)), st.sampled_from(["same", "valid"])),
    batched=st.booleans(),
    bias=st.booleans(),
    extra=st.tuples(st.integers(0, 6), st.integers(0, 6)),
)
def test_conv2d_geometry_matches_torch_everywhere(
    torch: ModuleType,
    groups: int,
    in_per: int,
    out_per: int,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int],
    pad: tuple[int, int] | str,
    batched: bool,
    bias: bool,
    extra: tuple[int, int],
) -> None:
    if pad == "same":
        stride = (1, 1)
    cfg: dict[str, Any] = {
        "in_channels": in_per * groups,
        "out_channels": out_per * groups,
        "kernel_size": kernel,
        "stride": stride,
        "padding": pad,
        "dilation": dilation,
        "groups": groups,
        "bias": bias,
    }
    ref = torch.nn.Conv2d(**cfg).double()
    ours = Conv2d(**cfg, dtype="float64")
    ours.load_state_dict(packrt_state(ref, "float64"))
    # The smallest input the dilated kernel fits in, plus a little.
    h = dilation[0] * (kernel[0] - 1) + 1 + extra[0]
    w = dilation[1] * (kernel[1] - 1) + 1 + extra[1]
    x = prt.randn(*((2,) if batched else ()), in_per * groups, h, w, dtype="float64")
    assert_close(ours(x), from_torch(ref(to_torch(torch, x))), "float64")


def test_conv2d_outputs_agree_across_the_four_residencies() -> None:
    x = prt.randn(2, 4, 6, 6)
    outputs = []
    for residency in RESIDENCIES:
        layer = fresh(weight_residency=residency)
        outputs.append(np.asarray(layer(x)))
        outputs.append(np.asarray(layer(x)))
    for out in outputs[1:]:
        np.testing.assert_allclose(out, outputs[0], rtol=1e-6, atol=1e-6)


def test_conv2d_residency_set_on_the_layer_or_the_load_is_the_one_served() -> None:
    layer = fresh()
    sd = {k: v.clone() for k, v in layer.state_dict().items()}
    for residency in RESIDENCIES:
        layer.set_weight_residency(residency)
        assert layer.weight_residency == residency
        layer.load_state_dict(sd, weight_residency=residency)
        assert layer.weight_residency == residency
    assert Conv2d(2, 2, 1).weight_residency == "packed"  # the documented default


def test_conv2d_packs_once_over_many_forwards() -> None:
    layer = fresh()
    x = prt.randn(1, 4, 5, 5)
    first = np.asarray(layer(x))
    for _ in range(4):
        np.testing.assert_array_equal(np.asarray(layer(x)), first)
    assert layer.pack_count == 1 and layer.is_packed


def test_conv2d_eight_threads_on_the_first_forward_share_one_pack() -> None:
    layer = fresh()
    x = prt.randn(2, 4, 8, 8)
    barrier = threading.Barrier(8)

    def run() -> np.ndarray:
        barrier.wait()
        return np.asarray(layer(x))

    with ThreadPoolExecutor(8) as pool:
        outputs = [f.result() for f in [pool.submit(run) for _ in range(8)]]
    assert layer.pack_count == 1
    for out in outputs[1:]:
        np.testing.assert_array_equal(out, outputs[0])


def test_conv2d_per_call_and_borrowed_keep_no_pack() -> None:
    for residency in ("borrowed", "per_call"):
        layer = fresh(weight_residency=residency)
        layer(prt.randn(1, 4, 5, 5))
        assert not layer.is_packed and layer.resident_pack_bytes == 0
        assert layer.weight.storage_nbytes == layer.weight.nbytes


def test_conv2d_in_place_edit_through_a_parameter_repacks_on_the_next_forward(torch: ModuleType) -> None:
    layer = fresh()
    x = prt.randn(1, 4, 5, 5)
    before = np.asarray(layer(x))
    layer.bias.add_(1.0)
    after = np.asarray(layer(x))
    assert layer.pack_count == 2
    np.testing.assert_allclose(after, before + 1.0, rtol=1e-5, atol=1e-5)
    layer.weight.mul_(2.0)
    ref = torch.nn.functional.conv2d(
        to_torch(torch, x), to_torch(torch, layer.weight), to_torch(torch, layer.bias), padding=1, groups=2
    )
    assert_close(layer(x), from_torch(ref), "float32")
    assert layer.pack_count == 3


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv2d_packed_drops_raw_storage_yet_state_dict_is_complete_and_bit_exact(dtype: str) -> None:
    layer = fresh(dtype=dtype)
    original = {k: bits(v) for k, v in layer.state_dict().items()}
    weight_object = layer.weight
    layer(prt.randn(1, 4, 5, 5).to(dtype))
    assert layer.weight.storage_nbytes == 0 and layer.bias.storage_nbytes == 0
    assert layer.weight is weight_object  # the Parameter object stays
    sd = layer.state_dict()
    assert list(sd) == ["weight", "bias"]
    for key, value in sd.items():
        assert value.dtype.name == dtype
        assert value.shape == getattr(layer, key).shape
        assert bits(value) == original[key]


def test_conv2d_under_revision_1_packed_entries_leave_state_dict() -> None:
    packed, borrowed = fresh(), fresh(weight_residency="borrowed")
    x = prt.randn(1, 4, 5, 5)
    with prt.contract_revision(1):
        assert list(packed.state_dict()) == ["weight", "bias"]  # nothing packed yet
        packed(x)
        borrowed(x)
        assert packed.state_dict() == {}
        assert list(borrowed.state_dict()) == ["weight", "bias"]
    assert list(packed.state_dict()) == ["weight", "bias"]  # revision 2 again


def test_conv2d_under_meta_init_is_storage_free_and_packs_at_load() -> None:
    source = fresh()
    sd = {k: v.clone() for k, v in source.state_dict().items()}
    with prt.meta_init():
        layer = fresh()
    assert all(not p.has_storage and p.storage_nbytes == 0 for p in layer.parameters())
    layer.load_state_dict(sd, assign=True, pack=True)
    assert layer.is_packed and layer.pack_count == 1
    x = prt.randn(2, 4, 5, 5)
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(source(x)))
    assert layer.pack_count == 1  # the load's pack served the forward


def test_conv2d_pack_at_load_under_borrowed_copies_nothing() -> None:
    sd = {k: v.clone() for k, v in fresh().state_dict().items()}
    with prt.meta_init():
        layer = fresh()
    layer.load_state_dict(sd, assign=True, pack=True, weight_residency="borrowed")
    assert not layer.is_packed
    assert layer.weight.data_ptr() == sd["weight"].data_ptr()  # serves from the checkpoint's storage


def test_conv2d_auto_packs_when_it_fits_and_borrows_when_it_does_not() -> None:
    x = prt.randn(1, 4, 5, 5)
    small, large = fresh(weight_residency="auto"), fresh(weight_residency="auto")
    with free_memory_override(0):
        small(x)
    with free_memory_override(1 << 30):
        large(x)
    assert small.residency_decision == "borrowed" and not small.is_packed
    assert large.residency_decision == "packed" and large.is_packed


class TwoConvs(Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = Conv2d(4, 8, 3, weight_residency="packed")
        self.b = Conv2d(8, 8, 3, weight_residency="borrowed", dtype="float16")


def test_conv2d_memory_report_shows_packed_and_borrowed_bytes() -> None:
    model = TwoConvs()
    x = prt.randn(1, 4, 6, 6)
    model.b(model.a(x).half())
    rows = {row.path: row for row in memory_report(model)}
    a_bytes = (8 * 4 * 9 + 8) * 4
    assert (rows["a"].raw, rows["a"].packed, rows["a"].borrowed) == (0, a_bytes, 0)
    b_bytes = (8 * 8 * 9 + 8) * 2  # float16 served in place: the declared bytes, no pack
    assert (rows["b"].raw, rows["b"].packed, rows["b"].borrowed) == (0, 0, b_bytes)
    table = str(memory_report(model))
    assert "Conv2d" in table and "packed" in table and "borrowed" in table


def test_conv2d_rejects_a_non_tensor_input() -> None:
    with pytest.raises(TypeError, match="takes a packrt Tensor, got ndarray"):
        fresh()(np.zeros((1, 4, 5, 5), np.float32))


@pytest.mark.parametrize("shape", [(1, 3, 5, 5), (4, 5), (1, 1, 4, 5, 5)])
def test_conv2d_rejects_the_wrong_input_shape(shape: tuple[int, ...]) -> None:
    with pytest.raises(ShapeError, match=r"expects input \(N, 4, H, W\) or \(4, H, W\)"):
        fresh()(prt.zeros(*shape))


def test_conv2d_rejects_an_input_smaller_than_the_dilated_kernel() -> None:
    with pytest.raises(ShapeError, match="smaller than the dilated kernel 5x5"):
        fresh(padding=0, dilation=2)(prt.zeros(1, 4, 4, 4))


def test_conv2d_rejects_an_input_of_another_dtype() -> None:
    with pytest.raises(DTypeError, match="holds float32 weights but got float16 input"):
        fresh()(prt.zeros(1, 4, 5, 5, dtype="float16"))


def test_conv2d_rejects_an_input_on_another_device() -> None:
    elsewhere = Tensor._make(np.zeros((1, 4, 5, 5), np.float32), Device("cuda:0"))
    with pytest.raises(DeviceError, match="input on cuda:0, weights on cpu"):
        fresh()(elsewhere)


def test_conv2d_rejects_a_bad_geometry_at_construction() -> None:
    with pytest.raises(ShapeError, match="must both be divisible by groups=4"):
        Conv2d(6, 8, 3, groups=4)
    with pytest.raises(ShapeError, match="padding='same' needs stride 1"):
        Conv2d(2, 2, 3, stride=2, padding="same")
    with pytest.raises(ShapeError, match="stride must be >= 1"):
        Conv2d(2, 2, 3, stride=0)
    with pytest.raises(ShapeError, match=r"kernel_size must be >= 1 in both dims, got \(0, 3\)"):
        Conv2d(2, 2, (0, 3))
    with pytest.raises(ShapeError, match="kernel_size must be an int or a pair"):
        Conv2d(2, 2, (3, 3, 3))
    with pytest.raises(ShapeError, match="padding must be an int, a pair, 'valid' or 'same', got 'full'"):
        Conv2d(2, 2, 3, padding="full")
    with pytest.raises(ShapeError, match="padding_mode='reflect' is not supported"):
        Conv2d(2, 2, 3, padding_mode="reflect")
