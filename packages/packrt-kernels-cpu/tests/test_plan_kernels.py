"""The serving plan's CPU kernels (packrt_kernels_cpu.plan): each fused step gives the result of the
steps it replaces, on both GEMM roads and with numba's kernels on and off."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from packrt_kernels_cpu import (
    CPU_KERNELS,
    KernelShapeError,
    blocks,
    borrow_linear,
    compiled,
    float_tiles,
    gelu,
    layer_norm,
    pack_linear,
    pack_quantized_linear,
    quantize_per_channel,
    relu,
    rms_norm,
    scaled_dot_product_attention,
    settings,
    silu,
    threads,
)
from packrt_kernels_cpu import plan as cpu_plan
from packrt_kernels_cpu.tolerance import assert_same_result

BF16 = np.dtype(ml_dtypes.bfloat16)
ACTIVATIONS = {
    None: lambda a: a,
    "gelu": gelu,
    "gelu_tanh": lambda a: gelu(a, "tanh"),
    "silu": silu,
    "relu": relu,
}


def _linears(rng: np.random.Generator, widths: tuple[int, ...], k: int, dtype: object) -> list[tuple]:
    return [(rng.standard_normal((n, k)).astype(dtype), rng.standard_normal(n).astype(dtype)) for n in widths]


def test_the_cpu_table_names_its_plan_kernels() -> None:
    assert CPU_KERNELS.plan_kernels() is cpu_plan.CPU_PLAN


@pytest.mark.usefixtures("blas_road", "kernel_path")
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
def test_joined_packs_give_each_layers_output_side_by_side(rng: np.random.Generator, dtype: object) -> None:
    layers = _linears(rng, (8, 12, 12), 16, dtype)
    packs = [pack_linear(w, b) for w, b in layers]
    assert cpu_plan.fuses(packs)
    joined = cpu_plan.plan_linear(packs)
    x = rng.standard_normal((5, 16)).astype(dtype)
    out = joined.forward(x.astype(np.float32))  # the plan's activations are float32 between its steps
    assert out.shape == (5, 32) and out.dtype == np.float32 and joined.out_features == 32
    expected = np.concatenate([p.forward(x) for p in packs], axis=1)  # each rounded to the layer's dtype
    assert_same_result(out.astype(dtype), expected, terms=16)


@pytest.mark.usefixtures("blas_road")
def test_the_parts_of_a_joined_weight_serve_and_unpack_each_layer(rng: np.random.Generator) -> None:
    layers = _linears(rng, (8, 4), 16, np.float32)
    packs = [pack_linear(w, b) for w, b in layers]
    joined = cpu_plan.plan_linear(packs)
    x = rng.standard_normal((3, 16)).astype(np.float32)
    for (w, b), pack, part in zip(layers, packs, joined.parts, strict=True):
        assert np.shares_memory(part.wt, joined.wt)  # a view of the one joined weight, no copy of its own
        got_w, got_b = part.unpack()
        np.testing.assert_array_equal(got_w, w)
        np.testing.assert_array_equal(got_b, b)
        assert_same_result(part.forward(x), pack.forward(x), terms=16)
    assert joined.nbytes == sum(w.nbytes + b.nbytes for w, b in layers)


@pytest.mark.usefixtures("kernel_path")
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_the_epilogue_gives_the_bits_of_the_bias_add_then_the_activation(
    rng: np.random.Generator, activation: str | None
) -> None:
    w, b = _linears(rng, (40,), 24, np.float32)[0]
    pack = pack_linear(w, b)
    x = rng.standard_normal((300, 24)).astype(np.float32)  # 12000 outputs: the pool's size of work too
    planned = cpu_plan.plan_linear([pack], activation).forward(x)
    product = cpu_plan.plan_linear([pack_linear(w, None)], None).forward(x)  # the same GEMM, nothing after it
    expected = ACTIVATIONS[activation](product + b)
    np.testing.assert_array_equal(planned, expected)


def test_the_epilogue_writes_into_the_buffer_it_is_given(rng: np.random.Generator) -> None:
    w, b = _linears(rng, (6,), 5, np.float32)[0]
    out = np.full((4, 6), np.nan, np.float32)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    got = cpu_plan.plan_linear([pack_linear(w, b)], "gelu").forward(x, out=out)
    assert got is out
    assert_same_result(out, gelu(x @ w.T + b), terms=5)


@pytest.mark.usefixtures("blas_road")
def test_a_borrowed_view_is_served_from_the_declared_weight_copying_nothing(rng: np.random.Generator) -> None:
    w, b = _linears(rng, (7,), 9, np.float32)[0]
    planned = cpu_plan.plan_linear([borrow_linear(w, b)], "relu")
    assert planned.nbytes == 0 and planned.parts == ()
    x = rng.standard_normal((3, 9)).astype(np.float32)
    assert_same_result(planned.forward(x), relu(x @ w.T + b), terms=9)


def test_joined_int8_packs_quantize_the_activations_once_and_match_each_layer(rng: np.random.Generator) -> None:
    packs = []
    for w, b in _linears(rng, (8, 12, 12), 32, np.float32):
        q, scale = quantize_per_channel(w)
        packs.append(pack_quantized_linear(q, scale, b))
    assert cpu_plan.fuses(packs)
    joined = cpu_plan.plan_linear(packs)
    x = rng.standard_normal((6, 32)).astype(np.float32)
    expected = np.concatenate([p.forward(x) for p in packs], axis=1)
    np.testing.assert_array_equal(joined.forward(x), expected)  # one quantization of x, the same integers
    for pack, part in zip(packs, joined.parts, strict=True):
        np.testing.assert_array_equal(part.forward(x), pack.forward(x))
        assert np.shares_memory(part.q, joined.pack.q)


@pytest.mark.usefixtures("kernel_path")
@pytest.mark.parametrize("rows", [1, 3, 7])
def test_joined_block_packs_give_each_layers_output_from_one_pass(rng: np.random.Generator, rows: int) -> None:
    """Each layer whole 32-row panels, as a model's q, k and v are: its prefill rows take the same road (the
    float32 tiles where they run) alone and joined, so each output has the same bits."""
    widths = (64, 32, 32)
    layers = [blocks.random_blocks(rng, "Q4_1", n, 64) for n in widths]
    biases = [rng.standard_normal(n).astype(np.float32) for n in widths]
    packs = [blocks.pack_block_linear(w, "Q4_1", 64, b) for w, b in zip(layers, biases, strict=True)]
    assert cpu_plan.fuses(packs)
    joined = cpu_plan.plan_linear(packs, "silu")
    assert joined.out_features == 128 and joined.nbytes == sum(p.nbytes for p in packs)
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    expected = np.concatenate([p.forward(x) for p in packs], axis=1)  # each row dot the same as alone
    np.testing.assert_array_equal(joined.forward(x), silu(expected))
    for pack, part in zip(packs, joined.parts, strict=True):
        np.testing.assert_array_equal(part.forward(x), pack.forward(x))
        assert np.shares_memory(part.blocks, joined.pack.blocks)
        np.testing.assert_array_equal(part.unpack()[0], pack.unpack()[0])


def test_block_packs_of_other_formats_widths_or_borrowed_are_not_joined(rng: np.random.Generator) -> None:
    a, b = (blocks.random_blocks(rng, "Q4_0", 8, 64) for _ in range(2))
    same = [blocks.pack_block_linear(w, "Q4_0", 64) for w in (a, b)]
    assert cpu_plan.fuses(same)
    assert not cpu_plan.fuses([same[0], blocks.pack_block_linear(blocks.random_blocks(rng, "Q8_0", 8, 64), "Q8_0", 64)])
    assert not cpu_plan.fuses([same[0], blocks.pack_block_linear(blocks.random_blocks(rng, "Q4_0", 8, 96), "Q4_0", 96)])
    assert not cpu_plan.fuses([same[0], blocks.pack_block_linear(b, "Q4_0", 64, np.zeros(8, np.float32))])
    assert not cpu_plan.fuses([blocks.borrow_block_linear(w, "Q4_0", 64) for w in (a, b)])  # joining would copy


def test_packs_of_other_kinds_widths_or_dtypes_are_not_joined(rng: np.random.Generator) -> None:
    (w1, b1), (w2, b2) = _linears(rng, (4, 4), 8, np.float32)
    (w3, b3), *_ = _linears(rng, (4,), 6, np.float32)
    q, scale = quantize_per_channel(w2)
    assert not cpu_plan.fuses([pack_linear(w1, b1)])  # one pack: nothing to join
    assert not cpu_plan.fuses([pack_linear(w1, b1), pack_linear(w3, b3)])  # input widths differ
    wide = pack_linear(w2.astype(np.float64), b2.astype(np.float64))
    assert not cpu_plan.fuses([pack_linear(w1, b1), wide])  # dtypes differ
    assert not cpu_plan.fuses([pack_linear(w1, b1), pack_linear(w2, None)])  # a bias on one only
    assert not cpu_plan.fuses([pack_linear(w1, b1), pack_quantized_linear(q, scale, b2)])  # float and int8
    assert not cpu_plan.fuses([borrow_linear(w1, b1), borrow_linear(w2, b2)])  # views: joining would copy
    with pytest.raises(KernelShapeError, match="cannot share one GEMM"):
        cpu_plan.plan_linear([pack_linear(w1, b1), pack_linear(w3, b3)])


def test_a_plan_linear_refuses_an_activation_it_does_not_apply(rng: np.random.Generator) -> None:
    w, b = _linears(rng, (4,), 8, np.float32)[0]
    with pytest.raises(KernelShapeError, match="activation 'tanh' is not one a plan linear applies"):
        cpu_plan.plan_linear([pack_linear(w, b)], "tanh")
    with pytest.raises(KernelShapeError, match="serves linear packs, got a str"):
        cpu_plan.plan_linear(["not a pack"])


@pytest.mark.usefixtures("kernel_path")
@pytest.mark.parametrize("rms", [False, True])
def test_residual_norm_gives_the_bits_of_the_add_then_the_norm(rng: np.random.Generator, rms: bool) -> None:
    x = rng.standard_normal((600, 48)).astype(np.float32)
    residual = rng.standard_normal((600, 48)).astype(np.float32)
    w, b = rng.standard_normal(48).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    total = residual + x
    expected = rms_norm(total, 48, w, 1e-6) if rms else layer_norm(total, 48, w, b, 1e-6)
    out = np.empty_like(x)
    assert cpu_plan.residual_norm(x, residual, w, None if rms else b, 1e-6, out, rms) is out
    np.testing.assert_array_equal(residual, total)  # the residual stream now holds the sum
    np.testing.assert_array_equal(out, expected)


def _attention_case(
    rng: np.random.Generator, batch: int, seq: int, heads: int, dim: int
) -> tuple[np.ndarray, list[np.ndarray]]:
    qkv = rng.standard_normal((batch * seq, 3 * heads * dim)).astype(np.float32)
    split = qkv.reshape(batch, seq, 3, heads, dim)
    return qkv, [np.ascontiguousarray(split[:, :, i].transpose(0, 2, 1, 3)) for i in range(3)]


@pytest.mark.usefixtures("blas_road", "kernel_path")
@pytest.mark.parametrize("masked", [False, True])
def test_self_attention_is_sdpa_over_the_split_heads_written_merged(rng: np.random.Generator, masked: bool) -> None:
    batch, seq, heads, dim = 3, 7, 4, 8
    qkv, (q, k, v) = _attention_case(rng, batch, seq, heads, dim)
    keys = np.ones((batch, seq), bool)
    if masked:
        keys[1, 4:] = False  # right padding
        keys[2, :2] = False  # left padding
    out = np.full((batch * seq, heads * dim), np.nan, np.float32)
    assert cpu_plan.self_attention(qkv, batch, heads, keys if masked else None, None, out) is out
    expected = scaled_dot_product_attention(q, k, v, attn_mask=keys[:, None, None, :])
    merged = expected.transpose(0, 2, 1, 3).reshape(batch * seq, heads * dim)
    assert_same_result(out, merged, terms=seq * dim)


needs_tiles = pytest.mark.skipif(not float_tiles.available(), reason="no AVX-512 here: attention takes the BLAS")


@needs_tiles
@hypothesis_settings(max_examples=30, deadline=None)
@given(
    batch=st.integers(1, 3),
    seq=st.integers(1, 70),
    heads=st.integers(1, 4),
    dim=st.sampled_from([32, 64, 96]),
    seed=st.integers(0, 2**16),
)
def test_self_attention_on_the_panel_tiles_is_sdpa_over_the_split_heads_whatever_the_padding(
    batch: int, seq: int, heads: int, dim: int, seed: int
) -> None:
    """Heads of whole panels take the tiles (each head one task of the pool, its keys padded to whole
    panels of zero keys): sdpa's result, with keys masked at random, a sequence seeing none given zeros."""
    gen = np.random.default_rng(seed)
    qkv, (q, k, v) = _attention_case(gen, batch, seq, heads, dim)
    keys = gen.random((batch, seq)) < 0.8
    keys[0] = True
    out = np.full((batch * seq, heads * dim), np.nan, np.float32)
    assert cpu_plan.self_attention(qkv, batch, heads, keys, None, out) is out
    expected = scaled_dot_product_attention(q, k, v, attn_mask=keys[:, None, None, :])
    merged = np.nan_to_num(expected.transpose(0, 2, 1, 3).reshape(batch * seq, heads * dim), nan=0.0)
    seen = np.repeat(keys.any(axis=1), seq)
    assert_same_result(out[seen], merged[seen], terms=seq * dim)
    np.testing.assert_array_equal(out[~seen], 0.0)


