"""gguf_synthetic.py's file follows llama.cpp's block-type mix and spreads its weights as a trained model's do."""

from __future__ import annotations

import gguf_synthetic as gs
import numpy as np
import pytest


def test_q8_0_puts_every_matrix_in_q8_0_blocks() -> None:
    assert {gs.block_type(n, 3, w, "Q8_0") for n, w in (("attn_q", 896), ("ffn_down", 4864))} == {"Q8_0"}


def test_q4_k_m_keeps_k_quants_where_rows_hold_whole_256_blocks_and_falls_back_as_llama_cpp_does() -> None:
    layers = gs.SHAPE["layers"]
    assert gs.block_type("ffn_up", 5, 896, "Q4_K_M") == "Q5_0"  # Q4_K cannot hold 896-wide rows
    assert gs.block_type("ffn_up", 5, 1024, "Q4_K_M") == "Q4_K"
    assert gs.block_type("token_embd", None, 896, "Q4_K_M") == "Q8_0"  # Q6_K's fallback
    more = [i for i in range(layers) if gs.block_type("ffn_down", i, 4864, "Q4_K_M") == "Q6_K"]
    # llama.cpp's use_more_bits for 24 layers: the first and last eighth (0-2, 21-23) and every third between
    assert more == [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23], more
    assert set(range(layers)) - set(more) == {
        i for i in range(layers) if gs.block_type("ffn_down", i, 4864, "Q4_K_M") == "Q4_K"
    }


@pytest.mark.parametrize("kind", ["Q8_0", "Q5_0", "Q4_K", "Q6_K"])
def test_scaled_blocks_spread_their_weights_like_a_trained_models(kind: str) -> None:
    from packrt_kernels_cpu import blocks

    raw = gs.scaled_blocks(np.random.default_rng(1), kind, 32, 512)
    weights = blocks.dequantize(raw, kind, 512)
    assert np.isfinite(weights).all()
    assert 0.015 < float(weights.std()) < 0.025
