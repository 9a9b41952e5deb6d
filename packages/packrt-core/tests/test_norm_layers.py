"""LayerNorm and RMSNorm: torch's math, repr and parameter names, so torch checkpoints load unchanged."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import packrt_core as prt
from packrt_core.errors import DeviceError, DTypeError, ShapeError, StorageFreeError
from packrt_core.nn import Parameter
from packrt_core.nn.normalization import LayerNorm, RMSNorm
from packrt_core.tensor import Tensor
from packrt_kernels_cpu.tolerance import tolerance

DTYPES = [prt.float32, prt.float16, prt.bfloat16, prt.float64]
BF16 = np.dtype(ml_dtypes.bfloat16)
NORMS: dict[str, type[Any]] = {"LayerNorm": LayerNorm, "RMSNorm": RMSNorm}
# (layer, args, kwargs): the variants whose math, repr and state must match torch's.
VARIANTS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("LayerNorm", (16,), {}),
    ("LayerNorm", ((4, 16),), {"eps": 1e-6}),
    ("LayerNorm", (16,), {"bias": False}),
    ("LayerNorm", (16,), {"elementwise_affine": False}),
    ("RMSNorm", (16,), {}),
    ("RMSNorm", ([4, 16],), {"eps": 1e-6}),
    ("RMSNorm", (16,), {"elementwise_affine": False}),
]
IDS = [f"{name}{args}{kwargs or ''}" for name, args, kwargs in VARIANTS]


def to_torch(torch: ModuleType, t: Tensor) -> Any:
    a = np.ascontiguousarray(t.numpy())
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == BF16 else torch.from_numpy(a)


def from_torch(torch: ModuleType, t: Any) -> Tensor:
    """A packrt copy of a torch tensor (bfloat16 by bit view: numpy cannot take it through DLPack)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return prt.from_numpy(t.view(torch.int16).numpy().copy().view(BF16))
    return prt.from_numpy(t.numpy().copy())


def torch_state(torch: ModuleType, layer: Any) -> dict[str, Tensor]:
    return {key: from_torch(torch, value) for key, value in layer.state_dict().items()}


def randomized_torch_layer(torch: ModuleType, name: str, args: Any, kwargs: Any, dtype: Any) -> Any:
    """torch's layer in ``dtype`` with random (not default) affine parameters."""
    layer = getattr(torch.nn, name)(*args, **kwargs).to(getattr(torch, dtype.name))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in layer.parameters():
            param.copy_(torch.randn(param.shape, generator=generator))
    return layer


