"""scaled_dot_product_attention follows torch's mask semantics and refuses malformed arguments."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from packrt_kernels_cpu.attention import scaled_dot_product_attention as sdpa

DTYPES = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16]
pytestmark = pytest.mark.usefixtures("kernel_path")  # the compiled softmax steps and numpy's, both


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_torch_with_and_without_causal_mask(
    ref: Any, make: Any, rng: Any, dtype: Any, causal: bool
) -> None:
    q, k, v = make(rng, (2, 3, 5, 8), dtype), make(rng, (2, 3, 7, 8), dtype), make(rng, (2, 3, 7, 4), dtype)
    want = ref.F.scaled_dot_product_attention(ref.t(q), ref.t(k), ref.t(v), is_causal=causal)
    ref.check(sdpa(q, k, v, is_causal=causal), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_bool_mask_true_takes_part_and_float_mask_is_added(ref: Any, make: Any, rng: Any, dtype: Any) -> None:
    q, k, v = make(rng, (2, 4, 8), dtype), make(rng, (2, 6, 8), dtype), make(rng, (2, 6, 8), dtype)
    keep = rng.random((4, 6)) > 0.3
    keep[:, 0] = True
    want = ref.F.scaled_dot_product_attention(ref.t(q), ref.t(k), ref.t(v), attn_mask=ref.t(keep))
    ref.check(sdpa(q, k, v, attn_mask=keep), want)
    bias = make(rng, (1, 4, 6), dtype)
    want = ref.F.scaled_dot_product_attention(ref.t(q), ref.t(k), ref.t(v), attn_mask=ref.t(bias), scale=0.3)
    ref.check(sdpa(q, k, v, attn_mask=bias, scale=0.3), want)


def test_sdpa_broadcasts_batch_dims_like_torch(ref: Any, make: Any, rng: Any) -> None:
    q, k, v = (
        make(rng, (2, 3, 5, 4), np.float32),
        make(rng, (1, 3, 6, 4), np.float32),
        make(rng, (3, 6, 2), np.float32),
    )
    ref.check(sdpa(q, k, v), ref.F.scaled_dot_product_attention(ref.t(q), ref.t(k), ref.t(v)))


def test_causal_equals_an_explicit_lower_triangular_bool_mask(make: Any, rng: Any) -> None:
    q, k, v = (
        make(rng, (3, 5, 4), np.float64),
        make(rng, (3, 7, 4), np.float64),
        make(rng, (3, 7, 4), np.float64),
    )
    tril = np.tril(np.ones((5, 7), dtype=bool))
    np.testing.assert_array_equal(sdpa(q, k, v, is_causal=True), sdpa(q, k, v, attn_mask=tril))
    additive = np.where(tril, 0.0, -np.inf)
    np.testing.assert_allclose(sdpa(q, k, v, is_causal=True), sdpa(q, k, v, attn_mask=additive), rtol=1e-15)


def test_a_query_that_may_see_no_key_gets_zeros_like_torch(ref: Any, make: Any, rng: Any) -> None:
    q, k, v = make(rng, (3, 4), np.float32), make(rng, (5, 4), np.float32), make(rng, (5, 2), np.float32)
    keep = np.ones((3, 5), dtype=bool)
    keep[1] = False
    out = sdpa(q, k, v, attn_mask=keep)
    np.testing.assert_array_equal(out[1], 0.0)
    assert np.isfinite(out).all()
    ref.check(out, ref.F.scaled_dot_product_attention(ref.t(q), ref.t(k), ref.t(v), attn_mask=ref.t(keep)))
