"""The ``qwen3`` family: llama's decoder with an RMSNorm over each query head and each key head.

Each layer is pre-norm, ``x = x + attention(rms_norm(x)); x = x + mlp(rms_norm(x))``, with a SwiGLU MLP
and rotary grouped-query attention, as in :mod:`packrt.models.llama`. What Qwen3 adds: the queries and
the keys are each normalised per head (an RMSNorm of width ``head_dim``, ``q_norm`` / ``k_norm``)
after the projection and before the rotation. ``attention_bias`` puts a bias on all four projections;
``head_dim`` defaults to 128 (transformers' default, not ``hidden_size // num_attention_heads``);
with ``use_sliding_window`` the layers ``layer_types`` marks ``sliding_attention`` see the last
``sliding_window`` positions only.

Parameter names (``L`` the layer): ``embed.weight``; ``layers.L.attention_norm.weight``;
``layers.L.attention.{q,k,v,o}_proj.{weight,bias}``; ``layers.L.attention.{q,k}_norm.weight``;
``layers.L.mlp_norm.weight``; ``layers.L.mlp.{gate,up,down}.weight``; ``norm.weight``;
``lm_head.weight`` (the embedding's own Parameter when tied). ``Qwen3ForSequenceClassification`` (a reranker)
is the decoder under a :class:`~packrt.models.classifier.DecoderClassifier`.
"""

from __future__ import annotations

from functools import partial

from packrt import nn
from packrt.models.config_schema import completed
from packrt.models.decoder_blocks import (
    ATTENTION_ROWS,
    GATED_MLP_ROWS,
    HEAD_NORM_ROWS,
    PRE_NORM_ROWS,
    DecoderWidths,
    GatedMLP,
    PreNormLayer,
    RotaryAttention,
    RotaryDecoderLM,
    decoder_family,
    layer_windows,
)
from packrt.models.hfconfig import HFConfig

# transformers' name after ``model.layers.{i}.`` -> packrt's after ``layers.{i}.``
LAYER_ROWS: tuple[tuple[str, str], ...] = (
    *PRE_NORM_ROWS,
    *ATTENTION_ROWS,
    *HEAD_NORM_ROWS,
    *GATED_MLP_ROWS,
)


class Qwen3ForCausalLM(RotaryDecoderLM):
    """Qwen3's causal LM: llama's with an RMSNorm over each query and key head (see the module docstring)."""

    model_type = "qwen3"

    def __init__(self, config: HFConfig) -> None:
        config = completed(config)
        super().__init__(config)
        w = DecoderWidths.read(config)
        bias = config.flag("attention_bias")
        window = config.optional_int("sliding_window") if config.flag("use_sliding_window") else None
        windows = layer_windows(config, w.layers, window)
        blocks: list[nn.Module] = []
        for index in range(w.layers):
            attention = RotaryAttention(
                w, index, bias=bias, window=windows[index], head_norm=partial(nn.RMSNorm, eps=w.eps)
            )
            blocks.append(PreNormLayer(attention, GatedMLP(w.hidden, w.intermediate, nn.SiLU()), w.hidden, w.eps))
        self._declare(config, w, blocks)


FAMILY = decoder_family("qwen3", Qwen3ForCausalLM, LAYER_ROWS, classifier=True)

__all__ = ["FAMILY", "LAYER_ROWS", "Qwen3ForCausalLM"]