# -- agreement with torch, through torch's own checkpoint --------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("name", "args", "kwargs"), VARIANTS, ids=IDS)
def test_torch_state_dict_loads_and_the_forward_matches_torch(
    torch: ModuleType, dtype: Any, name: str, args: Any, kwargs: Any
) -> None:
    theirs = randomized_torch_layer(torch, name, args, kwargs, dtype)
    ours = NORMS[name](*args, dtype=dtype, **kwargs)
    result = ours.load_state_dict(torch_state(torch, theirs))
    assert result.missing_keys == [] and result.unexpected_keys == []
    x = prt.from_numpy((np.random.default_rng(3).standard_normal((2, 3, 4, 16)) * 4 + 1).astype(dtype.numpy))
    expected = theirs(to_torch(torch, x)).detach()
    want = np.asarray(expected.view(torch.int16).numpy()).view(BF16) if dtype is prt.bfloat16 else expected.numpy()
    out = ours(x)
    assert out.dtype is dtype and out.shape == want.shape
    rtol, atol = tolerance(dtype.numpy)
    np.testing.assert_allclose(out.numpy().astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize(("name", "args", "kwargs"), VARIANTS, ids=IDS)
def test_repr_matches_torchs_for_the_same_layer(torch: ModuleType, name: str, args: Any, kwargs: Any) -> None:
    assert repr(NORMS[name](*args, **kwargs)) == repr(getattr(torch.nn, name)(*args, **kwargs))


@pytest.mark.parametrize(("name", "args", "kwargs"), VARIANTS, ids=IDS)
def test_parameters_are_named_shaped_and_initialized_as_torchs(
    torch: ModuleType, name: str, args: Any, kwargs: Any
) -> None:
    ours = NORMS[name](*args, **kwargs)
    theirs = getattr(torch.nn, name)(*args, **kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for (our_name, ours_p), (their_name, theirs_p) in zip(
        ours.named_parameters(), theirs.named_parameters(), strict=True
    ):
        assert our_name == their_name
        assert isinstance(ours_p, Parameter) and ours_p.dtype is prt.float32
        np.testing.assert_array_equal(ours_p.numpy(), theirs_p.detach().numpy())  # ones / zeros, as torch


def test_absent_parameters_read_as_none_like_torch() -> None:
    assert LayerNorm(4, bias=False).bias is None
    plain = LayerNorm(4, elementwise_affine=False)
    assert plain.weight is None and plain.bias is None
    assert RMSNorm(4, elementwise_affine=False).weight is None


def test_reset_parameters_restores_ones_and_zeros() -> None:
    layer = LayerNorm(3)
    layer.weight.fill_(5.0)
    layer.bias.fill_(2.0)
    layer.reset_parameters()
    assert layer.weight.tolist() == [1.0] * 3 and layer.bias.tolist() == [0.0] * 3


# -- meta init, assign and residency ------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "args", "kwargs"), VARIANTS, ids=IDS)
def test_meta_init_declares_storage_free_parameters_that_a_load_with_assign_binds(
    torch: ModuleType, name: str, args: Any, kwargs: Any
) -> None:
    with prt.meta_init():
        ours = NORMS[name](*args, **kwargs)
    for param in ours.parameters():
        assert not param.has_storage and param.storage_nbytes == 0
    theirs = randomized_torch_layer(torch, name, args, kwargs, prt.float32)
    state = torch_state(torch, theirs)
    ours.load_state_dict(state, assign=True)
    for key, param in ours.named_parameters():
        assert param.has_storage and param.data_ptr() == state[key].data_ptr()
    x = prt.randn(5, 4, 16)
    np.testing.assert_allclose(ours(x).numpy(), theirs(to_torch(torch, x)).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_a_storage_free_norm_refuses_to_run_before_its_weights_are_bound() -> None:
    with prt.meta_init():
        layer = RMSNorm(8)
    with pytest.raises(StorageFreeError, match="cannot read a storage-free tensor"):
        layer(prt.ones(2, 8))


@pytest.mark.parametrize("residency", ["packed", "borrowed", "auto", "per_call"])
def test_norm_layers_keep_their_plain_parameters_under_any_residency(residency: str) -> None:
    layer = LayerNorm(8)
    state = {"weight": prt.randn(8), "bias": prt.randn(8)}
    layer.load_state_dict(state, assign=True, pack=True, weight_residency=residency)
    layer(prt.randn(3, 8))
    for key, param in layer.named_parameters():
        assert param.data_ptr() == state[key].data_ptr()  # the bound tensor itself, no packed copy
        assert param.storage_nbytes == 8 * 4
    assert layer.state_dict()["weight"].tolist() == state["weight"].tolist()


# -- dtype and device ------------------------------------------------------------------------------------
def test_dtype_and_device_arguments_place_the_parameters(second_device: prt.Device) -> None:
    half = LayerNorm(4, dtype=prt.float16)
    assert {p.dtype for p in half.parameters()} == {prt.float16}
    remote = RMSNorm(4, device=second_device)
    assert remote.weight.device == second_device
    assert remote(prt.ones(2, 4, device=second_device)).device == second_device


def test_input_on_another_device_is_a_device_error_naming_both(second_device: prt.Device) -> None:
    layer = LayerNorm(4).to(second_device)
    with pytest.raises(DeviceError, match=r"layer_norm: weight is on cuda:0 but input is on cpu"):
        layer(prt.ones(2, 4))


def test_input_dtype_must_match_the_parameters() -> None:
    with pytest.raises(DTypeError, match=r"layer_norm: weight has dtype float32 but input has float16"):
        LayerNorm(4)(prt.ones(2, 4, dtype=prt.float16))
    with pytest.raises(DTypeError, match=r"rms_norm: weight has dtype float16 but input has float32"):
        RMSNorm(4).half()(prt.ones(2, 4))


def test_input_with_the_wrong_trailing_dims_names_normalized_shape() -> None:
    with pytest.raises(ShapeError, match=r"layer_norm: input's trailing dimensions must equal normalized_shape=\(8,\)"):
        LayerNorm(8)(prt.ones(2, 4))
    with pytest.raises(ShapeError, match=r"rms_norm: .*normalized_shape=\(2, 4\), got input of shape \(4, 2\)"):
        RMSNorm((2, 4))(prt.ones(4, 2))


# -- construction errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm], ids=lambda c: c.__name__)
def test_bad_normalized_shapes_and_dtypes_are_refused_at_construction(cls: type[Any]) -> None:
    name = cls.__name__
    with pytest.raises(ShapeError, match=rf"{name}: normalized_shape must name at least one trailing dimension"):
        cls(())
    with pytest.raises(ShapeError, match=rf"{name}: normalized_shape .* each of size >= 1, got \(4, 0\)"):
        cls((4, 0))
    with pytest.raises(TypeError, match=rf"{name}: normalized_shape must hold ints only, got \(4, 2.5\)"):
        cls((4, 2.5))
    with pytest.raises(TypeError, match=rf"{name}: normalized_shape must be an int or a sequence of ints, got float"):
        cls(4.0)
    with pytest.raises(DTypeError, match=rf"{name}: parameters must be floating point, got dtype int32"):
        cls(4, dtype=prt.int32)
