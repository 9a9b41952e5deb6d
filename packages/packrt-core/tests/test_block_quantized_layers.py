"""BlockQuantizedLinear and BlockQuantizedEmbedding: a layer over quantized blocks serves the weights its blocks
hold in every residency,
keeps its blocks as bytes (the casts and float checkpoints that would change them are refused, nothing changed),
and says what it needs of its format, width and device.

The blocks here are Q8_0, written by hand: each 32 weights are one fp16 scale ``d`` and 32 int8 quants ``q``,
weight = d * q, so the expected weights are known without llama.cpp's reader (packrt-kernels-cpu's tests check
every format against it)."""

from __future__ import annotations

import numpy as np
import pytest

import packrt_core as prt
from packrt_core.errors import DTypeError, IndexingError, ShapeError, StateDictError
from packrt_core.nn.blocks import BlockQuantizedEmbedding, BlockQuantizedLinear
from packrt_core.nn.containers import Sequential
from packrt_core.nn.linear import Linear
from packrt_kernels_cpu.tolerance import ROAD_TOLERANCES

RESIDENCIES = ("packed", "borrowed", "auto", "per_call")


def q8_0(rng: np.random.Generator, rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(blocks uint8 (rows, width / 32 * 34), the float32 weights they hold)."""
    d = rng.uniform(0.001, 0.01, (rows, width // 32)).astype(np.float16)
    q = rng.integers(-127, 128, (rows, width // 32, 32)).astype(np.int8)
    raw = np.concatenate([d.view(np.uint8).reshape(rows, -1, 2), q.view(np.uint8)], axis=2)
    weights = (d.astype(np.float32)[..., None] * q.astype(np.float32)).reshape(rows, width)
    return np.ascontiguousarray(raw.reshape(rows, -1)), weights


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def loaded(rng: np.random.Generator, residency: str = "packed") -> tuple[BlockQuantizedLinear, np.ndarray, np.ndarray]:
    blocks, weights = q8_0(rng, 24, 64)
    bias = rng.standard_normal(24).astype(np.float32)
    layer = BlockQuantizedLinear(64, 24, "Q8_0", weight_residency=residency)
    layer.load_state_dict({"weight": prt.from_numpy(blocks), "bias": prt.from_numpy(bias)})
    return layer, weights, bias


def activation_rounding(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The most int8 activations move each output: half a step (max |x| of the block / 127, its scale kept in
    fp16: 0.1% more) times the block's absolute weights, summed over blocks; (rows, out)."""
    steps = np.abs(x.reshape(x.shape[0], -1, 32)).max(axis=2) / 127 * 1.001 / 2
    return steps @ np.abs(weights.reshape(weights.shape[0], -1, 32)).sum(axis=2).T


@pytest.mark.parametrize("residency", RESIDENCIES)
def test_each_residency_serves_x_times_the_weights_the_blocks_hold(rng: np.random.Generator, residency: str) -> None:
    layer, weights, bias = loaded(rng, residency)
    for rows in (1, 2, 9):
        x = rng.standard_normal((rows, 64)).astype(np.float32)
        got = layer(prt.from_numpy(x)).numpy().astype(np.float64)
        expected = x.astype(np.float64) @ weights.T.astype(np.float64) + bias
        rtol, atol = ROAD_TOLERANCES["float32"]
        bound = atol * 10 + rtol * 10 * np.abs(expected)
        if rows <= 4:  # decode rows may take int8 activations (llama.cpp's q8, documented)
            bound = bound + activation_rounding(x, weights)
        assert (np.abs(got - expected) <= bound).all(), f"{rows} rows: {np.abs(got - expected).max():.2e} off"
    assert layer.residency_decision in ("packed", "borrowed", "per_call")


def test_a_fresh_layer_holds_zero_blocks_and_says_its_format(rng: np.random.Generator) -> None:
    layer = BlockQuantizedLinear(64, 8, "Q4_0", bias=False)
    assert layer.weight.dtype is prt.uint8 and tuple(layer.weight.shape) == (8, 2 * 18) and layer.bias is None
    assert repr(layer) == "BlockQuantizedLinear(in_features=64, out_features=8, bias=False, block_format='Q4_0')"
    out = layer(prt.from_numpy(rng.standard_normal((3, 64)).astype(np.float32)))
    np.testing.assert_array_equal(out.numpy(), np.zeros((3, 8), np.float32))
    with prt.meta_init():
        meta = BlockQuantizedLinear(512, 4, "Q6_K")
    assert tuple(meta.weight.shape) == (4, 2 * 210) and not meta.weight.has_storage


def test_the_output_has_the_inputs_floating_dtype(rng: np.random.Generator) -> None:
    layer, weights, bias = loaded(rng)
    x = rng.standard_normal((2, 3, 64)).astype(np.float16)
    got = layer(prt.from_numpy(x))
    assert got.dtype is prt.float16 and tuple(got.shape) == (2, 3, 24)
    flat = x.reshape(6, 64).astype(np.float32)
    expected = flat @ weights.T + bias
    # a few rows take the q8 road (activations rounded to int8 per block of 32), and the output is rounded to fp16
    bound = activation_rounding(flat, weights) + 2e-3 * np.abs(expected) + 2e-3
    assert (np.abs(got.numpy().astype(np.float32).reshape(6, 24) - expected) <= bound).all()


def test_packed_blocks_are_one_owned_copy_and_borrowed_ones_are_the_bound_array(rng: np.random.Generator) -> None:
    packed, _, _ = loaded(rng, "packed")
    packed(prt.from_numpy(np.zeros((1, 64), np.float32)))
    assert packed.is_packed and packed.resident_pack_bytes == 24 * 2 * 34 + 24 * 4
    borrowed, _, _ = loaded(rng, "borrowed")
    borrowed(prt.from_numpy(np.zeros((1, 64), np.float32)))
    assert not borrowed.is_packed and borrowed.resident_pack_bytes == 0


def test_a_cast_of_a_tree_holding_blocks_is_refused_and_changes_nothing(rng: np.random.Generator) -> None:
    layer, _, _ = loaded(rng)
    tree = Sequential(Linear(64, 64), layer)
    for cast in (lambda: tree.half(), lambda: tree.to(prt.bfloat16), lambda: tree.double()):
        with pytest.raises(DTypeError, match=r"1 \(BlockQuantizedLinear\): Q8_0 blocks cannot change dtype.*nothing"):
            cast()
    assert tree[0].weight.dtype is prt.float32 and layer.weight.dtype is prt.uint8


def test_a_float_weight_is_refused_by_load_state_dict_naming_the_key(rng: np.random.Generator) -> None:
    layer, _, _ = loaded(rng)
    before = layer.weight.numpy().copy()
    with pytest.raises(StateDictError, match=r"weight: BlockQuantizedLinear \(Q8_0\) expects its uint8 blocks, the "):
        layer.load_state_dict({"weight": prt.zeros(24, 68), "bias": prt.zeros(24)})
    np.testing.assert_array_equal(layer.weight.numpy(), before)
    with pytest.raises(StateDictError, match=r"bias: BlockQuantizedLinear expects float32, the checkpoint has float16"):
        layer.load_state_dict({"weight": layer.weight, "bias": prt.zeros(24, dtype=prt.float16)}, assign=True)


def test_an_unknown_format_or_a_width_that_is_not_whole_blocks_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"block_format 'Q3_K' is not one packrt serves as blocks; pick one of Q8_0"):
        BlockQuantizedLinear(256, 4, "Q3_K")
    with pytest.raises(ValueError, match=r"Q4_K stores weights in blocks of 256, so a row of 64 weights does not fit"):
        BlockQuantizedLinear(64, 4, "Q4_K")


