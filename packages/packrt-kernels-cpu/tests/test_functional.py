"""Functional kernels agree with torch.nn.functional within the tolerance table."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from packrt_kernels_cpu import functional as kernels
from packrt_kernels_cpu.tolerance import KERNEL_TOLERANCES, tolerance

DTYPES = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16]

pytestmark = pytest.mark.usefixtures("kernel_path")  # every comparison with torch, on both paths


BF16 = np.dtype(ml_dtypes.bfloat16)


def test_tolerance_table_covers_every_float_dtype_and_names_the_gap() -> None:
    assert set(KERNEL_TOLERANCES) == {"float64", "float32", "float16", "bfloat16"}
    assert tolerance(np.float16) == KERNEL_TOLERANCES["float16"]
    with pytest.raises(KeyError, match="no kernel tolerance for dtype int32"):
        tolerance(np.int32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch_and_keeps_the_input_dtype(ref: Any, make: Any, rng: Any, dtype: Any, bias: bool) -> None:
    x = make(rng, (2, 3, 16), dtype)
    w = make(rng, (5, 16), dtype, 0.25)
    b = make(rng, (5,), dtype) if bias else None
    expected = ref.F.linear(ref.t(x), ref.t(w), None if b is None else ref.t(b))
    ref.check(kernels.linear(x, w, b), expected)


@pytest.mark.usefixtures("blas_road")
@pytest.mark.parametrize("rows", [1, 3, 700])  # 700 x 400 outputs: the bias laid out on the pool first (MKL's road)
def test_a_large_linear_with_bias_matches_torch_on_both_gemm_roads(ref: Any, make: Any, rng: Any, rows: int) -> None:
    x, w, b = make(rng, (rows, 64), np.float32), make(rng, (400, 64), np.float32, 0.2), make(rng, (400,), np.float32)
    ref.check(kernels.linear(x, w, b), ref.F.linear(ref.t(x), ref.t(w), ref.t(b)))
    ref.check(kernels.gemm_rows(x, np.ascontiguousarray(w.T), b), ref.F.linear(ref.t(x), ref.t(w), ref.t(b)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_gathers_the_rows_torch_gathers(ref: Any, make: Any, rng: Any, dtype: Any) -> None:
    table = make(rng, (10, 4), dtype)
    ids = rng.integers(0, 10, size=(3, 5))
    ref.check(kernels.embedding(ids, table), ref.F.embedding(ref.t(ids), ref.t(table)), scale=0.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_matches_torch(ref: Any, make: Any, rng: Any, dtype: Any, affine: bool) -> None:
    x = make(rng, (2, 3, 4, 8), dtype, 3.0)
    w = make(rng, (4, 8), dtype) if affine else None
    b = make(rng, (4, 8), dtype) if affine else None
    expected = ref.F.layer_norm(ref.t(x), (4, 8), None if w is None else ref.t(w), None if b is None else ref.t(b))
    ref.check(kernels.layer_norm(x, (4, 8), w, b), expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("eps", [None, 1e-3])
def test_rms_norm_matches_torch_including_its_default_eps(
    ref: Any, make: Any, rng: Any, dtype: Any, eps: float | None
) -> None:
    x = make(rng, (3, 6), dtype, 1e-3)  # tiny inputs make eps matter
    w = make(rng, (6,), dtype)
    ref.check(kernels.rms_norm(x, 6, w, eps), ref.F.rms_norm(ref.t(x), (6,), ref.t(w), eps))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["relu", "silu", "sigmoid", "gelu", "gelu_tanh"])
def test_activations_match_torch(ref: Any, make: Any, rng: Any, dtype: Any, name: str) -> None:
    x = make(rng, (4, 64), dtype, 4.0)
    x[0, :4] = np.array([-30.0, -12.0, 0.0, 30.0]).astype(dtype)  # tails and the kink
    tx = ref.t(x)
    got, want = {
        "relu": (lambda: kernels.relu(x), lambda: ref.F.relu(tx)),
        "silu": (lambda: kernels.silu(x), lambda: ref.F.silu(tx)),
        "sigmoid": (lambda: kernels.sigmoid(x), lambda: ref.torch.sigmoid(tx)),
        "gelu": (lambda: kernels.gelu(x), lambda: ref.F.gelu(tx)),
        "gelu_tanh": (lambda: kernels.gelu(x, approximate="tanh"), lambda: ref.F.gelu(tx, approximate="tanh")),
    }[name]
    ref.check(got(), want())


def test_activations_do_not_warn_on_extreme_inputs() -> None:
    x = np.array([-1e4, -100.0, 100.0, 1e4], np.float32)
    with np.errstate(over="raise", divide="raise", invalid="raise"):  # numpy warns on these by default
        assert np.isfinite(kernels.silu(x)).all()
        assert np.isfinite(kernels.gelu(x)).all()
        out = kernels.sigmoid(x)
    np.testing.assert_array_equal(out[[0, 2, 3]], [0.0, 1.0, 1.0])
    assert 0.0 < out[1] < 1e-40  # exp(-100) survives as a float32 subnormal, not as an overflow


def test_relu_keeps_nan_and_dtype() -> None:
    out = kernels.relu(np.array([np.nan, -1.0, 2.0], BF16))
    assert out.dtype == BF16
    np.testing.assert_array_equal(out.astype(np.float32), [np.nan, 0.0, 2.0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_matches_torch_on_every_dim(ref: Any, make: Any, rng: Any, dtype: Any, dim: int) -> None:
    x = make(rng, (3, 5, 7), dtype, 5.0)
    ref.check(kernels.softmax(x, dim), ref.F.softmax(ref.t(x), dim))


def test_softmax_rows_sum_to_one_even_for_huge_logits() -> None:
    x = np.array([[1e30, 1e30, -1e30], [1000.0, 999.0, 998.0]], np.float32)
    out = kernels.softmax(x, -1)
    np.testing.assert_allclose(out.sum(axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(out[0], [0.5, 0.5, 0.0])


def test_softmax_of_an_all_masked_row_is_nan_like_torch() -> None:
    out = kernels.softmax(np.array([[-np.inf, -np.inf], [0.0, -np.inf]], np.float32), -1)
    assert np.isnan(out[0]).all()
    np.testing.assert_array_equal(out[1], [1.0, 0.0])
