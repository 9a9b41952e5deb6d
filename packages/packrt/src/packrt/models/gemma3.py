"""The ``gemma3_text`` family (Gemma3ForCausalLM): Gemma 3's text decoder.

What differs from llama's decoder (:mod:`packrt.models.llama`), each as transformers computes it:

- the embedding is multiplied by ``sqrt(hidden_size)`` (rounded to float32, then to the weights' dtype);
- every norm is Gemma's RMSNorm, ``x / sqrt(mean(x**2) + eps) * (1 + weight)``, computed in float32
  and rounded once (a stored weight of zeros is the identity);
- sandwich norms: ``x = x + post_attention_norm(attention(attention_norm(x)))``, then
  ``x = x + post_mlp_norm(mlp(mlp_norm(x)))``;
- the MLP is ``down(gelu_tanh(gate(x)) * up(x))``;
- queries and keys are normalised per head (``q_norm`` / ``k_norm``, Gemma's RMSNorm) before the
  rotation, and the scores are scaled by ``query_pre_attn_scalar ** -0.5``, not ``head_dim ** -0.5``;
- local and global layers: the layers ``layer_types`` marks ``sliding_attention`` (by default five of
  every six, ``sliding_window_pattern``) see the last ``sliding_window`` positions and rotate with
  their own frequencies (``rope_local_base_freq``, default 1e4); the others see everything and use
  ``rope_theta`` (default 1e6) and its scaling (see :func:`~packrt.models.config_schema.rope_by_layer_type`);
- the logits are soft-capped, ``cap * tanh(logits / cap)``, when ``final_logit_softcapping`` is set.

``attn_logit_softcapping`` is accepted and not applied: transformers' Gemma 3 attention does not apply
it either (Gemma 3 replaced it by the q/k norms), and packrt serves what transformers computes.
``use_bidirectional_attention`` (EmbeddingGemma: a ``Gemma3TextModel`` under sentence-transformers) makes every
position attend to the whole sequence, a local layer to the keys fewer than ``sliding_window // 2 + 1``
positions away on either side, as transformers reads it; such a model gives hidden states and logits but
does not generate.

Parameter names (``L`` the layer): ``embed.weight``; ``layers.L.{attention_norm, post_attention_norm,
mlp_norm, post_mlp_norm}.weight``; ``layers.L.attention.{q,k,v,o}_proj.{weight,bias}``;
``layers.L.attention.{q,k}_norm.weight``; ``layers.L.mlp.{gate,up,down}.weight``; ``norm.weight``;
``lm_head.weight`` (the embedding's own Parameter when tied, the default).
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from packrt import nn
from packrt.models.config_schema import completed, rope_by_layer_type
from packrt.models.decoder_blocks import (
    ATTENTION_ROWS,
    GATED_MLP_ROWS,
    HEAD_NORM_ROWS,
    DecoderWidths,
    GatedMLP,
    OffsetRMSNorm,
    PreNormLayer,
    RotaryAttention,
    RotaryDecoderLM,
    decoder_family,
    decoder_keymap,
)
from packrt.models.hfconfig import HFConfig
from packrt.models.keymap import Family, KeyMap, Rule
from packrt.models.rotary import tables_of

# transformers' name after ``model.layers.{i}.`` -> packrt's after ``layers.{i}.``
LAYER_ROWS: tuple[tuple[str, str], ...] = (
    ("input_layernorm.weight", "attention_norm.weight"),
    ("post_attention_layernorm.weight", "post_attention_norm.weight"),
    ("pre_feedforward_layernorm.weight", "mlp_norm.weight"),
    ("post_feedforward_layernorm.weight", "post_mlp_norm.weight"),
    *ATTENTION_ROWS,
    *HEAD_NORM_ROWS,
    *GATED_MLP_ROWS,
)
LAYER_KINDS = ("full_attention", "sliding_attention")


def layer_kinds(config: HFConfig, layers: int) -> list[str]:
    """Each layer's attention type: ``layer_types``, else sliding for all but every ``sliding_window_pattern``-th."""
    types = config.get("layer_types")
    if types is None:
        pattern = config.integer("sliding_window_pattern")
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or any(kind not in LAYER_KINDS for kind in types):
        raise config.error("layer_types", f"is {types!r}, expected one of {LAYER_KINDS} per layer ({layers})")
    return list(types)


