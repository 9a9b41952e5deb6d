"""packrt.nn.functional agrees with torch.nn.functional on the same inputs, keeps device and dtype,
and turns every bad argument into a packrt error that names it."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packrt_core as prt
from packrt_core.dtypes import as_dtype
from packrt_core.errors import DeviceError, DTypeError, IndexingError, ReadOnlyError, ShapeError, StorageFreeError
from packrt_core.nn import functional as F  # noqa: N812 - torch's conventional alias
from packrt_core.tensor import Tensor
from packrt_kernels_cpu.tolerance import tolerance

DTYPES = [prt.float32, prt.float16, prt.bfloat16, prt.float64]
BF16 = np.dtype(ml_dtypes.bfloat16)


# -- helpers: the same values on both sides, compared with the kernel tolerance table ---------------------
def make(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, scale: float = 1.0) -> Tensor:
    return prt.from_numpy((rng.standard_normal(shape) * scale).astype(dtype.numpy))


def to_torch(torch: ModuleType, t: Tensor | None) -> Any:
    if t is None:
        return None
    a = np.ascontiguousarray(t.numpy())
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def from_torch(torch: ModuleType, t: Any) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return np.asarray(t.contiguous().view(torch.int16).numpy()).view(BF16)
    return np.asarray(t.detach().numpy())


def check(torch: ModuleType, actual: Tensor, expected: Any, scale: float = 1.0) -> None:
    """``actual`` is a packrt Tensor with torch's dtype and shape, within the tolerance table."""
    want = from_torch(torch, expected)
    assert isinstance(actual, Tensor)
    assert actual.dtype.numpy == want.dtype
    assert actual.shape == want.shape
    rtol, atol = tolerance(want.dtype)
    np.testing.assert_allclose(
        actual.numpy().astype(np.float64), want.astype(np.float64), rtol=rtol * scale, atol=atol * scale
    )


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def tf(torch: ModuleType) -> Any:
    import torch.nn.functional as torch_functional

    return torch_functional


