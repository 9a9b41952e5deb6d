"""Weightless layers (ReLU, GELU, SiLU, Sigmoid, Softmax, Dropout) behave and print as torch's do."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import packrt_core as prt
from packrt_core.errors import DTypeError
from packrt_core.nn import Sequential
from packrt_core.nn.activation import GELU, Dropout, ReLU, Sigmoid, SiLU, Softmax
from packrt_core.tensor import Tensor
from packrt_kernels_cpu.tolerance import tolerance

DTYPES = [prt.float32, prt.float16, prt.bfloat16, prt.float64]
BF16 = np.dtype(ml_dtypes.bfloat16)
LAYERS: dict[str, type[Any]] = {
    "ReLU": ReLU,
    "GELU": GELU,
    "SiLU": SiLU,
    "Sigmoid": Sigmoid,
    "Softmax": Softmax,
    "Dropout": Dropout,
}


def make(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, scale: float = 1.0) -> Tensor:
    return prt.from_numpy((rng.standard_normal(shape) * scale).astype(dtype.numpy))


def to_torch(torch: ModuleType, t: Tensor) -> Any:
    a = np.ascontiguousarray(t.numpy())
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == BF16 else torch.from_numpy(a)


def check(torch: ModuleType, actual: Tensor, expected: Any) -> None:
    want = (
        np.asarray(expected.contiguous().view(torch.int16).numpy()).view(BF16)
        if expected.dtype == torch.bfloat16
        else expected.numpy()
    )
    assert actual.dtype.numpy == want.dtype and actual.shape == want.shape
    rtol, atol = tolerance(want.dtype)
    np.testing.assert_allclose(actual.numpy().astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


# -- forward agrees with torch's layer ---------------------------------------------------------------
FORWARD_CASES: list[tuple[str, dict[str, Any]]] = [
    ("ReLU", {}),
    ("GELU", {}),
    ("GELU", {"approximate": "tanh"}),
    ("SiLU", {}),
    ("Sigmoid", {}),
    ("Softmax", {"dim": -1}),
    ("Softmax", {"dim": 0}),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("name", "kwargs"), FORWARD_CASES, ids=lambda v: str(v))
def test_layer_forward_matches_torchs_layer(torch: ModuleType, dtype: Any, name: str, kwargs: dict[str, Any]) -> None:
    x = make(np.random.default_rng(5), (3, 4, 9), dtype, 3.0)
    ours = LAYERS[name](**kwargs)
    theirs = getattr(torch.nn, name)(**kwargs)
    check(torch, ours(x), theirs(to_torch(torch, x)))


# -- repr and state match torch ----------------------------------------------------------------------------
REPR_CASES: list[tuple[str, dict[str, Any]]] = [
    ("ReLU", {}),
    ("ReLU", {"inplace": True}),
    ("GELU", {}),
    ("GELU", {"approximate": "tanh"}),
    ("SiLU", {}),
    ("SiLU", {"inplace": True}),
    ("Sigmoid", {}),
    ("Softmax", {"dim": 1}),
    ("Softmax", {"dim": -1}),
    ("Dropout", {}),
    ("Dropout", {"p": 0.1, "inplace": True}),
]


@pytest.mark.parametrize(("name", "kwargs"), REPR_CASES, ids=lambda v: str(v))
def test_repr_prints_the_settings_exactly_as_torch_does(torch: ModuleType, name: str, kwargs: dict[str, Any]) -> None:
    assert repr(LAYERS[name](**kwargs)) == repr(getattr(torch.nn, name)(**kwargs))


def test_repr_nests_inside_containers_like_torch(torch: ModuleType) -> None:
    ours = Sequential(GELU("tanh"), Dropout(0.2), Softmax(dim=-1))
    theirs = torch.nn.Sequential(torch.nn.GELU("tanh"), torch.nn.Dropout(0.2), torch.nn.Softmax(dim=-1))
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("name", list(LAYERS))
def test_weightless_layers_hold_no_state_and_load_an_empty_dict(name: str) -> None:
    layer = LAYERS[name](dim=-1) if name == "Softmax" else LAYERS[name]()
    assert layer.state_dict() == {}
    assert list(layer.parameters()) == [] and list(layer.buffers()) == []
    result = layer.load_state_dict({})
    assert result.missing_keys == [] and result.unexpected_keys == []


@pytest.mark.parametrize("name", list(LAYERS))
def test_layers_built_under_meta_init_serve_real_input(name: str) -> None:
    with prt.meta_init():
        layer = LAYERS[name](dim=-1) if name == "Softmax" else LAYERS[name]()
    layer.eval()
    out = layer(prt.ones(2, 3))
    assert out.has_storage and out.shape == (2, 3)


# -- in-place and dtype rules --------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [ReLU, SiLU])
def test_inplace_layers_overwrite_their_input(cls: type[Any]) -> None:
    x = prt.tensor([-2.0, 0.0, 3.0])
    expected = cls()(x).tolist()
    assert cls(inplace=True)(x) is x
    assert x.tolist() == expected


def test_layers_refuse_integer_input_naming_the_function() -> None:
    with pytest.raises(DTypeError, match=r"gelu: input has dtype int64"):
        GELU()(prt.tensor([1, 2]))


# -- dropout ---------------------------------------------------------------------------------------------
def test_dropout_in_eval_mode_returns_its_input_unchanged() -> None:
    layer = Dropout(0.9).eval()
    x = prt.randn(8, 8)
    assert layer(x) is x


def test_dropout_follows_the_trees_mode_switch() -> None:
    model = Sequential(ReLU(), Dropout(0.5))
    x = prt.ones(64, 64)
    assert model.training
    prt.manual_seed(11)
    assert float((model(x) == 0.0).float().mean()) > 0.4  # training: about half dropped
    model.eval()
    assert not model[1].training
    np.testing.assert_array_equal(model(x).numpy(), x.numpy())  # eval: nothing dropped, nothing scaled


@pytest.mark.parametrize("p", [0.2, 0.5, 0.7])
def test_dropout_in_train_mode_drops_p_and_preserves_the_mean(p: float) -> None:
    prt.manual_seed(42)
    n = 50_000
    out = Dropout(p)(prt.full((n,), 2.0)).numpy().astype(np.float64)
    dropped = np.mean(out == 0.0)
    assert abs(dropped - p) < 5 * np.sqrt(p * (1 - p) / n)  # a binomial fraction, 5 sigma
    np.testing.assert_allclose(out[out != 0.0], 2.0 / (1 - p), rtol=1e-6)
    assert abs(out.mean() - 2.0) < 5 * 2.0 * np.sqrt(p / ((1 - p) * n))


def test_dropout_draws_repeat_under_the_same_seed_and_differ_between_calls() -> None:
    layer = Dropout(0.5)
    x = prt.ones(100, 100)
    prt.manual_seed(9)
    first, second = layer(x).numpy().copy(), layer(x).numpy().copy()
    prt.manual_seed(9)
    np.testing.assert_array_equal(layer(x).numpy(), first)
    assert not np.array_equal(first, second)


# -- construction errors -----------------------------------------------------------------------------------
def test_bad_settings_are_refused_when_the_layer_is_built() -> None:
    with pytest.raises(ValueError, match=r"GELU: approximate must be 'none' or 'tanh', got 'erf'"):
        GELU("erf")
    with pytest.raises(TypeError, match=r"Softmax: dim must be an int .* got None"):
        Softmax()
    with pytest.raises(TypeError, match=r"Softmax: dim must be an int .* got 1.5"):
        Softmax(1.5)  # type: ignore[arg-type]
    for bad in (-0.5, 1.01):
        with pytest.raises(ValueError, match=r"Dropout: p \(the drop probability\) must be between 0 and 1"):
            Dropout(bad)
    with pytest.raises(TypeError, match=r"ReLU: inplace must be a bool, got str"):
        ReLU(inplace="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Dropout: inplace must be a bool, got int"):
        Dropout(0.5, 1)  # type: ignore[arg-type]