@needs_tiles
@pytest.mark.parametrize("bad", [np.nan, -np.nan, np.inf, -np.inf])
def test_nan_or_infinity_in_a_query_or_key_reaches_the_rows_numpys_road_gives_it_on_the_tiles(
    rng: np.random.Generator, bad: float
) -> None:
    # the scores' max is an integer maximum of ordered bits, and the sum may be reordered: neither may hide a NaN
    qkv, _ = _attention_case(rng, 2, 40, 3, 32)
    qkv[5, 1 * 32 + 7] = bad  # sequence 0, token 5, head 1's query
    qkv[40 + 9, 3 * 32 + 2 * 32 + 4] = bad  # sequence 1, token 9, head 2's key: every query of that head sees it
    out = cpu_plan.self_attention(qkv, 2, 3, None, None, np.empty((80, 96), np.float32))
    with settings.override(numba=False):
        reference = cpu_plan.self_attention(qkv, 2, 3, None, None, np.empty((80, 96), np.float32))
    np.testing.assert_array_equal(np.isnan(out), np.isnan(reference))
    if np.isnan(bad):
        assert np.isnan(out[5, 32:64]).all() and np.isnan(out[40:80, 64:96]).all()
        assert np.isnan(out).sum() == 32 + 40 * 32, "a NaN spreads over its own head's rows only"