# -- agreement with torch --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch(torch: ModuleType, tf: Any, rng: Any, dtype: Any, bias: bool) -> None:
    x, w = make(rng, (2, 3, 16), dtype), make(rng, (5, 16), dtype, 0.25)
    b = make(rng, (5,), dtype) if bias else None
    check(torch, F.linear(x, w, b), tf.linear(to_torch(torch, x), to_torch(torch, w), to_torch(torch, b)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_embedding_gathers_the_rows_torch_gathers(torch: ModuleType, tf: Any, rng: Any, dtype: Any) -> None:
    table = make(rng, (10, 4), dtype)
    ids = prt.from_numpy(rng.integers(0, 10, size=(3, 5)))
    check(torch, F.embedding(ids, table), tf.embedding(to_torch(torch, ids), to_torch(torch, table)), scale=0.0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine", ["none", "weight", "weight+bias"])
def test_layer_norm_matches_torch(torch: ModuleType, tf: Any, rng: Any, dtype: Any, affine: str) -> None:
    x = make(rng, (2, 3, 4, 6), dtype, 3.0)
    w = make(rng, (4, 6), dtype) if affine != "none" else None
    b = make(rng, (4, 6), dtype) if affine == "weight+bias" else None
    expected = tf.layer_norm(to_torch(torch, x), (4, 6), to_torch(torch, w), to_torch(torch, b), 1e-5)
    check(torch, F.layer_norm(x, (4, 6), w, b, 1e-5), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("eps", [None, 1e-6])
def test_rms_norm_matches_torch_with_default_and_explicit_eps(
    torch: ModuleType, tf: Any, rng: Any, dtype: Any, eps: float | None
) -> None:
    x, w = make(rng, (3, 5, 8), dtype), make(rng, (8,), dtype)
    check(torch, F.rms_norm(x, 8, w, eps), tf.rms_norm(to_torch(torch, x), [8], to_torch(torch, w), eps))
    check(torch, F.rms_norm(x, [5, 8], None, eps), tf.rms_norm(to_torch(torch, x), [5, 8], None, eps))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["relu", "silu", "sigmoid"])
def test_elementwise_activations_match_torch(torch: ModuleType, tf: Any, rng: Any, dtype: Any, name: str) -> None:
    x = make(rng, (4, 33), dtype, 4.0)
    check(torch, getattr(F, name)(x), getattr(tf, name)(to_torch(torch, x)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch_exact_and_tanh(torch: ModuleType, tf: Any, rng: Any, dtype: Any, approximate: str) -> None:
    x = make(rng, (4, 33), dtype, 4.0)
    check(torch, F.gelu(x, approximate=approximate), tf.gelu(to_torch(torch, x), approximate=approximate))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_matches_torch_along_any_dim(torch: ModuleType, tf: Any, rng: Any, dtype: Any, dim: int) -> None:
    x = make(rng, (3, 4, 7), dtype, 10.0)
    check(torch, F.softmax(x, dim), tf.softmax(to_torch(torch, x), dim))


def test_softmax_dtype_casts_the_input_first_as_torch_does(torch: ModuleType, tf: Any, rng: Any) -> None:
    x = make(rng, (3, 9), prt.float16, 5.0)
    out = F.softmax(x, -1, dtype=prt.float64)
    assert out.dtype is prt.float64
    check(torch, out, tf.softmax(to_torch(torch, x), -1, dtype=torch.float64))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask", ["none", "bool", "float", "causal"])
def test_scaled_dot_product_attention_matches_torch(
    torch: ModuleType, tf: Any, rng: Any, dtype: Any, mask: str
) -> None:
    q, k, v = make(rng, (2, 3, 5, 8), dtype), make(rng, (2, 3, 5, 8), dtype), make(rng, (2, 3, 5, 6), dtype)
    attn: Tensor | None = None
    if mask == "bool":
        attn = prt.from_numpy(rng.random((5, 5)) > 0.3)
    elif mask == "float":
        attn = make(rng, (1, 3, 5, 5), dtype)
    causal = mask == "causal"
    expected = tf.scaled_dot_product_attention(
        to_torch(torch, q), to_torch(torch, k), to_torch(torch, v), to_torch(torch, attn), is_causal=causal
    )
    check(torch, F.scaled_dot_product_attention(q, k, v, attn, is_causal=causal), expected)


def test_scaled_dot_product_attention_honours_an_explicit_scale(torch: ModuleType, tf: Any, rng: Any) -> None:
    q, k, v = (make(rng, (4, 6), prt.float64) for _ in range(3))
    expected = tf.scaled_dot_product_attention(*(to_torch(torch, t) for t in (q, k, v)), scale=0.3)
    check(torch, F.scaled_dot_product_attention(q, k, v, scale=0.3), expected)


CONV_CASES: dict[str, dict[str, Any]] = {
    "plain": {},
    "stride-padding": {"stride": 2, "padding": 1},
    "dilation-pairs": {"stride": (1, 2), "padding": (2, 1), "dilation": (2, 1)},
    "groups": {"groups": 2, "padding": "same"},
    "valid": {"padding": "valid"},
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv2d_matches_torch(torch: ModuleType, tf: Any, rng: Any, dtype: Any, case: str) -> None:
    kwargs: dict[str, Any] = CONV_CASES[case]
    groups = kwargs.get("groups", 1)
    x = make(rng, (2, 4, 9, 8), dtype)
    w, b = make(rng, (6, 4 // groups, 3, 3), dtype, 0.3), make(rng, (6,), dtype)
    expected = tf.conv2d(to_torch(torch, x), to_torch(torch, w), to_torch(torch, b), **kwargs)
    check(torch, F.conv2d(x, w, b, **kwargs), expected)


def test_conv2d_takes_unbatched_input_like_torch(torch: ModuleType, tf: Any, rng: Any) -> None:
    x, w = make(rng, (3, 7, 7), prt.float32), make(rng, (2, 3, 2, 2), prt.float32)
    check(torch, F.conv2d(x, w), tf.conv2d(to_torch(torch, x), to_torch(torch, w)))


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple),
    data=st.data(),
    dtype=st.sampled_from(["float32", "float64"]),
)
def test_softmax_and_layer_norm_match_torch_for_any_shape(
    torch: ModuleType, tf: Any, shape: tuple[int, ...], data: Any, dtype: str
) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = make(rng, shape, as_dtype(dtype), 5.0)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    check(torch, F.softmax(x, dim), tf.softmax(to_torch(torch, x), dim))
    k = data.draw(st.integers(1, len(shape)))
    check(torch, F.layer_norm(x, shape[-k:]), tf.layer_norm(to_torch(torch, x), shape[-k:]))


# -- results: a new tensor on the input's device, in its dtype -----------------------------------------
def test_results_stay_on_the_inputs_device(second_device: prt.Device) -> None:
    x = prt.ones(2, 4, device=second_device)
    w = prt.ones(3, 4, device=second_device)
    for out in (F.linear(x, w), F.relu(x), F.softmax(x, -1), F.layer_norm(x, 4), F.dropout(x, 0.5)):
        assert out.device == second_device
    assert F.linear(x, w).tolist() == [[4.0] * 3] * 2


def test_a_device_mismatch_names_both_arguments_and_their_devices(second_device: prt.Device) -> None:
    x = prt.ones(2, 4)
    with pytest.raises(DeviceError, match=r"linear: weight is on cuda:0 but input is on cpu"):
        F.linear(x, prt.ones(3, 4, device=second_device))
    with pytest.raises(DeviceError, match=r"layer_norm: bias is on cuda:0 but input is on cpu"):
        F.layer_norm(x, 4, prt.ones(4), prt.zeros(4, device=second_device))
    q = prt.ones(3, 4)
    with pytest.raises(DeviceError, match=r"attn_mask is on cuda:0 but query is on cpu"):
        F.scaled_dot_product_attention(q, q, q, prt.zeros(3, 3, device=second_device))


def test_non_tensor_arguments_are_a_type_error_naming_the_argument() -> None:
    with pytest.raises(TypeError, match=r"linear: weight must be a packrt Tensor, got ndarray"):
        F.linear(prt.ones(2, 4), np.ones((3, 4), np.float32))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"softmax: input must be a packrt Tensor, got list"):
        F.softmax([1.0, 2.0], 0)  # type: ignore[arg-type]


def test_storage_free_inputs_cannot_be_computed_on() -> None:
    with prt.meta_init():
        x = prt.zeros(2, 4)
    with pytest.raises(StorageFreeError, match="cannot read a storage-free tensor"):
        F.relu(x)


# -- kernel errors come back as packrt errors, in torch's argument names -----------------------------------
def test_linear_shape_and_dtype_errors_name_the_argument() -> None:
    with pytest.raises(ShapeError, match=r"linear: input's last dimension must equal weight's in_features=7"):
        F.linear(prt.ones(2, 8), prt.ones(3, 7))
    with pytest.raises(ShapeError, match=r"linear: bias must have shape \(3,\), got \(4,\)"):
        F.linear(prt.ones(2, 8), prt.ones(3, 8), prt.ones(4))
    with pytest.raises(DTypeError, match=r"linear: weight has dtype float64 but input has float32"):
        F.linear(prt.ones(2, 8), prt.ones(3, 8, dtype=prt.float64))


def test_embedding_refuses_out_of_range_and_non_integer_ids() -> None:
    table = prt.ones(10, 4)
    with pytest.raises(IndexingError, match=r"embedding: embedding id 10 at position \(1,\) .* table of 10 rows"):
        F.embedding(prt.tensor([3, 10]), table)
    with pytest.raises(DTypeError, match=r"embedding: input must be an integer array, got dtype float32"):
        F.embedding(prt.tensor([1.0]), table)
    with pytest.raises(ShapeError, match=r"embedding: weight must be 2-D"):
        F.embedding(prt.tensor([1]), prt.ones(10))


def test_norm_errors_name_the_shape_they_expected() -> None:
    with pytest.raises(ShapeError, match=r"layer_norm: input's trailing dimensions must equal normalized_shape=\(5,\)"):
        F.layer_norm(prt.ones(2, 4), 5)
    with pytest.raises(ShapeError, match=r"rms_norm: weight must have shape \(4,\), got \(3,\)"):
        F.rms_norm(prt.ones(2, 4), 4, prt.ones(3))
    with pytest.raises(DTypeError, match=r"layer_norm: input has dtype int64; expected one of"):
        F.layer_norm(prt.tensor([[1, 2]]), 2)


def test_activation_argument_errors_are_named() -> None:
    with pytest.raises(ValueError, match=r"gelu: approximate must be 'none' or 'tanh', got 'fast'"):
        F.gelu(prt.ones(2), approximate="fast")
    with pytest.raises(IndexingError, match=r"softmax: dim=2 is out of range for a 2-D array"):
        F.softmax(prt.ones(2, 3), 2)
    with pytest.raises(TypeError, match=r"softmax: dim must be an int"):
        F.softmax(prt.ones(2, 3), None)  # type: ignore[arg-type]
    with pytest.raises(DTypeError, match=r"relu: input has dtype int64"):
        F.relu(prt.tensor([1, -2]))


def test_attention_errors_name_query_key_value_and_mask() -> None:
    q = prt.ones(2, 3, 4)
    with pytest.raises(ShapeError, match=r"key's feature dim must equal query's \(4\)"):
        F.scaled_dot_product_attention(q, prt.ones(2, 3, 5), prt.ones(2, 3, 5))
    with pytest.raises(ShapeError, match=r"pass either attn_mask or is_causal=True, not both"):
        F.scaled_dot_product_attention(q, q, q, prt.ones(3, 3), is_causal=True)
    with pytest.raises(ShapeError, match=r"attn_mask and scores do not broadcast"):
        F.scaled_dot_product_attention(q, q, q, prt.ones(2, 2))
    with pytest.raises(ValueError, match=r"dropout_p must be 0.0 \(packrt serves inference"):
        F.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    with pytest.raises(ShapeError, match=r"value's length must equal key's \(3\)"):
        F.scaled_dot_product_attention(q, q, prt.ones(2, 4, 4))
    with pytest.raises(ShapeError, match=r"query and key do not broadcast: size 2 vs 3 at dim -1"):
        F.scaled_dot_product_attention(q, prt.ones(3, 3, 4), prt.ones(3, 3, 4))
    with pytest.raises(ShapeError, match=r"query must have at least 2 dims"):
        F.scaled_dot_product_attention(prt.ones(4), q, q)
    with pytest.raises(DTypeError, match=r"attn_mask has dtype float64 but query"):
        F.scaled_dot_product_attention(q, q, q, prt.ones(3, 3, dtype="float64"))
    with pytest.raises(DTypeError, match=r"value has dtype float16 but query has float32"):
        F.scaled_dot_product_attention(q, q, q.half())
    # a bool mask is accepted whatever the query's dtype
    assert F.scaled_dot_product_attention(q, q, q, prt.ones(3, 3, dtype="bool")).shape == (2, 3, 4)


def test_conv2d_geometry_errors_name_the_bad_argument() -> None:
    x, w = prt.ones(1, 4, 5, 5), prt.ones(2, 4, 3, 3)
    with pytest.raises(ShapeError, match=r"conv2d: stride must be >= 1 in both dims, got 0"):
        F.conv2d(x, w, stride=0)
    with pytest.raises(ShapeError, match=r"conv2d: padding='same' needs stride 1"):
        F.conv2d(x, w, stride=2, padding="same")
    with pytest.raises(ShapeError, match=r"conv2d: input has 3 channels .* in_channels = .* = 4"):
        F.conv2d(prt.ones(1, 3, 5, 5), w)
    with pytest.raises(ShapeError, match=r"conv2d: weight's out_channels=2 must be divisible by groups=4"):
        F.conv2d(x, prt.ones(2, 1, 3, 3), groups=4)
    with pytest.raises(ShapeError, match=r"conv2d: weight must be 4-D \(out_channels, in_channels / groups"):
        F.conv2d(x, prt.ones(2, 4, 3))
    with pytest.raises(ShapeError, match=r"conv2d: bias must have shape \(2,\), got \(3,\)"):
        F.conv2d(x, w, prt.ones(3))
    with pytest.raises(ShapeError, match=r"conv2d: input must be 3 or 4-D \(N, C, H, W\) .* got shape \(2, 4\)"):
        F.conv2d(prt.ones(2, 4), w)
    with pytest.raises(DTypeError, match=r"conv2d: weight has dtype float64 but input has float32"):
        F.conv2d(x, w.double())
    with pytest.raises(ShapeError, match=r"conv2d: conv2d output would be 0x0: the input 2x2 .* dilated kernel 3x3"):
        F.conv2d(prt.ones(1, 4, 2, 2), w)


# -- in-place variants ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["relu", "silu"])
def test_inplace_activation_overwrites_the_input_and_bumps_its_version(name: str) -> None:
    x = prt.tensor([-1.0, 0.5, 2.0])
    expected = getattr(F, name)(x).tolist()
    before = x._version
    out = getattr(F, name)(x, inplace=True)
    assert out is x
    assert x.tolist() == expected
    assert x._version == before + 1


def test_inplace_activation_refuses_a_read_only_view() -> None:
    view = prt.tensor([1.0]).expand(3)
    with pytest.raises(ReadOnlyError, match=r"relu\(inplace=True\) cannot write into a read-only tensor"):
        F.relu(view, inplace=True)


# -- dropout ---------------------------------------------------------------------------------------------
def test_dropout_is_the_identity_outside_training_or_at_p_zero() -> None:
    x = prt.randn(4, 5)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_drops_a_fraction_p_and_scales_survivors_by_one_over_keep(dtype: Any, p: float) -> None:
    prt.manual_seed(7)
    n = 40_000
    x = prt.full((n,), 1.5, dtype=dtype)
    out = F.dropout(x, p).numpy().astype(np.float64)
    dropped = np.mean(out == 0.0)
    # A binomial fraction: 5 standard deviations is a bound a correct sampler essentially never breaks.
    assert abs(dropped - p) < 5 * np.sqrt(p * (1 - p) / n)
    survivors = out[out != 0.0]
    rtol, atol = tolerance(dtype.numpy)
    np.testing.assert_allclose(survivors, 1.5 / (1 - p), rtol=rtol, atol=atol)
    assert F.dropout(x, p).dtype is dtype


def test_dropout_is_reproducible_under_manual_seed_and_keeps_the_mean() -> None:
    x = prt.ones(200, 200)
    prt.manual_seed(3)
    first = F.dropout(x, 0.25).numpy().copy()
    prt.manual_seed(3)
    second = F.dropout(x, 0.25).numpy()
    np.testing.assert_array_equal(first, second)
    assert abs(first.mean() - 1.0) < 0.02


def test_dropout_at_p_one_zeroes_everything_but_keeps_nan_as_torch_does() -> None:
    out = F.dropout(prt.tensor([1.0, float("nan"), -3.0]), 1.0).numpy()
    assert out[0] == 0.0 and out[2] == 0.0
    assert np.isnan(out[1])


def test_dropout_inplace_overwrites_the_input() -> None:
    prt.manual_seed(0)
    x = prt.ones(1000)
    assert F.dropout(x, 0.5, inplace=True) is x
    assert set(np.unique(x.numpy()).tolist()) == {0.0, 2.0}


def test_dropout_refuses_a_probability_outside_zero_one_and_integer_input() -> None:
    for bad in (-0.1, 1.5, True, "0.5"):
        with pytest.raises(ValueError, match=r"dropout: p \(the drop probability\) must be between 0 and 1"):
            F.dropout(prt.ones(3), bad)  # type: ignore[arg-type]
    with pytest.raises(DTypeError, match=r"dropout: input has dtype int64"):
        F.dropout(prt.tensor([1, 2]), 0.5)
