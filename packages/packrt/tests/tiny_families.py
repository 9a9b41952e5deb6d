"""The tiny random model of every family packrt loads from a save_pretrained directory, saved once a session.

One table says how each family's model is built (transformers' config and model class, the config fields,
save_pretrained's arguments), what packrt builds from its directory, and how a batch for it is padded. The
comparisons against transformers (test_pretrained_matches_transformers) run over every row; each family's
own tests read the same saved directories through the ``saved`` fixture (conftest).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from peers import NO_SPECIAL_TOKENS, SMALL, VOCAB, encoder_fields, padded_batch, perturb_norms, save, tiny_model

from packrt.models import (
    BertEncoder,
    CausalLM,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    GPT2LMHeadModel,
    GptOssForCausalLM,
    GraniteForCausalLM,
    LlamaForCausalLM,
    MinistralForCausalLM,
    Olmo2ForCausalLM,
    Phi3ForCausalLM,
    Qwen3ForCausalLM,
    Qwen3MoeForCausalLM,
    RobertaEncoder,
    SmolLM3ForCausalLM,
)
from packrt.models.modernbert import ModernBertEncoder


@dataclass(frozen=True)
class Family:
    """A tiny model of one family: ``config_class(**fields)`` in ``model_class``, saved with ``save_args``,
    which packrt serves as a ``served_as``."""

    config_class: str
    model_class: str
    fields: dict[str, Any]
    served_as: type
    save_args: dict[str, Any] = field(default_factory=dict)
    # every norm weight moved off its init, so a norm read as ``w`` instead of ``1 + w``, or skipped, shows
    perturbed: bool = False
    # the names perturbed: "norm", and "bias" where transformers initializes biases to zeros (gpt-oss's experts)
    perturbed_names: tuple[str, ...] = ("norm",)
    # an encoder's pad id, written into its batches' padding as a tokenizer writes it (roberta numbers
    # positions from it); None for a causal model, whose batches pad on both sides with 0
    pad: int | None = None
    token_types: bool = False

    def variant(self, fields: dict[str, Any]) -> Family:
        """The same architecture (classes, norms) with other config ``fields``, saved in one file."""
        return replace(self, fields=fields, save_args={})

    @property
    def causal(self) -> bool:
        return issubclass(self.served_as, CausalLM)

    def batch(self, seed: int, length: int = 12) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """ids, attention_mask and token types (None where the family has one type) of three rows: one
        full, one padded on the right, one on the left."""
        if self.pad is not None:
            ids, mask, types = padded_batch(seed, self.pad)
            return ids, mask, types if self.token_types else None
        return (*causal_batch(seed, length), None)


def causal_batch(seed: int, length: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """ids (drawn from 1 up) and attention_mask of three rows: one full, one whose last three positions are
    padding, one whose first four are."""
    ids = np.random.default_rng(seed).integers(1, VOCAB, (3, length)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, length - 3 :] = 0
    mask[2, :4] = 0
    return ids, mask


ROPE_LLAMA3 = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
ROPE_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16}
GEMMA = {
    **SMALL,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "sliding_window": 4,
    "query_pre_attn_scalar": 24,
    "final_logit_softcapping": 30.0,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 50_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
    },
}
QWEN3_FIELDS = {
    **SMALL,
    "num_key_value_heads": 2,
    "head_dim": 16,  # not hidden // heads: the explicit width is the one used
    "attention_bias": True,
    "use_sliding_window": True,
    "sliding_window": 4,
    "max_window_layers": 1,
}
QWEN2_FIELDS = {
    **SMALL,
    "num_key_value_heads": 2,
    "use_sliding_window": True,
    "sliding_window": 4,
    "max_window_layers": 1,
}
MISTRAL_FIELDS = {**SMALL, "num_key_value_heads": 1, "sliding_window": 5}
QWEN3_MOE_FIELDS = {
    **SMALL,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "norm_topk_prob": True,
    "mlp_only_layers": [1],
}
PHI3_FIELDS = {**SMALL, "num_key_value_heads": 2, "sliding_window": 5}
MINISTRAL_FIELDS = {
    **SMALL,
    "num_key_value_heads": 2,
    "head_dim": 8,  # MinistralConfig derives none: its attention needs one given
    "sliding_window": 4,
    "layer_types": ["sliding_attention", "full_attention"],
}
SMOLLM3_FIELDS = {
    **SMALL,
    "num_key_value_heads": 2,
    "no_rope_layers": [1, 0],  # the second layer attends without rotary positions (NoPE)
    "use_sliding_window": True,
    "sliding_window": 4,  # on the NoPE layer, as SmolLM3Config derives layer_types
    "tie_word_embeddings": False,
}
GRANITE_FIELDS = {  # every multiplier away from 1, so one read wrong or skipped shows
    **SMALL,
    "num_key_value_heads": 2,
    "embedding_multiplier": 12.0,
    "residual_multiplier": 0.22,
    "attention_multiplier": 0.0078125,
    "logits_scaling": 8.0,
}
GEMMA2_FIELDS = {
    **SMALL,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "sliding_window": 4,
    "query_pre_attn_scalar": 24,
    "attn_logit_softcapping": 0.5,  # small enough that the tanh bends the tiny model's scores
    "final_logit_softcapping": 3.0,
    "initializer_range": 0.2,
    "tie_word_embeddings": False,
}
GPT_OSS_FIELDS = {  # every layer a sparse MoE (8 experts, 2 per token); sliding and full layers alternate
    **SMALL,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "intermediate_size": 16,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "sliding_window": 4,
    "swiglu_limit": 0.5,  # low enough that the tiny model's gate and up values are clamped on both sides
    "swiglu_alpha": 1.5,
}
ROBERTA_PAD = 1
LLAMA = Family(
    "LlamaConfig",
    "LlamaForCausalLM",
    {**SMALL, "num_key_value_heads": 2, "rope_parameters": ROPE_LLAMA3},
    LlamaForCausalLM,
    save_args={"max_shard_size": "20KB"},
)
QWEN3 = Family(
    "Qwen3Config",
    "Qwen3ForCausalLM",
    QWEN3_FIELDS,
    Qwen3ForCausalLM,
    save_args={"max_shard_size": "20KB"},
    perturbed=True,
)
GEMMA3 = Family(
    "Gemma3TextConfig",
    "Gemma3ForCausalLM",
    {**GEMMA, "tie_word_embeddings": False, "attn_logit_softcapping": 20.0},
    Gemma3ForCausalLM,
    perturbed=True,
)
PHI3 = Family("Phi3Config", "Phi3ForCausalLM", PHI3_FIELDS, Phi3ForCausalLM, perturbed=True)
FAMILIES: dict[str, Family] = {
    "bert": Family(
        "BertConfig", "BertModel", {**SMALL, "max_position_embeddings": 64}, BertEncoder, pad=0, token_types=True
    ),
    "gpt2": Family(
        "GPT2Config", "GPT2LMHeadModel", {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 128}, GPT2LMHeadModel
    ),
    "llama": LLAMA,
    "llama-tied": LLAMA.variant({**SMALL, "tie_word_embeddings": True}),
    # YaRN: interpolated long wavelengths, a ramp to the kept short ones, cos and sin scaled by 0.1 ln(4) + 1
    "llama-yarn": LLAMA.variant({**SMALL, "num_key_value_heads": 2, "rope_parameters": ROPE_YARN}),
    "qwen2": Family("Qwen2Config", "Qwen2ForCausalLM", QWEN2_FIELDS, LlamaForCausalLM),
    "mistral": Family("MistralConfig", "MistralForCausalLM", MISTRAL_FIELDS, LlamaForCausalLM),
    "qwen3": QWEN3,
    "qwen3-tied": QWEN3.variant({**SMALL, "num_key_value_heads": 1, "tie_word_embeddings": True}),
    # Qwen3's decoder with a sparse mixture-of-experts MLP in the first layer (8 experts, 2 per token, their
    # weights renormalized) and a dense one in the second (mlp_only_layers)
    "qwen3-moe": Family("Qwen3MoeConfig", "Qwen3MoeForCausalLM", QWEN3_MOE_FIELDS, Qwen3MoeForCausalLM, perturbed=True),
    "gemma3": GEMMA3,
    "gemma3-tied": GEMMA3.variant({**GEMMA, "initializer_range": 0.1, "attention_bias": True}),
    # Gemma 3 4B-27B's checkpoint class: the text decoder inside an image-text model, served text-only (its
    # vision tower and projector left unused)
    "gemma3-multimodal": Family(
        "Gemma3Config",
        "Gemma3ForConditionalGeneration",
        {
            "text_config": {**GEMMA, **NO_SPECIAL_TOKENS, "vocab_size": VOCAB, "initializer_range": 0.1},
            "vision_config": {
                "hidden_size": 16,
                "intermediate_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "image_size": 28,
                "patch_size": 14,
            },
            "mm_tokens_per_image": 4,
        },
        Gemma3ForCausalLM,
        perturbed=True,
    ),
    "phi3": PHI3,
    "phi3-tied": PHI3.variant({**SMALL, "tie_word_embeddings": True}),
    # Phi-4-mini's rotary: 6 of the 8 features of a head rotate, LongRoPE's short factors up to 16 positions and
    # its long ones past them (a generation crosses over), cos and sin scaled for an 8x context
    "phi3-longrope": PHI3.variant(
        {
            **PHI3_FIELDS,
            "max_position_embeddings": 128,
            "original_max_position_embeddings": 16,  # Phi3Config's own field, which wins over the dict's
            "rope_parameters": {
                "rope_type": "longrope",
                "partial_rotary_factor": 0.75,
                # chosen so that no greedy step of the tests is a near tie (smallest top-2 gap 0.016)
                "short_factor": [1.0, 1.0, 1.5],
                "long_factor": [4.0, 8.0, 16.0],
                "original_max_position_embeddings": 16,
            },
        }
    ),
    # mistral's decoder, sliding and full layers by layer_types
    "ministral": Family("MinistralConfig", "MinistralForCausalLM", MINISTRAL_FIELDS, MinistralForCausalLM),
    # llama's decoder with a NoPE layer (no_rope_layers), sliding there; the tied default
    "smollm3": Family("SmolLM3Config", "SmolLM3ForCausalLM", SMOLLM3_FIELDS, SmolLM3ForCausalLM),
    # Gemma 3's text model with soft-capped attention scores, one rotary table, no head norms
    "gemma2": Family("Gemma2Config", "Gemma2ForCausalLM", GEMMA2_FIELDS, Gemma2ForCausalLM, perturbed=True),
    # llama's decoder with post-norms only and full-width query and key norms
    "olmo2": Family(
        "Olmo2Config", "Olmo2ForCausalLM", {**SMALL, "num_key_value_heads": 2}, Olmo2ForCausalLM, perturbed=True
    ),
    # a rotary decoder with attention sinks, biases everywhere, and a top-k MoE of clamped-SwiGLU experts in every
    # layer; its biases (zeros at init) perturbed like the norms, so a bias read wrong or skipped shows
    "gpt-oss": Family(
        "GptOssConfig",
        "GptOssForCausalLM",
        GPT_OSS_FIELDS,
        GptOssForCausalLM,
        perturbed=True,
        perturbed_names=("norm", "bias"),
    ),
    # llama's decoder with granite's four multipliers
    "granite": Family("GraniteConfig", "GraniteForCausalLM", GRANITE_FIELDS, GraniteForCausalLM),
    "smollm3-tied": Family(
        "SmolLM3Config", "SmolLM3ForCausalLM", {**SMALL, "num_hidden_layers": 4}, SmolLM3ForCausalLM
    ),
    # ModernBERT: a bidirectional rotary encoder, global layers 0 and 3, local ones (two positions each way) between
    "modernbert": Family(
        "ModernBertConfig",
        "ModernBertModel",
        {
            **SMALL,
            "num_hidden_layers": 4,
            "intermediate_size": 48,
            "local_attention": 4,
            "pad_token_id": 0,
            "initializer_range": 0.2,
        },
        ModernBertEncoder,
        pad=0,
        perturbed=True,
    ),
    # roberta with two token types exercises them; xlm-roberta has one
    "roberta": Family(
        "RobertaConfig",
        "RobertaModel",
        encoder_fields(ROBERTA_PAD, type_vocab_size=2),
        RobertaEncoder,
        pad=ROBERTA_PAD,
        token_types=True,
    ),
    "xlm-roberta": Family(
        "XLMRobertaConfig",
        "XLMRobertaModel",
        encoder_fields(ROBERTA_PAD, type_vocab_size=1),
        RobertaEncoder,
        pad=ROBERTA_PAD,
    ),
}
CAUSAL = [name for name, family in FAMILIES.items() if family.causal]


class SavedFamilies(Mapping[str, tuple[Path, Any]]):
    """name -> (directory, the fp32 transformers model saved there), each family built and saved the first
    time it is asked for, its weights drawn from seed 0 whatever was built before it."""

    def __init__(self, transformers: ModuleType, torch: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._transformers, self._torch, self._tmp = transformers, torch, tmp_path_factory
        self._saved: dict[str, tuple[Path, Any]] = {}

    def __getitem__(self, name: str) -> tuple[Path, Any]:
        if name not in self._saved:
            family = FAMILIES[name]
            self._torch.manual_seed(0)
            fields = {"vocab_size": VOCAB, **family.fields}
            model = tiny_model(self._transformers, family.config_class, family.model_class, **fields)
            if family.perturbed:
                perturb_norms(self._torch, model, family.perturbed_names)
            self._saved[name] = save(model, self._tmp.mktemp(name), **family.save_args)
        return self._saved[name]

    def __iter__(self) -> Iterator[str]:
        return iter(FAMILIES)

    def __len__(self) -> int:
        return len(FAMILIES)