@needs_tiles
def test_the_tile_attention_gives_the_same_bits_on_the_pool_and_on_the_calling_thread(
    rng: np.random.Generator,
) -> None:
    qkv, _ = _attention_case(rng, 4, 45, 6, 32)
    keys = np.ones((4, 45), bool)
    keys[2, 30:] = False
    pooled = cpu_plan.self_attention(qkv, 4, 6, keys, None, np.empty((180, 192), np.float32))
    with threads.on_this_thread():
        alone = cpu_plan.self_attention(qkv, 4, 6, keys, None, np.empty((180, 192), np.float32))
    np.testing.assert_array_equal(pooled, alone)
    loops = compiled.module("packrt_kernels_cpu._numba_plan")
    tiles = float_tiles.addresses()
    for twin in (loops.tile_attention, loops.tile_attention_serial):
        out = np.empty((180, 192), np.float32)
        twin(tiles, qkv, keys, 4, 6, np.float32(1 / np.sqrt(32)), out, 2)
        np.testing.assert_array_equal(out, pooled)


@pytest.mark.usefixtures("kernel_path")
def test_a_query_that_may_see_no_key_gets_zeros(rng: np.random.Generator) -> None:
    qkv, _ = _attention_case(rng, 2, 5, 2, 4)
    keys = np.ones((2, 5), bool)
    keys[1] = False  # a sequence that is all padding
    out = np.empty((10, 8), np.float32)
    cpu_plan.self_attention(qkv, 2, 2, keys, 0.5, out)
    np.testing.assert_array_equal(out[5:], 0.0)
    assert np.isfinite(out).all()


