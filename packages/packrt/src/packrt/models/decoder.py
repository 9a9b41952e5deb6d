"""A small Llama-like causal decoder: RMSNorm, rotary causal attention, SiLU-gated MLP.

:class:`CausalDecoder` is the ``llama`` family's model (:class:`~packrt.models.LlamaForCausalLM`)
declared from a :class:`DecoderConfig` instead of a config.json: one head width, as many key/value
heads as query heads, no biases. It is a :class:`~packrt.models.CausalLM`, so it has ``generate``
(one decode loop over a key/value cache for every causal model). Parameter names (``L`` is the
layer index)::

    embed.weight                         (vocab, hidden)
    layers.L.attention_norm.weight       (hidden,)
    layers.L.attention.{q,k,v,o}_proj.weight   (hidden, hidden), no biases
    layers.L.mlp_norm.weight             (hidden,)
    layers.L.mlp.gate.weight             (intermediate, hidden)
    layers.L.mlp.up.weight               (intermediate, hidden)
    layers.L.mlp.down.weight             (hidden, intermediate)
    norm.weight                          (hidden,)
    lm_head.weight                       (vocab, hidden), only when the head is not tied

Each layer is ``x = x + attention(norm1(x)); x = x + mlp(norm2(x))`` (pre-norm), with
``mlp(x) = down(silu(gate(x)) * up(x))``. With ``tie_embeddings=True`` the LM head's weight
is the embedding's Parameter itself: one tensor, saved once under ``embed.weight``.
"""

from __future__ import annotations

from dataclasses import dataclass

from packrt.models.hfconfig import HFConfig
from packrt.models.layers import check_heads, check_positive
from packrt.models.llama import LlamaForCausalLM
from packrt.models.rotary import RotaryTables, inverse_frequencies


@dataclass(frozen=True)
class DecoderConfig:
    """Geometry of a :class:`CausalDecoder`. ``hidden / heads`` must be an even integer (RoPE)."""

    vocab: int = 32000
    hidden: int = 512
    heads: int = 8
    layers: int = 8
    intermediate: int = 1408
    max_positions: int = 2048
    eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        check_positive(self, "vocab", "hidden", "heads", "layers", "intermediate", "max_positions")
        head_dim = check_heads(self, self.hidden, self.heads)
        if head_dim % 2:
            raise ValueError(
                f"DecoderConfig: hidden / heads = {head_dim} is odd; rotary embeddings need an even head width"
            )
        if not self.eps > 0 or not self.rope_theta > 0:
            raise ValueError(
                f"DecoderConfig: eps and rope_theta must be positive, got {self.eps!r}, {self.rope_theta!r}"
            )


class CausalDecoder(LlamaForCausalLM):
    """A causal language model: ``model(input_ids)`` gives logits (batch, seq, vocab) and
    ``model.generate(input_ids, max_new_tokens)`` continues a prompt (see :class:`~packrt.models.CausalLM`).

    ``input_ids`` is an integer tensor (batch, seq) with ``seq <= max_positions``; position
    ``t``'s logits depend on tokens ``0..t`` only. Build it under :func:`packrt.meta_init`
    and bind a checkpoint with ``load_state_dict(..., assign=True)``; the load's
    ``weight_residency`` sets how its layers keep the weights. The rotary tables are constants
    built from the geometry on first use, never in a checkpoint.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__(
            HFConfig(
                {
                    "model_type": "llama",
                    "vocab_size": config.vocab,
                    "hidden_size": config.hidden,
                    "num_attention_heads": config.heads,
                    "num_hidden_layers": config.layers,
                    "intermediate_size": config.intermediate,
                    "rms_norm_eps": config.eps,
                    "tie_word_embeddings": config.tie_embeddings,
                },
                path="DecoderConfig",
            )
        )
        self.config = config
        self.max_positions = config.max_positions
        # float64 angles, where a config.json's llama forms them in float32 as transformers does
        self.rotaries = {"default": RotaryTables(inverse_frequencies(config.hidden // config.heads, config.rope_theta))}

    def _name(self) -> str:
        return "CausalDecoder"

    def extra_repr(self) -> str:
        c = self.config
        return f"vocab={c.vocab}, hidden={c.hidden}, heads={c.heads}, layers={c.layers}, tied={c.tie_embeddings}"


__all__ = ["CausalDecoder", "DecoderConfig"]
