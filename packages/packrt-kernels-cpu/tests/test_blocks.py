"""Linears over quantized blocks (llama.cpp's GGML formats): every format holds the weights llama.cpp's own
dequantization gives (the ``gguf`` package's, bit for bit), and a linear over the blocks gives ``x @ W^T + b``
of those weights on both kernel roads, from the row loop (decode) and from dequantized panels (prefill)."""

from __future__ import annotations

import os
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from packrt_base.blocks import BLOCK_FORMATS
from packrt_kernels_cpu import _numba_blocks, block_tiles, blocks, compiled, float_tiles, q8_gemm, threads
from packrt_kernels_cpu import settings as kernel_settings
from packrt_kernels_cpu.errors import KernelDTypeError, KernelIndexError, KernelShapeError
from packrt_kernels_cpu.plan import plan_linear
from packrt_kernels_cpu.tolerance import ROAD_TOLERANCES

try:
    import gguf
except ImportError:
    if os.environ.get("PACKRT_REQUIRE_TORCH") == "1":  # CI installs the test extra, which holds gguf
        raise
    pytest.skip("gguf (llama.cpp's reader, in the test extra) is not installed", allow_module_level=True)

FORMATS = list(BLOCK_FORMATS)
random_blocks = blocks.random_blocks


def test_every_format_says_where_its_scales_are() -> None:
    assert set(blocks.SCALE_OFFSETS) == set(BLOCK_FORMATS)


def gguf_weights(name: str, b: np.ndarray) -> np.ndarray:
    values: np.ndarray = gguf.quants.dequantize(b, gguf.GGMLQuantizationType[name])
    return values.astype(np.float32)


@pytest.mark.parametrize("name", FORMATS)
def test_every_format_holds_the_weights_llama_cpp_dequantizes(rng: np.random.Generator, name: str) -> None:
    b = random_blocks(rng, name, 5, 512)
    np.testing.assert_array_equal(blocks.dequantize(b, name, 512), gguf_weights(name, b))


@pytest.mark.parametrize("name", FORMATS)
def test_the_compiled_dequantization_gives_the_numpy_references_bits(rng: np.random.Generator, name: str) -> None:
    if not compiled.enabled():
        pytest.skip("numba is off here: the numpy reference is the only road")
    b = random_blocks(rng, name, 7, 512)
    out = np.empty((7, 512), np.float32)
    blocks._loops().dequantize_rows_serial(b, blocks.CODES[name], blocks._HALF, out)
    np.testing.assert_array_equal(out, blocks.dequantize(b, name, 512))


def q8_expected(x: np.ndarray, name: str, b: np.ndarray) -> np.ndarray:
    """What the q8 road computes exactly (float64): the activations as their q8 blocks hold them times the
    dequantized weights; for Q4_1 and Q5_1 each block's min times the fp16 ``d * sum`` q8_1 keeps, as llama.cpp
    does."""
    width = x.shape[1]
    q8 = block_tiles.quantize_reference(x).reshape(x.shape[0], -1, block_tiles.Q8_BYTES)
    values = q8[..., :32].view(np.int8).astype(np.float64)
    d16, exact, rounded = (q8[..., at : at + 4].view(np.float32)[..., 0].astype(np.float64) for at in (32, 36, 40))
    expected = (values * d16[..., None]).reshape(x.shape[0], width) @ gguf_weights(name, b).T.astype(np.float64)
    if name in ("Q4_1", "Q5_1"):
        size = BLOCK_FORMATS[name].nbytes
        mins = b.reshape(b.shape[0], -1, size)[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
        expected += (rounded - exact) @ mins.T
    return expected


@pytest.mark.parametrize("rows", [1, 3, blocks.ROW_LOOP_ROWS, blocks.ROW_LOOP_ROWS + 5])
@pytest.mark.parametrize("name", FORMATS)
def test_a_linear_over_blocks_gives_x_times_the_dequantized_weight_plus_bias(
    rng: np.random.Generator, kernel_path: str, name: str, rows: int
) -> None:
    """Decode-sized inputs take the row loop, larger ones the panels; both sum in float32, in their own order.
    Where the q8 road serves (Q4_0, Q4_1, Q8_0 on AVX2), the activations are its int8 blocks."""
    width, out = 512, 40
    b = random_blocks(rng, name, out, width)
    bias = rng.standard_normal(out).astype(np.float32)
    x = rng.standard_normal((rows, width)).astype(np.float32)
    q8_road = rows <= blocks.ROW_LOOP_ROWS and name in block_tiles.FORMATS and block_tiles.available()
    q8_road |= rows > blocks.ROW_LOOP_ROWS and name in q8_gemm.FORMATS and out % 32 == 0 and q8_gemm.available()
    product = q8_expected(x, name, b) if q8_road else x.astype(np.float64) @ gguf_weights(name, b).T.astype(np.float64)
    expected = product + bias
    for pack in (blocks.pack_block_linear(b, name, width, bias), blocks.borrow_block_linear(b, name, width, bias)):
        got = pack.forward(x)
        assert got.dtype == np.float32 and got.shape == (rows, out)
        rtol, atol = ROAD_TOLERANCES["float32"]
        scale = float(np.abs(x).sum(axis=1).max() * np.abs(gguf_weights(name, b)).max())
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol * 10 + 1e-6 * scale)


