"""The panel GEMM (packrt_kernels_cpu.float_tiles): what a packed float32 linear multiplies with on an
AVX-512 CPU, and a bfloat16 one on a CPU with AVX512-BF16. float32 products are the BLAS's within float32
rounding; bfloat16 ones are the pairwise float32 sums of bfloat16 products bit for bit (bf16_pairs.py).
Each output row's bits depend on nothing but that row, and a pack gives back the weight it was made from
bit for bit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from bf16_pairs import BF16, pair_sums
from hypothesis import given, settings
from hypothesis import strategies as st

from packrt_kernels_cpu import float_tiles, pack_linear, plan, threads
from packrt_kernels_cpu.errors import KernelShapeError
from packrt_kernels_cpu.packing import PackedLinear, PanelLinear

needs_tiles = pytest.mark.skipif(not float_tiles.available(), reason="no AVX-512 here (or numba or OpenBLAS off)")


def _operands(m: int, k: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)


def _bound(x: np.ndarray, w: np.ndarray) -> float:
    """How far a float32 sum of K products may land from the exact one (a few ulps of |x| @ |w|^T)."""
    return float((np.abs(x).astype(np.float64) @ np.abs(w).T.astype(np.float64)).max()) * 4e-6


@needs_tiles
@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 21), k=st.integers(1, 300), panels=st.integers(1, 7), seed=st.integers(0, 2**16))
def test_the_panel_gemm_is_the_exact_product_within_float32_rounding_at_every_tile_edge(
    m: int, k: int, panels: int, seed: int
) -> None:
    x, w = _operands(m, k, 32 * panels, seed)
    got = float_tiles.gemm(x, float_tiles.pack(w))
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    assert got.shape == (m, 32 * panels) and got.dtype == np.float32
    assert float(np.abs(got - exact).max()) <= _bound(x, w)


@needs_tiles
def test_each_output_row_has_the_same_bits_alone_in_a_batch_and_on_any_thread_count(
    use_settings: Callable[..., Any],
) -> None:
    x, w = _operands(37, 384, 1536)  # past the one-thread bound: the pool computes the panels
    panels = float_tiles.pack(w)
    batched = float_tiles.gemm(x, panels)
    for row in (0, 8, 36):  # alone, a row is computed by the tiles four panels wide
        np.testing.assert_array_equal(float_tiles.gemm(x[row : row + 1], panels)[0], batched[row])
    np.testing.assert_array_equal(float_tiles.gemm(x[3:5], panels), batched[3:5])  # two rows: two panels wide
    with threads.on_this_thread():
        np.testing.assert_array_equal(float_tiles.gemm(x, panels), batched)


def test_the_pack_gives_back_the_weight_bit_for_bit_and_its_panels_are_weights_too() -> None:
    _, w = _operands(1, 70, 96)
    panels = float_tiles.pack(w)
    assert panels.data.shape == (3, 70, 32) and panels.data.flags.c_contiguous
    assert (panels.out_features, panels.in_features, panels.nbytes) == (96, 70, w.nbytes)
    np.testing.assert_array_equal(panels.weight(), w)
    np.testing.assert_array_equal(float_tiles.FloatPanels(panels.data[1:2]).weight(), w[32:64])


def test_without_the_tiles_the_panels_are_multiplied_by_the_blas(use_settings: Callable[..., Any]) -> None:
    x, w = _operands(5, 64, 64)
    panels = float_tiles.pack(w)
    use_settings(numba=False)  # a pack made with the tiles, served after PACKRT_NUMBA=0
    out = np.full((5, 64), np.nan, np.float32)
    assert float_tiles.gemm(x, panels, out) is out
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-5)


@needs_tiles
def test_a_float32_linear_of_whole_panels_packs_as_panels_and_serves_as_linear_does() -> None:
    x, w = _operands(6, 48, 64)
    b = np.linspace(-1, 1, 64, dtype=np.float32)
    packed = pack_linear(w, b)
    assert isinstance(packed, PanelLinear) and packed.nbytes == w.nbytes + b.nbytes
    np.testing.assert_allclose(packed.forward(x.reshape(2, 3, 48)), (x @ w.T + b).reshape(2, 3, 64), atol=1e-5)
    w2, b2 = packed.unpack()
    np.testing.assert_array_equal(w2, w)
    np.testing.assert_array_equal(b2, b)
    assert isinstance(pack_linear(w[:50]), PackedLinear)  # 50 columns: not whole panels, W^T as before
    with pytest.raises(KernelShapeError, match=r"input of shape \(6, 47\) does not end in in_features=48"):
        packed.forward(x[:, :47])


@needs_tiles
def test_the_plan_joins_panel_packs_into_one_weight_whose_parts_are_views_and_agree_bit_for_bit() -> None:
    x, w = _operands(9, 64, 96)
    packs = [pack_linear(w[:32]), pack_linear(w[32:])]
    joined = plan.plan_linear(packs)
    assert joined.nbytes == w.nbytes
    parts = [part.panels.data for part in joined.parts]
    assert parts[0].base is parts[1].base is not None
    whole = joined.forward(x)
    np.testing.assert_array_equal(whole[:, :32], joined.parts[0].forward(x))
    np.testing.assert_array_equal(whole[:, 32:], joined.parts[1].forward(x))


# -- bfloat16 panels: pairs of inputs, one vdpbf16ps per pair (AVX512-BF16) --------------------------------

needs_bf16_tiles = pytest.mark.skipif(
    not float_tiles.available(BF16), reason="no AVX512-BF16 here (or numba or OpenBLAS off)"
)


@needs_bf16_tiles
@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 21), pairs=st.integers(1, 150), panels=st.integers(1, 7), seed=st.integers(0, 2**16))
def test_bfloat16_panels_give_the_pairwise_float32_sums_of_the_rounded_inputs_bit_for_bit(
    m: int, pairs: int, panels: int, seed: int
) -> None:
    x, w = _operands(m, 2 * pairs, 32 * panels, seed)
    got = float_tiles.gemm(x, float_tiles.pack(w, BF16))
    assert got.shape == (m, 32 * panels) and got.dtype == np.float32
    np.testing.assert_array_equal(got, pair_sums(x, w.astype(BF16)))


@needs_bf16_tiles
def test_bfloat16_panels_take_bfloat16_activations_as_they_are_and_float32_ones_rounded() -> None:
    x, w = _operands(5, 96, 64)
    panels = float_tiles.pack(w, BF16)
    np.testing.assert_array_equal(float_tiles.gemm(x.astype(BF16), panels), float_tiles.gemm(x, panels))


@needs_bf16_tiles
def test_each_bfloat16_output_row_has_the_same_bits_alone_in_a_batch_and_on_any_thread_count() -> None:
    x, w = _operands(37, 384, 1536)
    panels = float_tiles.pack(w, BF16)
    batched = float_tiles.gemm(x, panels)
    for row in (0, 8, 36):
        np.testing.assert_array_equal(float_tiles.gemm(x[row : row + 1], panels)[0], batched[row])
    np.testing.assert_array_equal(float_tiles.gemm(x[3:5], panels), batched[3:5])
    with threads.on_this_thread():
        np.testing.assert_array_equal(float_tiles.gemm(x, panels), batched)


def test_a_bfloat16_pack_holds_the_declared_bytes_and_gives_back_the_weight_bit_for_bit() -> None:
    _, w = _operands(1, 70, 96)
    wb = w.astype(BF16)
    panels = float_tiles.pack(wb, BF16)
    assert panels.data.shape == (3, 35, 32, 2) and panels.data.flags.c_contiguous and panels.dtype == BF16
    assert (panels.out_features, panels.in_features, panels.nbytes) == (96, 70, wb.nbytes)
    np.testing.assert_array_equal(panels.weight(), wb)
    np.testing.assert_array_equal(float_tiles.FloatPanels(panels.data[1:2]).weight(), wb[32:64])
    np.testing.assert_array_equal(float_tiles.pack(w, BF16).weight(), wb)  # a float32 w: rounded to nearest even


def test_without_the_bfloat16_tiles_the_panels_multiply_the_rounded_inputs_by_the_blas(
    use_settings: Callable[..., Any],
) -> None:
    x, w = _operands(5, 64, 64)
    panels = float_tiles.pack(w, BF16)
    use_settings(numba=False)
    out = np.full((5, 64), np.nan, np.float32)
    assert float_tiles.gemm(x, panels, out) is out
    rounded = x.astype(BF16).astype(np.float32) @ w.astype(BF16).astype(np.float32).T
    np.testing.assert_allclose(out, rounded, rtol=1e-5, atol=1e-5)


@needs_bf16_tiles
def test_a_bfloat16_linear_of_whole_panels_and_even_inputs_packs_as_bfloat16_panels() -> None:
    x, w = _operands(6, 48, 64)
    wb, b = w.astype(BF16), np.linspace(-1, 1, 64, dtype=np.float32).astype(BF16)
    packed = pack_linear(wb, b)
    assert isinstance(packed, PanelLinear) and packed.panels.dtype == BF16
    assert packed.nbytes == wb.nbytes + 4 * 64  # the declared weight's bytes; the bias widened to float32
    got = packed.forward(x.astype(BF16).reshape(2, 3, 48))
    assert got.dtype == BF16
    want = (pair_sums(x, wb) + b.astype(np.float32)).astype(BF16)
    np.testing.assert_array_equal(got.reshape(6, 64), want)
    w2, b2 = packed.unpack()
    np.testing.assert_array_equal(w2, wb)
    np.testing.assert_array_equal(b2, b)
    odd = pack_linear(np.ascontiguousarray(wb[:, :47]))  # an odd input count: float32 panels, as before
    assert isinstance(odd, PanelLinear) and odd.panels.dtype == np.float32


@needs_bf16_tiles
def test_the_plan_joins_bfloat16_panels_but_never_with_float32_ones() -> None:
    x, w = _operands(9, 64, 96)
    wb = w.astype(BF16)
    joined = plan.plan_linear([pack_linear(wb[:32]), pack_linear(wb[32:])])
    assert joined.nbytes == wb.nbytes and joined.panels is not None and joined.panels.dtype == BF16
    whole = joined.forward(x)
    np.testing.assert_array_equal(whole, pair_sums(x, wb))
    np.testing.assert_array_equal(whole[:, 32:].astype(BF16), joined.parts[1].forward(x))  # a part: bfloat16 out
    assert not plan.fuses([pack_linear(wb[:32]), pack_linear(w[32:64])])
