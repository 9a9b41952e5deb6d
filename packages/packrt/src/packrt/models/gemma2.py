"""The ``gemma2`` family (Gemma2ForCausalLM): Gemma 2's decoder, options over the shared blocks.

As Gemma 3's text model (:mod:`packrt.models.gemma3`: the embedding times ``sqrt(hidden_size)``, Gemma's
``1 + weight`` RMSNorm in float32, sandwich norms, a tanh-GELU gated MLP, scores scaled by
``query_pre_attn_scalar ** -0.5``, soft-capped logits), with what Gemma 2 does differently:

- the attention's scores are soft-capped, ``cap * tanh(scores / cap)`` with ``attn_logit_softcapping``
  (default 50), before the mask, as transformers' eager attention computes them;
- no per-head query and key norms, and one rotary table (``rope_theta``, default 1e4) for every layer;
- without ``layer_types``, local (sliding, ``sliding_window``) and global layers alternate, local first.

Parameter names are Gemma 3's without ``q_norm`` / ``k_norm``.
"""

from __future__ import annotations

import math

import numpy as np

from packrt import nn
from packrt.models.config_schema import completed
from packrt.models.decoder_blocks import (
    ATTENTION_ROWS,
    GATED_MLP_ROWS,
    DecoderWidths,
    GatedMLP,
    PreNormLayer,
    RotaryAttention,
    RotaryDecoderLM,
    decoder_family,
)
from packrt.models.gemma3 import LAYER_ROWS as GEMMA3_ROWS
from packrt.models.gemma3 import OffsetRMSNorm
from packrt.models.hfconfig import HFConfig

LAYER_ROWS = (*GEMMA3_ROWS[:4], *ATTENTION_ROWS, *GATED_MLP_ROWS)  # Gemma 3's norms, no head norms


class Gemma2ForCausalLM(RotaryDecoderLM):
    """Gemma 2's LM: Gemma 3's text model with soft-capped attention scores and one rotary table (see the module
    docstring)."""

    model_type = "gemma2"

    def __init__(self, config: HFConfig) -> None:
        config = completed(config)
        super().__init__(config)
        w = DecoderWidths.read(config)
        kinds = config.get("layer_types") or [
            "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(w.layers)
        ]
        window, cap = config.optional_int("sliding_window"), config.get("attn_logit_softcapping")
        layers: list[nn.Module] = []
        for index, kind in enumerate(kinds):
            attention = RotaryAttention(
                w,
                index,
                bias=config.flag("attention_bias"),
                window=window if kind == "sliding_attention" else None,
                scale=config.number("query_pre_attn_scalar") ** -0.5,
                softcap=None if cap is None else float(cap),
            )
            mlp = GatedMLP(w.hidden, w.intermediate, nn.GELU(approximate="tanh"))
            layers.append(PreNormLayer(attention, mlp, w.hidden, w.eps, norm=OffsetRMSNorm, post_norms=True))
        self.embed_scale = float(np.float32(math.sqrt(w.hidden)))  # rounded as transformers' float32 tensor
        final = config.get("final_logit_softcapping")
        self.logit_softcap = None if final is None else float(final)
        self._declare(config, w, layers, norm=OffsetRMSNorm(w.hidden, w.eps))


FAMILY = decoder_family("gemma2", Gemma2ForCausalLM, LAYER_ROWS)

__all__ = ["FAMILY", "LAYER_ROWS", "Gemma2ForCausalLM"]