@pytest.mark.skipif(not float_tiles.available(), reason="no AVX-512 here: prefill rows take the BLAS")
@pytest.mark.parametrize("rows", [blocks.ROW_LOOP_ROWS + 1, 13, 64])
@pytest.mark.parametrize("name", FORMATS)
def test_float_prefill_rows_over_whole_panels_take_the_tiles_with_the_same_bits_on_any_thread_count(
    rng: np.random.Generator, name: str, rows: int
) -> None:
    """Under ``block_prefill="float"``, a weight of whole 32-row panels is dequantized straight into the float32
    tiles' layout, panel run by panel run over the pool: x @ W^T of llama.cpp's weights, each output's bits
    whatever the thread count."""
    width, out = 512, 7 * 32
    b = random_blocks(rng, name, out, width)
    x = rng.standard_normal((rows, width)).astype(np.float32)
    pack = blocks.pack_block_linear(b, name, width)
    with kernel_settings.override(block_prefill="float"):
        pooled = pack.forward(x)
        with threads.on_this_thread():
            np.testing.assert_array_equal(pack.forward(x), pooled)
        fifth = pack.forward(x[: blocks.ROW_LOOP_ROWS + 1])[3]  # the fewest rows the prefill road takes
    expected = x.astype(np.float64) @ gguf_weights(name, b).T.astype(np.float64)
    rtol, atol = ROAD_TOLERANCES["float32"]
    scale = float(np.abs(x).sum(axis=1).max() * np.abs(gguf_weights(name, b)).max())
    np.testing.assert_allclose(pooled, expected, rtol=rtol, atol=atol * 10 + 1e-6 * scale)
    np.testing.assert_array_equal(fifth, pooled[3])  # a row's bits do not depend on the others


