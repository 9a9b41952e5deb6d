"""The ``smollm3`` family: llama's decoder in which some layers attend without rotary positions (NoPE).

``no_rope_layers`` holds one flag per layer, 1 for a layer that rotates its queries and keys, 0 for one that
does not (by default every ``no_rope_layer_interval``-th layer, the fourth, does not). With
``use_sliding_window`` and a ``sliding_window``, the layers ``layer_types`` marks ``sliding_attention`` see
the last ``sliding_window`` positions; without ``layer_types`` those are the NoPE layers, as transformers'
SmolLM3Config derives it. The rest is llama's, over the shared blocks; the head is tied by default.

Parameter names are llama's: ``layers.L.attention.{q,k,v,o}_proj.weight``, ``layers.L.mlp.{gate,up,down}.weight``...
"""

from __future__ import annotations

from packrt import nn
from packrt.models import decoder_blocks as blocks
from packrt.models.config_schema import completed
from packrt.models.hfconfig import HFConfig
from packrt.models.llama import LAYER_ROWS


class SmolLM3ForCausalLM(blocks.RotaryDecoderLM):
    """SmolLM3's causal LM: llama's with NoPE layers (see the module docstring)."""

    model_type = "smollm3"

    def __init__(self, config: HFConfig) -> None:
        config = completed(config)
        super().__init__(config)
        w = blocks.DecoderWidths.read(config)
        flags = config.get("no_rope_layers")
        if flags is None:
            interval = config.integer("no_rope_layer_interval")
            flags = [int((index + 1) % interval != 0) for index in range(w.layers)]
        sliding = config.flag("use_sliding_window") and config.optional_int("sliding_window") is not None
        types = config.get("layer_types")
        if types is None:
            types = ["sliding_attention" if sliding and not rotates else "full_attention" for rotates in flags]
        bias, mlp_bias = config.flag("attention_bias"), config.flag("mlp_bias")
        layers: list[nn.Module] = []
        for index in range(w.layers):
            window = config.optional_int("sliding_window") if sliding and types[index] == "sliding_attention" else None
            attention = blocks.RotaryAttention(w, index, bias=bias, window=window, rotates=bool(flags[index]))
            mlp = blocks.GatedMLP(w.hidden, w.intermediate, nn.SiLU(), bias=mlp_bias)
            layers.append(blocks.PreNormLayer(attention, mlp, w.hidden, w.eps))
        self._declare(config, w, layers)


FAMILY = blocks.decoder_family("smollm3", SmolLM3ForCausalLM, LAYER_ROWS)

__all__ = ["FAMILY", "SmolLM3ForCausalLM"]
