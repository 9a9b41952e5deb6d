"""The ``ministral`` family: mistral's decoder whose layers ``layer_types`` marks sliding or full.

Everything else is llama's (:mod:`packrt.models.llama`), built from the shared blocks: pre-norm layers,
rotary grouped-query attention without biases, a SwiGLU MLP. A layer marked ``sliding_attention`` sees the
last ``sliding_window`` positions only; without ``layer_types`` every layer slides, as transformers'
MinistralConfig derives it.

Parameter names are llama's: ``layers.L.attention.{q,k,v,o}_proj.weight``, ``layers.L.mlp.{gate,up,down}.weight``...
"""

from __future__ import annotations

from packrt import nn
from packrt.models import decoder_blocks as blocks
from packrt.models.config_schema import completed
from packrt.models.hfconfig import HFConfig

LAYER_ROWS = (*blocks.PRE_NORM_ROWS, *blocks.ATTENTION_ROWS, *blocks.GATED_MLP_ROWS)


class MinistralForCausalLM(blocks.RotaryDecoderLM):
    """Ministral's causal LM: mistral's with per-layer sliding or full attention (see the module docstring)."""

    model_type = "ministral"

    def __init__(self, config: HFConfig) -> None:
        config = completed(config)
        super().__init__(config)
        w = blocks.DecoderWidths.read(config)
        window = config.optional_int("sliding_window")
        if config.get("layer_types") is None:
            windows = (window,) * w.layers
        else:
            windows = blocks.layer_windows(config, w.layers, window)
        layers: list[nn.Module] = []
        for index in range(w.layers):
            attention = blocks.RotaryAttention(w, index, window=windows[index])
            mlp = blocks.GatedMLP(w.hidden, w.intermediate, nn.SiLU())
            layers.append(blocks.PreNormLayer(attention, mlp, w.hidden, w.eps))
        self._declare(config, w, layers)


FAMILY = blocks.decoder_family("ministral", MinistralForCausalLM, LAYER_ROWS)

__all__ = ["FAMILY", "LAYER_ROWS", "MinistralForCausalLM"]
