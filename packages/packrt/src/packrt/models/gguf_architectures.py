"""What ``from_pretrained`` serves from a GGUF file, per ``general.architecture``, kept as data.

Each architecture llama.cpp names that packrt serves is one :class:`GGUFArchitecture` row in
:data:`ARCHITECTURES`; the rows share :data:`CONFIG_KEYS`, the metadata every architecture's config reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from packrt.models import gemma3, llama, phi3, qwen3
from packrt.models.keymap import Family, Rule

# "<architecture>.<key>" in the metadata -> the config.json field it fills (every architecture)
CONFIG_KEYS: Final[tuple[tuple[str, str], ...]] = (
    ("block_count", "num_hidden_layers"),
    ("embedding_length", "hidden_size"),
    ("feed_forward_length", "intermediate_size"),
    ("attention.head_count", "num_attention_heads"),
    ("attention.head_count_kv", "num_key_value_heads"),
    ("attention.key_length", "head_dim"),
    ("attention.layer_norm_rms_epsilon", "rms_norm_eps"),
    ("rope.freq_base", "rope_theta"),
    ("context_length", "max_position_embeddings"),
    ("vocab_size", "vocab_size"),
)


def _rows(*pairs: tuple[str, str], kinds: tuple[str, ...] = ("weight",)) -> tuple[Rule, ...]:
    """Rules for per-layer pairs (llama.cpp's name after ``blk.{i}.``, packrt's after ``layers.{i}.``)."""
    return tuple(
        Rule(f"blk.{{i}}.{gguf_name}.{kind}", f"layers.{{i}}.{packrt_name}.{kind}")
        for gguf_name, packrt_name in pairs
        for kind in kinds
    )


_TOP: Final = (
    Rule("token_embd.weight", "embed.weight"),
    Rule("output_norm.weight", "norm.weight"),
    Rule("output.weight", "lm_head.weight"),
    Rule("blk.{i}.attn_norm.weight", "layers.{i}.attention_norm.weight"),
)
_ATTENTION: Final = (
    ("attn_q", "attention.q_proj"),
    ("attn_k", "attention.k_proj"),
    ("attn_v", "attention.v_proj"),
    ("attn_output", "attention.o_proj"),
)
_MLP: Final = (("ffn_gate", "mlp.gate"), ("ffn_up", "mlp.up"), ("ffn_down", "mlp.down"))
_HEAD_NORMS: Final = (("attn_q_norm", "attention.q_norm"), ("attn_k_norm", "attention.k_norm"))

LLAMA_TENSORS: Final = (
    *_TOP,
    Rule("blk.{i}.ffn_norm.weight", "layers.{i}.mlp_norm.weight"),
    *_rows(*_ATTENTION, *_MLP, kinds=("weight", "bias")),
)
QWEN3_TENSORS: Final = (*LLAMA_TENSORS, *_rows(*_HEAD_NORMS))
GEMMA3_TENSORS: Final = (
    *_TOP,
    *_rows(*_ATTENTION, kinds=("weight", "bias")),
    *_rows(
        *_HEAD_NORMS,
        ("post_attention_norm", "post_attention_norm"),
        ("ffn_norm", "mlp_norm"),
        ("post_ffw_norm", "post_mlp_norm"),
        *_MLP,
    ),
)
PHI3_TENSORS: Final = (
    *_TOP,
    *_rows(
        ("attn_qkv", "attention.qkv_proj"),
        ("attn_output", "attention.o_proj"),
        ("ffn_norm", "mlp_norm"),
        ("ffn_up", "mlp.gate_up"),  # llama.cpp keeps Phi-3's fused gate/up under ffn_up, gate rows first
        ("ffn_down", "mlp.down"),
    ),
)


@dataclass(frozen=True)
class GGUFArchitecture:
    """One ``general.architecture`` packrt serves:

    - ``model_type``, ``architecture``, ``family``: the config.json ``model_type`` and class it stands for,
      and the packrt family that serves it;
    - ``tensors``: llama.cpp's tensor names (``blk.{i}.attn_q.weight``) onto packrt's parameter names;
    - ``keys``: the metadata keys ``<arch>.<key>`` its config reads, besides :data:`CONFIG_KEYS`;
    - ``fixed``: config fields the format leaves out because llama.cpp's loader fixes them in code
      (Gemma 3's local layers: one global layer in six, local rotary base 1e4), unless the file says
      otherwise (``sliding_window_pattern``: a period, or one flag per layer, true for a local layer);
    - ``permuted``: tensors whose rows llama.cpp stores in its own rotary order (a llama model's queries
      and keys), with the config field counting their heads;
    - ``shifted``: tensors llama.cpp stores as ``1 + w`` (Gemma's norm weights), given back as ``w``;
    - ``refused``: tensors that carry a feature packrt does not implement (Phi-3's long-context rope factors);
    - ``rope_per_layer_type``: the config gives one rotary table per layer type (Gemma 3): the file's
      rope scaling goes to the global layers, the local ones rotate at the local base unscaled.
    """

    model_type: str
    architecture: str
    family: Family
    tensors: tuple[Rule, ...]
    keys: tuple[tuple[str, str], ...] = ()
    fixed: Mapping[str, Any] = field(default_factory=dict)
    permuted: Mapping[str, str] = field(default_factory=dict)
    shifted: tuple[str, ...] = ()
    refused: Mapping[str, str] = field(default_factory=dict)
    rope_per_layer_type: bool = False


_SILU: Final = {"hidden_act": "silu"}
_PHI3_LONGROPE: Final = "longrope (Phi-3's long-context rope_factors_long / rope_factors_short)"

ARCHITECTURES: Final[dict[str, GGUFArchitecture]] = {
    "llama": GGUFArchitecture(
        "llama",
        "LlamaForCausalLM",
        llama.FAMILY,
        LLAMA_TENSORS,
        fixed=_SILU,
        permuted={
            "blk.{i}.attn_q.weight": "num_attention_heads",
            "blk.{i}.attn_q.bias": "num_attention_heads",
            "blk.{i}.attn_k.weight": "num_key_value_heads",
            "blk.{i}.attn_k.bias": "num_key_value_heads",
        },
    ),
    "qwen2": GGUFArchitecture("qwen2", "Qwen2ForCausalLM", llama.FAMILY, LLAMA_TENSORS, fixed=_SILU),
    "qwen3": GGUFArchitecture("qwen3", "Qwen3ForCausalLM", qwen3.FAMILY, QWEN3_TENSORS, fixed=_SILU),
    "gemma3": GGUFArchitecture(
        "gemma3_text",
        "Gemma3ForCausalLM",
        gemma3.FAMILY,
        GEMMA3_TENSORS,
        keys=(
            ("attention.sliding_window", "sliding_window"),
            ("attention.sliding_window_pattern", "sliding_window_pattern"),
            ("rope.freq_base_swa", "rope_local_base_freq"),
            ("final_logit_softcapping", "final_logit_softcapping"),
        ),
        fixed={"hidden_activation": "gelu_pytorch_tanh", "sliding_window_pattern": 6, "rope_local_base_freq": 10_000.0},
        shifted=tuple(rule.checkpoint for rule in GEMMA3_TENSORS if rule.checkpoint.endswith("norm.weight")),
        rope_per_layer_type=True,
    ),
    "phi3": GGUFArchitecture(
        "phi3",
        "Phi3ForCausalLM",
        phi3.FAMILY,
        PHI3_TENSORS,
        keys=(("attention.sliding_window", "sliding_window"),),
        fixed=_SILU,
        refused={"rope_factors_long.weight": _PHI3_LONGROPE, "rope_factors_short.weight": _PHI3_LONGROPE},
    ),
}

__all__ = [
    "ARCHITECTURES",
    "CONFIG_KEYS",
    "GEMMA3_TENSORS",
    "GGUFArchitecture",
    "LLAMA_TENSORS",
    "PHI3_TENSORS",
    "QWEN3_TENSORS",
]