class Gemma3ForCausalLM(RotaryDecoderLM):
    """Gemma 3's text LM: llama's with sandwich norms, local and global layers, soft-capped logits (see the module
    docstring)."""

    model_type = "gemma3_text"

    def __init__(self, config: HFConfig) -> None:
        config = completed(config)
        super().__init__(config)
        w = DecoderWidths.read(config)
        bias = config.flag("attention_bias")
        scale = config.number("query_pre_attn_scalar") ** -0.5
        window = config.optional_int("sliding_window")
        self.bidirectional = bool(config.get("use_bidirectional_attention"))
        if self.bidirectional and window is not None:
            # transformers' reading: a local layer then sees the keys fewer than sliding_window // 2 + 1 positions
            # away, on either side (EmbeddingGemma's 512 -> 256 each way)
            window = window // 2 + 1
        kinds = layer_kinds(config, w.layers)
        blocks: list[nn.Module] = []
        for index, kind in enumerate(kinds):
            attention = RotaryAttention(
                w,
                index,
                bias=bias,
                window=window if kind == "sliding_attention" else None,
                scale=scale,
                head_norm=partial(OffsetRMSNorm, eps=w.eps),
            )
            mlp = GatedMLP(w.hidden, w.intermediate, nn.GELU(approximate="tanh"))
            blocks.append(
                PreNormLayer(attention, mlp, w.hidden, w.eps, norm=OffsetRMSNorm, post_norms=True, rope_kind=kind)
            )
        rope = rope_by_layer_type(config)
        limit = config.get("max_position_embeddings")
        rotaries = {}
        for kind in sorted(set(kinds)):
            one = HFConfig({"rope_parameters": rope[kind], "max_position_embeddings": limit}, config.path)
            rotaries[kind] = tables_of(one, w.head_dim)
        # transformers keeps sqrt(hidden) as a float32 tensor: the same rounding here
        self.embed_scale = float(np.float32(math.sqrt(w.hidden)))
        cap = config.get("final_logit_softcapping")
        self.logit_softcap = None if cap is None else float(cap)
        self._declare(config, w, blocks, norm=OffsetRMSNorm(w.hidden, w.eps), rotaries=rotaries)


FAMILY = decoder_family("gemma3", Gemma3ForCausalLM, LAYER_ROWS)


class TextConfig(HFConfig):
    """A multimodal config.json's ``text_config``, read as a model's config; its messages name each field
    ``text_config.<field>`` of the same file."""

    def describe(self, name: str, problem: str, fix: str) -> str:
        return super().describe(f"text_config.{name}", problem, fix)


def text_config(config: HFConfig) -> HFConfig:
    """The text model's config in a ``Gemma3ForConditionalGeneration`` config.json: its ``text_config``, read as
    ``gemma3_text`` (the top level's ``tie_word_embeddings`` wins, as transformers ties the head by it; no final
    logit soft-cap, which transformers' multimodal class does not apply)."""
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise config.error(
            "text_config",
            f"is {text!r}; a Gemma3ForConditionalGeneration config.json holds the text model's settings there",
        )
    values = {**text, "model_type": "gemma3_text", "architectures": config.get("architectures")}
    # transformers' Gemma3ForConditionalGeneration returns its logits uncapped whatever the text config says
    # (Gemma 3's own checkpoints set none); served as it serves them
    values["final_logit_softcapping"] = None
    if config.get("tie_word_embeddings") is not None:
        values["tie_word_embeddings"] = config["tie_word_embeddings"]
    return TextConfig(values, config.path)


# a multimodal checkpoint's vision side: served by no packrt model, so its tensors are left unused
VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")


def conditional_keymap(config: HFConfig) -> KeyMap:
    """The text model's rows under the multimodal checkpoint's prefixes (``language_model.model.`` as transformers
    saves it, or ``model.language_model.``), its head at ``language_model.lm_head.weight`` when untied, and the
    vision tower and projector left unused."""
    text = decoder_keymap(config, LAYER_ROWS)
    rules = tuple(
        Rule("language_model.lm_head.weight", rule.model, prefixed=False) if rule.model == "lm_head.weight" else rule
        for rule in text.rules
    )
    ignored = (text.ignored | {"language_model.lm_head.weight"}) if "lm_head.weight" in text.ignored else text.ignored
    prefixes = ("language_model.model.", "model.language_model.")
    return KeyMap(rules, ignored, prefixes=prefixes, ignored_prefixes=VISION_PREFIXES)


# Gemma 3 4B-27B: the text decoder inside the image-text checkpoint, served text-only
CONDITIONAL_FAMILY = Family(
    name="gemma3",
    model_types=("gemma3",),
    architectures=("Gemma3ForConditionalGeneration",),
    build=Gemma3ForCausalLM,
    keymap=conditional_keymap,
    unwrap=text_config,
)

__all__ = [
    "CONDITIONAL_FAMILY",
    "FAMILY",
    "LAYER_KINDS",
    "LAYER_ROWS",
    "VISION_PREFIXES",
    "Gemma3ForCausalLM",
    "OffsetRMSNorm",
    "TextConfig",
    "conditional_keymap",
    "layer_kinds",
    "text_config",
]