@pytest.mark.skipif(not q8_gemm.available(), reason="no AVX512-VNNI here: prefill rows take the float panels")
@pytest.mark.parametrize("rows", [blocks.ROW_LOOP_ROWS + 1, 13, 64])
@pytest.mark.parametrize("name", q8_gemm.FORMATS)
def test_q8_prefill_rows_take_the_vnni_gemm_as_llama_cpp_quantizes_them_the_same_bits_on_any_thread_count(
    rng: np.random.Generator, name: str, rows: int
) -> None:
    """By default a prompt's rows are quantized per block of 32 to int8 and multiplied on the VNNI block GEMM:
    the q8 blocks' values times llama.cpp's weights (Q4_1 and Q5_1's mins through q8_1's fp16 sums), within
    float32 rounding; each output's bits whatever the thread count, and whatever rows share its call."""
    width, out = 512, 7 * 32
    b = random_blocks(rng, name, out, width)
    bias = rng.standard_normal(out).astype(np.float32)
    x = rng.standard_normal((rows, width)).astype(np.float32)
    pack = blocks.pack_block_linear(b, name, width, bias)
    pooled = pack.forward(x)
    with threads.on_this_thread():
        np.testing.assert_array_equal(pack.forward(x), pooled)
    expected = q8_expected(x, name, b) + bias
    scale = float(np.abs(x).sum(axis=1).max() * np.abs(gguf_weights(name, b)).max())
    np.testing.assert_allclose(pooled, expected, rtol=1e-5, atol=1e-6 * scale)
    fewest = blocks.ROW_LOOP_ROWS + 1  # the fewest rows the prefill road takes
    np.testing.assert_array_equal(pack.forward(x[:fewest])[3], pooled[3])  # a row's bits do not depend on the others
    np.testing.assert_array_equal(pack.forward(x[3:4].repeat(fewest, axis=0))[4], pooled[3])  # nor on its tile


@pytest.mark.parametrize("name", block_tiles.FORMATS)
def test_the_vnni_dots_give_the_avx2_dots_bits(rng: np.random.Generator, name: str) -> None:
    vnni, avx2 = block_tiles._compile(vnni=True), block_tiles._compile(vnni=False)
    if vnni is None or avx2 is None:
        pytest.skip("this CPU lacks AVX512-VNNI (or AVX2): one set of dots only")
    width = 512 if name.endswith("_K") else 96
    raw = blocks.random_blocks(rng, name, 40, width)
    x = (rng.standard_normal((3, width)) * rng.uniform(0.01, 30, (3, 1))).astype(np.float32)
    q8 = np.ascontiguousarray(block_tiles.quantize_reference(x))
    at = 2 * block_tiles.FORMATS.index(name)
    outs = []
    for tiles in (vnni, avx2):
        out = np.full((3, 40), np.nan, np.float32)
        _numba_blocks._q8_span(
            np.array([*tiles.addresses[at : at + 2], block_tiles.TILE_ROWS]), q8, raw, width // 32, out, 0, 40
        )
        outs.append(out)
    assert not np.isnan(outs[0]).any()
    np.testing.assert_array_equal(outs[0], outs[1], err_msg=f"{name}: vnni against avx2")


