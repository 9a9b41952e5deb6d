"""A small Llama-like causal decoder: RMSNorm, rotary causal attention, SiLU-gated MLP.

Parameter names (``L`` is the layer index)::

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

import numpy as np

import packrt
from packrt import nn
from packrt.models.layers import Embedding, MultiHeadAttention, check_heads, check_ids, check_positive
from packrt.models.rotary import RotaryEmbedding


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


class GatedMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))``, all without bias."""

    def __init__(self, config: DecoderConfig, weight_residency: str | None = None) -> None:
        super().__init__()
        self.gate = nn.Linear(config.hidden, config.intermediate, bias=False, weight_residency=weight_residency)
        self.up = nn.Linear(config.hidden, config.intermediate, bias=False, weight_residency=weight_residency)
        self.down = nn.Linear(config.intermediate, config.hidden, bias=False, weight_residency=weight_residency)
        self.act = nn.SiLU()

    def forward(self, x: packrt.Tensor) -> packrt.Tensor:
        out: packrt.Tensor = self.down(self.act(self.gate(x)) * self.up(x))
        return out


class DecoderLayer(nn.Module):
    """One pre-norm layer: causal rotary attention and a gated MLP, each added to the residual."""

    def __init__(self, config: DecoderConfig, weight_residency: str | None = None) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.hidden, eps=config.eps)
        self.attention = MultiHeadAttention(config.hidden, config.heads, bias=False, weight_residency=weight_residency)
        self.mlp_norm = nn.RMSNorm(config.hidden, eps=config.eps)
        self.mlp = GatedMLP(config, weight_residency)

    def forward(self, x: packrt.Tensor, rotary: RotaryEmbedding) -> packrt.Tensor:
        x = x + self.attention(self.attention_norm(x), rotary=rotary, is_causal=True)
        out: packrt.Tensor = x + self.mlp(self.mlp_norm(x))
        return out


class CausalDecoder(nn.Module):
    """A causal language model: ``forward(input_ids)`` gives logits (batch, seq, vocab).

    ``input_ids`` is an integer tensor (batch, seq) with ``seq <= max_positions``; position
    ``t``'s logits depend on tokens ``0..t`` only. Build it under :func:`packrt.meta_init`
    and bind a checkpoint with ``load_state_dict(..., assign=True)``. ``weight_residency`` is
    passed to every Linear and the Embedding (None keeps their defaults). The rotary tables
    (``rotary.cos`` / ``rotary.sin``) are non-persistent buffers, never in a checkpoint.
    """

    def __init__(self, config: DecoderConfig, *, weight_residency: str | None = None) -> None:
        super().__init__()
        self.config = config
        self.embed = Embedding(config.vocab, config.hidden, weight_residency=weight_residency)
        self.rotary = RotaryEmbedding(config.hidden // config.heads, config.max_positions, config.rope_theta)
        self.layers = nn.ModuleList([DecoderLayer(config, weight_residency) for _ in range(config.layers)])
        self.norm = nn.RMSNorm(config.hidden, eps=config.eps)
        self.lm_head = nn.Linear(config.hidden, config.vocab, bias=False, weight_residency=weight_residency)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight

    def forward(self, input_ids: packrt.Tensor) -> packrt.Tensor:
        check_ids("CausalDecoder", input_ids, self.config.max_positions)
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, self.rotary)
        out: packrt.Tensor = self.lm_head(self.norm(x))
        return out

    def greedy_decode(self, input_ids: packrt.Tensor, steps: int) -> packrt.Tensor:
        """``input_ids`` followed by ``steps`` tokens, each the argmax of the next-token logits.

        Every step reruns the whole prefix (no key/value cache), so the result equals what
        repeated forwards give; the prefix plus ``steps`` must fit in ``max_positions``.
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"CausalDecoder.greedy_decode: steps must be an int >= 0, got {steps!r}")
        _, seq = check_ids("CausalDecoder", input_ids, None)
        check_ids("CausalDecoder", packrt.zeros(1, seq + steps, dtype=packrt.int64), self.config.max_positions)
        tokens = np.asarray(input_ids.numpy(), dtype=np.int64)
        for _ in range(steps):
            logits = self(packrt.from_numpy(tokens))
            following = logits[:, -1].argmax(-1).numpy().astype(np.int64)
            tokens = np.concatenate([tokens, following[:, None]], axis=1)
        return packrt.from_numpy(tokens)

    def extra_repr(self) -> str:
        c = self.config
        return f"vocab={c.vocab}, hidden={c.hidden}, heads={c.heads}, layers={c.layers}, tied={c.tie_embeddings}"


__all__ = ["CausalDecoder", "DecoderConfig", "DecoderLayer", "GatedMLP"]
