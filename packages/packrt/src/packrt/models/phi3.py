"""The ``phi3`` family: llama's decoder with fused projections.

Each layer is pre-norm, ``x = x + attention(rms_norm(x)); x = x + mlp(rms_norm(x))``, as in
:mod:`packrt.models.llama`. What Phi-3 changes: the queries, keys and values come from one
``qkv_proj`` Linear (its output rows: the queries, then the keys, then the values), and the MLP's gate
and up projections are one ``gate_up_proj`` Linear (gate rows first), so each is served as one GEMM.
No projection has a bias. With ``sliding_window`` set, every layer sees the last ``sliding_window``
positions only. Rotary frequencies: any of :data:`~packrt.models.config_schema.ROPE_TYPES`, LongRoPE (the
128k Phi-3.5 and Phi-4-mini models; ``su`` in older files is refused) and a ``partial_rotary_factor`` below 1
(Phi-4-mini's 0.75) included: see :mod:`packrt.models.rotary`.

Parameter names (``L`` the layer): ``embed.weight``; ``layers.L.attention_norm.weight``;
``layers.L.attention.qkv_proj.weight``; ``layers.L.attention.o_proj.weight``;
``layers.L.mlp_norm.weight``; ``layers.L.mlp.gate_up.weight``; ``layers.L.mlp.down.weight``;
``norm.weight``; ``lm_head.weight`` (the embedding's own Parameter when tied).
"""

from __future__ import annotations

from packrt import nn
from packrt.models import decoder_blocks as blocks
from packrt.models.config_schema import completed
from packrt.models.hfconfig import HFConfig

# transformers' name after ``model.layers.{i}.`` -> packrt's after ``layers.{i}.``
LAYER_ROWS: tuple[tuple[str, str], ...] = (
    *blocks.PRE_NORM_ROWS,
    ("self_attn.qkv_proj.weight", "attention.qkv_proj.weight"),
    ("self_attn.o_proj.weight", "attention.o_proj.weight"),
    ("mlp.gate_up_proj.weight", "mlp.gate_up.weight"),
    ("mlp.down_proj.weight", "mlp.down.weight"),
)


class Phi3ForCausalLM(blocks.RotaryDecoderLM):
    """Phi-3's causal LM: llama's with one fused qkv and one fused gate/up projection (see the module docstring)."""

    model_type = "phi3"

    def __init__(self, config: HFConfig) -> None:
        config = completed(config)
        super().__init__(config)
        w = blocks.DecoderWidths.read(config)
        window = config.optional_int("sliding_window")
        layers: list[nn.Module] = []
        for index in range(w.layers):
            attention = blocks.RotaryAttention(w, index, fused=True, window=window)
            mlp = blocks.GatedMLP(w.hidden, w.intermediate, nn.SiLU(), fused=True)
            layers.append(blocks.PreNormLayer(attention, mlp, w.hidden, w.eps))
        self._declare(config, w, layers)


FAMILY = blocks.decoder_family("phi3", Phi3ForCausalLM, LAYER_ROWS)

__all__ = ["FAMILY", "LAYER_ROWS", "Phi3ForCausalLM"]