def _decode_reference(
    q: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    first: int,
    stop: int,
    seen: np.ndarray | None,
    scale: float,
    cap: float | None,
) -> np.ndarray:
    """One query per head against keys first:stop of its group's key head, in float64: what the decode kernel
    computes (a head that sees no key: zeros)."""
    batch, heads, dim = q.shape
    group = heads // keys.shape[1]
    out = np.zeros((batch, heads * dim))
    for b in range(batch):
        for h in range(heads):
            k, v = keys[b, h // group, first:stop].astype(np.float64), values[b, h // group, first:stop]
            s = k @ q[b, h].astype(np.float64) * scale
            if cap is not None:
                s = cap * np.tanh(s / cap)
            if seen is not None:
                s = np.where(seen[b, first:stop], s, -np.inf)
            if np.isneginf(s).all():
                continue
            p = np.exp(s - s.max())
            out[b, h * dim : (h + 1) * dim] = (p / p.sum()) @ v.astype(np.float64)
    return out


@pytest.mark.parametrize("numba", [True, False], ids=["fused", "numpy"])
@hypothesis_settings(max_examples=30, deadline=None)
@given(
    batch=st.integers(1, 3),
    kv_heads=st.integers(1, 3),
    group=st.integers(1, 4),
    dim=st.sampled_from([1, 8, 64, 80]),
    spare=st.integers(0, 9),
    length=st.integers(1, 40),
    window=st.integers(0, 12),
    masked=st.booleans(),
    cap=st.sampled_from([None, 1.5, 30.0]),
    seed=st.integers(0, 2**16),
)
def test_decode_attention_is_one_querys_softmax_over_the_cached_window(
    numba: bool,
    batch: int,
    kv_heads: int,
    group: int,
    dim: int,
    spare: int,
    length: int,
    window: int,
    masked: bool,
    cap: float | None,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    heads, stop = kv_heads * group, length
    first = max(0, stop - window) if window else 0
    q = rng.standard_normal((batch, heads, dim)).astype(np.float32)
    # the cache's whole buffers: positions past stop hold what a later step would overwrite (never read)
    keys, values = (rng.standard_normal((batch, kv_heads, stop + spare, dim)).astype(np.float32) for _ in range(2))
    keys[:, :, stop:] = values[:, :, stop:] = np.nan
    seen = rng.random((batch, stop)) < 0.7 if masked else None
    out = np.full((batch, heads * dim), np.nan, np.float32)
    scale = 1 / np.sqrt(dim)
    with settings.override(numba=numba):
        got = cpu_plan.decode_attention(q, keys, values, first, stop, seen, scale, cap, out)
    assert got is out
    expected = _decode_reference(q, keys, values, first, stop, seen, scale, cap)
    assert_same_result(out, expected.astype(np.float32), terms=(stop - first) * dim)


@pytest.mark.usefixtures("kernel_path")
def test_a_decode_head_that_may_see_no_key_gets_zeros(rng: np.random.Generator) -> None:
    q = rng.standard_normal((2, 4, 8)).astype(np.float32)
    keys, values = (rng.standard_normal((2, 2, 6, 8)).astype(np.float32) for _ in range(2))
    seen = np.ones((2, 6), bool)
    seen[1, :] = False  # every key of the second sequence is padding
    out = np.full((2, 32), np.nan, np.float32)
    cpu_plan.decode_attention(q, keys, values, 0, 5, seen, 0.5, None, out)
    np.testing.assert_array_equal(out[1], 0.0)
    assert np.isfinite(out[0]).all()
