"""The ``olmo2`` family (Olmo2ForCausalLM): llama's decoder with its norms after the branches, not before.

As transformers' OLMo 2 computes it: each layer is ``x = x + post_attention_norm(attention(x))``, then
``x = x + post_mlp_norm(mlp(x))`` (no norm before the attention or the MLP), and the queries and the keys are
each normed over their full width (all heads together) before they are split into heads and rotated. The rest
is llama's, over the shared blocks (``PreNormLayer(pre_norms=False, post_norms=True)``,
``RotaryAttention(head_norm=..., full_norms=True)``).

Parameter names: llama's attention and MLP, ``layers.L.attention.{q,k}_norm.weight`` (full width),
``layers.L.{post_attention_norm, post_mlp_norm}.weight``.
"""

from __future__ import annotations

from functools import partial

from packrt import nn
from packrt.models import decoder_blocks as blocks
from packrt.models.config_schema import completed
from packrt.models.hfconfig import HFConfig

LAYER_ROWS = (
    ("post_attention_layernorm.weight", "post_attention_norm.weight"),
    ("post_feedforward_layernorm.weight", "post_mlp_norm.weight"),
    *blocks.ATTENTION_ROWS,
    *blocks.HEAD_NORM_ROWS,
    *blocks.GATED_MLP_ROWS,
)


class Olmo2ForCausalLM(blocks.RotaryDecoderLM):
    """OLMo 2's causal LM: llama's with post-norms only and full-width query and key norms (see the module
    docstring)."""

    model_type = "olmo2"

    def __init__(self, config: HFConfig) -> None:
        config = completed(config)
        super().__init__(config)
        w = blocks.DecoderWidths.read(config)
        norm = partial(blocks.FloatRMSNorm, eps=w.eps)
        layers: list[nn.Module] = []
        for index in range(w.layers):
            attention = blocks.RotaryAttention(
                w, index, bias=config.flag("attention_bias"), head_norm=norm, full_norms=True
            )
            mlp = blocks.GatedMLP(w.hidden, w.intermediate, nn.SiLU())
            layers.append(blocks.PreNormLayer(attention, mlp, w.hidden, w.eps, pre_norms=False, post_norms=True))
        self._declare(config, w, layers)


FAMILY = blocks.decoder_family("olmo2", Olmo2ForCausalLM, LAYER_ROWS)

__all__ = ["FAMILY", "LAYER_ROWS", "Olmo2ForCausalLM"]
