"""The ``granite`` family (IBM Granite 3): llama's decoder with four multipliers.

``embedding_multiplier`` scales the embeddings, ``residual_multiplier`` what each attention and MLP adds to
the residual stream, ``attention_multiplier`` replaces ``1/sqrt(head_dim)`` as the attention's scale, and the
logits are divided by ``logits_scaling``, as transformers' GraniteForCausalLM computes them. The rest is
llama's, over the shared blocks (the options ``embed_scale``, ``residual_scale``, ``scale``, ``logit_scale``).

Parameter names are llama's: ``layers.L.attention.{q,k,v,o}_proj.weight``, ``layers.L.mlp.{gate,up,down}.weight``...
"""

from __future__ import annotations

from packrt import nn
from packrt.models import decoder_blocks as blocks
from packrt.models.config_schema import completed
from packrt.models.hfconfig import HFConfig
from packrt.models.llama import LAYER_ROWS


class GraniteForCausalLM(blocks.RotaryDecoderLM):
    """Granite's causal LM: llama's with its multipliers (see the module docstring)."""

    model_type = "granite"

    def __init__(self, config: HFConfig) -> None:
        config = completed(config)
        super().__init__(config)
        w = blocks.DecoderWidths.read(config)
        self.embed_scale = config.number("embedding_multiplier")
        self.logit_scale = config.number("logits_scaling")
        residual, scale = config.number("residual_multiplier"), config.number("attention_multiplier")
        bias, mlp_bias = config.flag("attention_bias"), config.flag("mlp_bias")
        layers: list[nn.Module] = []
        for index in range(w.layers):
            attention = blocks.RotaryAttention(w, index, bias=bias, scale=scale)
            mlp = blocks.GatedMLP(w.hidden, w.intermediate, nn.SiLU(), bias=mlp_bias)
            layers.append(blocks.PreNormLayer(attention, mlp, w.hidden, w.eps, residual_scale=residual))
        self._declare(config, w, layers)


FAMILY = blocks.decoder_family("granite", GraniteForCausalLM, LAYER_ROWS)

__all__ = ["FAMILY", "GraniteForCausalLM"]