def test_input_of_another_width_or_an_integer_dtype_is_refused(rng: np.random.Generator) -> None:
    layer, _, _ = loaded(rng)
    with pytest.raises(ShapeError, match=r"BlockQuantizedLinear expects input \(\.\.\., 64\), got shape \(2, 32\)"):
        layer(prt.zeros(2, 32))
    with pytest.raises(DTypeError, match=r"BlockQuantizedLinear takes floating-point input, got int64"):
        layer(prt.zeros(2, 64, dtype=prt.int64))


@pytest.mark.parametrize("residency", RESIDENCIES)
def test_an_embedding_over_blocks_gives_the_rows_of_the_weights_they_hold(
    rng: np.random.Generator, residency: str
) -> None:
    blocks, weights = q8_0(rng, 10, 64)
    table = BlockQuantizedEmbedding(10, 64, "Q8_0", weight_residency=residency)
    assert repr(table) == "BlockQuantizedEmbedding(10, 64, block_format='Q8_0')"
    table.load_state_dict({"weight": prt.from_numpy(blocks)})
    ids = np.array([[9, 0], [4, 4]], np.int64)
    got = table(prt.from_numpy(ids))
    assert got.dtype is prt.float32 and tuple(got.shape) == (2, 2, 64)
    np.testing.assert_array_equal(got.numpy(), weights[ids])


def test_an_embedding_over_blocks_refuses_float_ids_ids_outside_it_float_tables_and_casts(
    rng: np.random.Generator,
) -> None:
    table = BlockQuantizedEmbedding(10, 64, "Q8_0")
    with pytest.raises(
        DTypeError, match=r"BlockQuantizedEmbedding takes integer ids \(int64, int32, \.\.\.\), got float32"
    ):
        table(prt.zeros(3))
    with pytest.raises(IndexingError, match=r"10"):
        table(prt.tensor([10]))
    with pytest.raises(StateDictError, match=r"weight: BlockQuantizedEmbedding \(Q8_0\) expects its uint8 blocks"):
        table.load_state_dict({"weight": prt.zeros(10, 68)})
    with pytest.raises(DTypeError, match=r"<root> \(BlockQuantizedEmbedding\): Q8_0 blocks cannot change dtype"):
        table.half()
    with pytest.raises(ValueError, match=r"BlockQuantizedEmbedding: Q6_K stores weights in blocks of 256"):
        BlockQuantizedEmbedding(10, 64, "Q6_K")
