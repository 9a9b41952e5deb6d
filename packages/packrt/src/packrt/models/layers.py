"""Building blocks the reference models share: multi-head attention and config checks.

Written only with packrt's public API, so the models double as an example of serving a
transformer with it. Attention runs in the (batch, heads, seq, head_dim) layout that
``packrt.nn.functional.scaled_dot_product_attention`` takes.
"""

from __future__ import annotations

import numpy as np

import packrt
from packrt import nn
from packrt.errors import DTypeError, ShapeError
from packrt.models.rotary import RotaryEmbedding
from packrt.nn import Embedding, functional


def check_positive(config: object, *names: str) -> None:
    """Each named field of ``config`` must be a positive int; say which one is not."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{type(config).__name__}.{name} must be a positive int, got {value!r}")


def check_heads(config: object, hidden: int, heads: int) -> int:
    """The per-head width ``hidden // heads``, after checking the heads split ``hidden`` evenly."""
    if hidden % heads:
        raise ValueError(
            f"{type(config).__name__}: hidden={hidden} is not divisible by heads={heads}; pick a head "
            f"count that divides it (each head gets hidden // heads features)"
        )
    return hidden // heads


def check_ids(model: str, ids: packrt.Tensor, max_positions: int | None) -> tuple[int, int]:
    """(batch, seq) of a 2-D integer id tensor no longer than ``max_positions``."""
    if not isinstance(ids, packrt.Tensor):
        raise TypeError(f"{model} takes a packrt Tensor of token ids, got {type(ids).__name__}")
    if ids.ndim != 2:
        raise ShapeError(f"{model} expects input_ids of shape (batch, seq), got {ids.shape}")
    if not np.issubdtype(ids.dtype.numpy, np.integer):
        raise DTypeError(
            f"{model} takes integer token ids (int64, int32, ...), got {ids.dtype}: token ids are never rounded; "
            "cast them with ids.to(packrt.int64) if they are whole numbers"
        )
    batch, seq = ids.shape
    if max_positions is not None and seq > max_positions:
        raise ShapeError(
            f"{model}: a sequence of {seq} tokens is longer than max_positions={max_positions}; "
            "truncate the input or build the model with a larger max_positions"
        )
    return batch, seq


def check_attention_mask(model: str, attention_mask: packrt.Tensor, batch: int, seq: int) -> None:
    """ShapeError unless ``attention_mask`` is (batch, seq), the shape of the ids it marks."""
    if tuple(attention_mask.shape) != (batch, seq):
        raise ShapeError(
            f"{model}: attention_mask has shape {attention_mask.shape}, expected (batch, seq) = {(batch, seq)} "
            "with 1 for tokens and 0 for padding"
        )


class MultiHeadAttention(nn.Module):
    """Self-attention with ``heads`` heads over ``hidden`` features.

    Parameters: ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj``, each a ``Linear(hidden,
    hidden, bias=bias)``. ``forward(x, attn_mask=None, rotary=None, is_causal=False)`` takes x
    (batch, seq, hidden) and returns the same shape. ``attn_mask`` is a bool tensor that
    broadcasts to (batch, heads, seq, seq), True where a query may look at a key; ``rotary``
    rotates queries and keys by position before the scores are taken.
    """

    def __init__(self, hidden: int, heads: int, *, bias: bool) -> None:
        super().__init__()
        self.hidden = hidden
        self.heads = heads
        self.head_dim = hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=bias)
        self.k_proj = nn.Linear(hidden, hidden, bias=bias)
        self.v_proj = nn.Linear(hidden, hidden, bias=bias)
        self.o_proj = nn.Linear(hidden, hidden, bias=bias)

    def _split(self, x: packrt.Tensor) -> packrt.Tensor:
        batch, seq, _ = x.shape
        return x.reshape(batch, seq, self.heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: packrt.Tensor,
        attn_mask: packrt.Tensor | None = None,
        rotary: RotaryEmbedding | None = None,
        is_causal: bool = False,
    ) -> packrt.Tensor:
        batch, seq, _ = x.shape
        q, k, v = self._split(self.q_proj(x)), self._split(self.k_proj(x)), self._split(self.v_proj(x))
        if rotary is not None:
            q, k = rotary(q), rotary(k)
        out = functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
        merged: packrt.Tensor = self.o_proj(out.transpose(1, 2).reshape(batch, seq, self.hidden))
        return merged

    def extra_repr(self) -> str:
        return f"hidden={self.hidden}, heads={self.heads}"


__all__ = ["Embedding", "MultiHeadAttention", "check_attention_mask", "check_heads", "check_ids", "check_positive"]