@pytest.mark.skipif(not block_tiles.available(), reason="no q8 dot tiles here (numba off, or no AVX2)")
@pytest.mark.parametrize("name", block_tiles.FORMATS)
def test_the_many_row_dot_tile_gives_each_row_the_one_row_tiles_bits(rng: np.random.Generator, name: str) -> None:
    """A batch of decode rows is one call per TILE_ROWS rows, each weight block unpacked once for them all; each
    row's outputs are still the bits it gets alone (so a sequence decodes the same in any batch)."""
    width, rows = (512 if name.endswith("_K") else 160), 2 * block_tiles.TILE_ROWS + 1
    raw = blocks.random_blocks(rng, name, 24, width)
    x = (rng.standard_normal((rows, width)) * rng.uniform(0.01, 30, (rows, 1))).astype(np.float32)
    q8 = np.ascontiguousarray(block_tiles.quantize_reference(x))
    tiles = block_tiles.addresses(name)
    together = np.full((rows, 30), np.nan, np.float32)[:, 3:27]  # outputs in a wider buffer: rows 120 bytes apart
    _numba_blocks._q8_span(tiles, q8, raw, width // 32, together, 0, 24)
    for i in range(rows):
        alone = np.full((1, 24), np.nan, np.float32)
        _numba_blocks._q8_span(tiles, q8[i : i + 1], raw, width // 32, alone, 0, 24)
        np.testing.assert_array_equal(together[i], alone[0], err_msg=f"{name}: row {i} of {rows}")


@pytest.mark.skipif(not block_tiles.available(), reason="no q8 dot tiles here (numba off, or no AVX2)")
@pytest.mark.parametrize("rows", [1, 3, blocks.ROW_LOOP_ROWS])
def test_parts_of_several_formats_side_by_side_give_each_part_alone_on_the_pool_or_not(
    rng: np.random.Generator, rows: int
) -> None:
    """A layer's q, k and v in different formats run as one call (x quantized once, one parallel region): each
    output column has the bits its part gives alone."""
    width = 256
    names, sizes = ("Q5_0", "Q8_0", "Q4_K", "Q6_K"), (72, 40, 24, 16)  # not multiples of 16: units straddle
    parts = tuple(
        np.ascontiguousarray(random_blocks(rng, n, size, width)) for n, size in zip(names, sizes, strict=True)
    )
    tiles = np.stack([np.zeros(3, np.int64), *(block_tiles.addresses(n) for n in names)])  # first = 1
    x = (rng.standard_normal((rows, width)) * 3).astype(np.float32)
    alone = []
    for part, name in zip(parts, names, strict=True):
        out = np.empty((rows, part.shape[0]), np.float32)
        _numba_blocks.block_q8_rows_serial(x, part, block_tiles.addresses(name), out)
        alone.append(out)
    expected = np.concatenate(alone, axis=1)
    for kernel in (_numba_blocks.block_q8_parts, _numba_blocks.block_q8_parts_serial):
        together = np.full((rows, sum(sizes)), np.nan, np.float32)
        kernel(x, parts, tiles, 1, together)
        np.testing.assert_array_equal(together, expected)


@pytest.mark.skipif(not block_tiles.available(), reason="no q8 dot tiles here (numba off, or no AVX2)")
@pytest.mark.parametrize("rows", [1, 5])
def test_the_decode_steps_parts_with_biases_give_each_packs_forward_bits(rng: np.random.Generator, rows: int) -> None:
    """The one-call decode step's q, k, v in three formats, each with its bias: the bits each pack's forward gives."""
    loops = compiled.module("packrt_kernels_cpu._numba_decode")
    names, sizes, width = ("Q5_0", "Q8_0", "Q4_K"), (40, 24, 72), 256
    parts = tuple(np.ascontiguousarray(random_blocks(rng, n, s, width)) for n, s in zip(names, sizes, strict=True))
    tiles = np.stack([block_tiles.addresses(n) for n in names])
    biases = tuple(rng.standard_normal(s).astype(np.float32) for s in sizes)
    x = rng.standard_normal((rows, width)).astype(np.float32)
    packs = (blocks.pack_block_linear(p, n, width, b) for p, n, b in zip(parts, names, biases, strict=True))
    expected = np.concatenate([pack.forward(x) for pack in packs], axis=1)
    for pool in (True, False):
        out = np.full((rows, sum(sizes)), np.nan, np.float32)
        loops._parts(pool, 0, x, parts, tiles, 0, biases, out)
        np.testing.assert_array_equal(out, expected, err_msg=f"pool={pool}")


@pytest.mark.parametrize("name", block_tiles.FORMATS)
def test_where_the_q8_dots_cannot_serve_the_float_row_loop_gives_the_float_product(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A CPU without AVX2 (or the tiles not compiled) multiplies decode rows in float32 from the blocks."""
    if not compiled.enabled():
        pytest.skip("numba is off here: the panels are the only road")
    monkeypatch.setattr(block_tiles, "available", lambda: False)
    b = random_blocks(rng, name, 40, 512)
    x = rng.standard_normal((2, 512)).astype(np.float32)
    expected = x.astype(np.float64) @ gguf_weights(name, b).T.astype(np.float64)
    rtol, atol = ROAD_TOLERANCES["float32"]
    np.testing.assert_allclose(blocks.pack_block_linear(b, name, 512).forward(x), expected, rtol=rtol, atol=atol * 10)


def test_q8_activations_are_llama_cpps_and_the_compiled_ones_give_the_references_bits(
    rng: np.random.Generator,
) -> None:
    x = (rng.standard_normal((3, 256)) * np.logspace(-9, 3, 256)).astype(np.float32)
    x[0, :32] = 0  # a block of zeros: scale 0, values 0
    q8 = block_tiles.quantize_reference(x).reshape(3, -1, block_tiles.Q8_BYTES)
    values, d16 = q8[..., :32].view(np.int8), q8[..., 32:36].view(np.float32)[..., 0]
    amax = np.abs(x.reshape(3, -1, 32)).max(axis=2)
    np.testing.assert_array_equal(d16, (amax / np.float32(127)).astype(np.float16).astype(np.float32))
    assert (np.abs(values.astype(np.int32)).max(axis=2) == np.where(amax > 0, 127, 0)).all()
    assert (values[0, 0] == 0).all() and d16[0, 0] == 0
    if compiled.enabled():
        compiled_rows = np.empty((3, 8 * block_tiles.Q8_BYTES), np.uint8)
        blocks._loops().quantize_q8(x, compiled_rows)
        np.testing.assert_array_equal(compiled_rows, q8.reshape(3, -1))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
def test_the_output_has_the_inputs_dtype_and_leading_shape(rng: np.random.Generator, dtype: Any) -> None:
    b = random_blocks(rng, "Q4_1", 8, 64)
    x = rng.standard_normal((2, 3, 64)).astype(dtype)
    got = blocks.pack_block_linear(b, "Q4_1", 64).forward(x)
    assert got.dtype == np.dtype(dtype) and got.shape == (2, 3, 8)
    flat = x.reshape(6, 64)
    if np.dtype(dtype) != np.float64 and block_tiles.available():  # half inputs multiply as float32: q8 road
        expected = q8_expected(flat.astype(np.float32), "Q4_1", b).reshape(2, 3, 8)
    else:
        expected = (flat.astype(np.float64) @ gguf_weights("Q4_1", b).T.astype(np.float64)).reshape(2, 3, 8)
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=ROAD_TOLERANCES[np.dtype(dtype).name][0] * 4)


def test_an_owned_pack_holds_a_copy_and_gives_it_back_a_borrowed_one_holds_nothing(rng: np.random.Generator) -> None:
    b = random_blocks(rng, "Q8_0", 6, 64)
    bias = rng.standard_normal(6).astype(np.float32)
    owned = blocks.pack_block_linear(b, "Q8_0", 64, bias)
    assert owned.nbytes == b.nbytes + bias.nbytes and not np.shares_memory(owned.blocks, b)
    again, again_bias = owned.unpack()
    np.testing.assert_array_equal(again, b)
    np.testing.assert_array_equal(again_bias, bias)
    borrowed = blocks.borrow_block_linear(b, "Q8_0", 64, bias)
    assert borrowed.nbytes == 0 and np.shares_memory(borrowed.blocks, b)


def test_a_tied_table_packed_as_an_embedding_and_as_a_head_is_copied_once(rng: np.random.Generator) -> None:
    table = random_blocks(rng, "Q8_0", 40, 64)
    embedding = blocks.pack_block_embedding(table, "Q8_0", 64)
    head = blocks.pack_block_linear(table, "Q8_0", 64)
    assert head.blocks is embedding.blocks and not np.shares_memory(head.blocks, table)
    assert embedding.nbytes == table.nbytes and head.nbytes == 0, "the shared copy is counted once, by the first"
    np.testing.assert_array_equal(head.unpack()[0], table)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_array_equal(head.forward(x), blocks.pack_block_linear(table.copy(), "Q8_0", 64).forward(x))


def test_a_table_whose_bytes_changed_since_the_first_pack_gets_a_copy_of_its_own(rng: np.random.Generator) -> None:
    table = random_blocks(rng, "Q8_0", 8, 64)
    first = blocks.pack_block_embedding(table, "Q8_0", 64)
    table[0, 5] ^= 0xFF  # an edit through the source after the first pack: the first keeps what it read
    second = blocks.pack_block_linear(table, "Q8_0", 64)
    assert second.blocks is not first.blocks and second.nbytes == table.nbytes
    np.testing.assert_array_equal(second.unpack()[0], table)
    assert first.unpack()[0, 5] != table[0, 5]


def test_once_the_first_pack_is_gone_a_new_pack_copies_and_counts_its_blocks(rng: np.random.Generator) -> None:
    table = random_blocks(rng, "Q4_0", 8, 64)
    first = blocks.pack_block_linear(table, "Q4_0", 64)
    del first
    again = blocks.pack_block_linear(table, "Q4_0", 64)
    assert again.nbytes == table.nbytes and not again.shared


def test_a_plan_linear_over_blocks_applies_its_activation_to_the_pack_output(rng: np.random.Generator) -> None:
    b = random_blocks(rng, "Q4_K", 16, 256)
    pack = blocks.pack_block_linear(b, "Q4_K", 256)
    x = rng.standard_normal((2, 256)).astype(np.float32)
    planned = plan_linear([pack], "relu")
    assert planned.nbytes == 0 and planned.out_features == 16
    np.testing.assert_array_equal(planned.forward(x), np.maximum(pack.forward(x), 0))


def test_blocks_of_another_format_dtype_or_width_are_refused_naming_what_differs(rng: np.random.Generator) -> None:
    b = random_blocks(rng, "Q4_0", 4, 64)
    with pytest.raises(KernelShapeError, match=r"block format 'Q3_K' is not one these kernels serve; known: Q8_0"):
        blocks.pack_block_linear(b, "Q3_K", 64)
    with pytest.raises(KernelDTypeError, match=r"Q4_0 blocks must be a uint8 numpy array, got ndarray of int8"):
        blocks.pack_block_linear(b.view(np.int8), "Q4_0", 64)
    with pytest.raises(
        KernelShapeError, match=r"rows of 96 weights must have shape \(out_features, 54\), got \(4, 36\)"
    ):
        blocks.borrow_block_linear(b, "Q4_0", 96)
    with pytest.raises(KernelShapeError, match=r"a row of 48 weights does not fit: in_features must be a positive"):
        blocks.pack_block_linear(b, "Q4_0", 48)
    with pytest.raises(KernelShapeError, match=r"bias must be a numpy array of shape \(4,\), got \(5,\)"):
        blocks.pack_block_linear(b, "Q4_0", 64, np.zeros(5, np.float32))


@pytest.mark.parametrize("name", FORMATS)
def test_an_embedding_over_blocks_gives_the_rows_its_ids_pick(
    rng: np.random.Generator, kernel_path: str, name: str
) -> None:
    b = random_blocks(rng, name, 12, 256)
    ids = np.array([[3, 0, 11], [3, 7, 5]], np.int64)
    for pack in (blocks.pack_block_embedding(b, name, 256), blocks.borrow_block_embedding(b, name, 256)):
        got = pack.forward(ids)
        assert got.dtype == np.float32 and got.shape == (2, 3, 256)
        np.testing.assert_array_equal(got, gguf_weights(name, b)[ids])
    owned, borrowed = blocks.pack_block_embedding(b, name, 256), blocks.borrow_block_embedding(b, name, 256)
    assert owned.nbytes == b.nbytes and borrowed.nbytes == 0 and np.shares_memory(borrowed.blocks, b)
    np.testing.assert_array_equal(owned.unpack(), b)


def test_an_id_outside_the_block_table_is_refused_naming_it(rng: np.random.Generator) -> None:
    pack = blocks.pack_block_embedding(random_blocks(rng, "Q8_0", 4, 32), "Q8_0", 32)
    with pytest.raises(KernelIndexError, match=r"embedding id 4 is outside the table of 4 rows \(ids must lie in"):
        pack.forward(np.array([0, 4]))
    with pytest.raises(KernelIndexError, match=r"embedding id -1 is outside the table of 4 rows"):
        pack.forward(np.array([-1]))
