"""The ``llama`` family, which also serves ``qwen2`` and ``mistral``: the shared rotary decoder blocks
(:mod:`packrt.models.decoder_blocks`) with the options these three configs set.

Each layer is a :class:`~packrt.models.decoder_blocks.PreNormLayer` over rotary grouped-query attention
and a SwiGLU MLP, ``down(silu(gate(x)) * up(x))``. What the three model types set differently:

- biases: ``attention_bias`` puts one on all four attention projections (llama); qwen2 always has one
  on q, k and v and never on o; ``mlp_bias`` on the MLP's three;
- sliding window: ``sliding_window`` on every layer (mistral), or on the layers ``layer_types`` marks
  ``sliding_attention`` (qwen2 with ``use_sliding_window``, :func:`~packrt.models.decoder_blocks.layer_windows`);
- the head: tied to the embedding when ``tie_word_embeddings`` is true.

Parameter names (``L`` the layer): ``embed.weight``; ``layers.L.attention_norm.weight``;
``layers.L.attention.{q,k,v,o}_proj.{weight,bias}``; ``layers.L.mlp_norm.weight``;
``layers.L.mlp.{gate,up,down}.{weight,bias}``; ``norm.weight``; ``lm_head.weight``.
"""

from __future__ import annotations

from packrt import nn
from packrt.models import decoder_blocks as blocks
from packrt.models.config_schema import completed
from packrt.models.hfconfig import HFConfig
from packrt.models.keymap import Family, KeyMap

MODEL_TYPES = ("llama", "qwen2", "mistral")

# transformers' name after ``model.layers.{i}.`` -> packrt's after ``layers.{i}.``: the blocks' rows plus
# the MLP biases ``mlp_bias`` adds
LAYER_ROWS: tuple[tuple[str, str], ...] = (
    *blocks.PRE_NORM_ROWS,
    *blocks.ATTENTION_ROWS,
    *blocks.GATED_MLP_ROWS,
    ("mlp.gate_proj.bias", "mlp.gate.bias"),
    ("mlp.up_proj.bias", "mlp.up.bias"),
    ("mlp.down_proj.bias", "mlp.down.bias"),
)


class LlamaForCausalLM(blocks.RotaryDecoderLM):
    """A llama / qwen2 / mistral causal LM: ``model(input_ids)`` gives logits (batch, seq, vocab).

    Built by :func:`packrt.models.from_pretrained` from config.json; see :class:`CausalLM` for
    ``attention_mask`` and ``generate``.
    """

    def __init__(self, config: HFConfig) -> None:
        config = completed(config)
        super().__init__(config)
        self.model_type = kind = config.text("model_type")
        w = blocks.DecoderWidths.read(config)
        bias = config.flag("attention_bias")
        window = config.optional_int("sliding_window")
        if kind == "qwen2":
            windows = blocks.layer_windows(config, w.layers, window)
        else:
            windows = (window if kind == "mistral" else None,) * w.layers
        mlp_bias = config.flag("mlp_bias")
        layers: list[nn.Module] = []
        for index in range(w.layers):
            attention = blocks.RotaryAttention(
                w, index, bias=bias or kind == "qwen2", o_bias=bias and kind == "llama", window=windows[index]
            )
            mlp = blocks.GatedMLP(w.hidden, w.intermediate, nn.SiLU(), bias=mlp_bias)
            layers.append(blocks.PreNormLayer(attention, mlp, w.hidden, w.eps))
        self._declare(config, w, layers)


def llama_keymap(config: HFConfig) -> KeyMap:
    """The table from transformers' names (``model.layers.0.self_attn.q_proj.weight``) to packrt's."""
    return blocks.decoder_keymap(config, LAYER_ROWS)


FAMILY = Family(
    name="llama",
    model_types=MODEL_TYPES,
    architectures=("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"),
    build=LlamaForCausalLM,
    keymap=llama_keymap,
)

__all__ = ["FAMILY", "LAYER_ROWS", "MODEL_TYPES", "LlamaForCausalLM", "llama_keymap"]
