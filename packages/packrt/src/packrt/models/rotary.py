"""Rotary position embeddings (RoPE), rotate-half convention.

Feature ``i`` of the first half of a head pairs with feature ``i + head_dim/2``; the pair is
rotated by the angle ``position * theta ** (-2i / head_dim)``. As a formula on whole heads:
``x * cos + rotate_half(x) * sin`` with ``rotate_half([a, b]) = [-b, a]`` and the angle table
repeated over both halves (the layout Llama checkpoints in the Hugging Face format use).
"""

from __future__ import annotations

import numpy as np

import packrt
from packrt import nn


def rotary_tables(max_positions: int, head_dim: int, theta: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin), each (max_positions, head_dim) float32, for positions 0..max_positions-1.

    Computed in float64 and rounded once, so long positions keep their phase accuracy.
    """
    if head_dim % 2:
        raise ValueError(f"rotary embeddings pair features in halves, so head_dim must be even, got {head_dim}")
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(max_positions, dtype=np.float64), inv_freq)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rotate_half(x: packrt.Tensor) -> packrt.Tensor:
    """``[-b, a]`` for ``x = [a, b]`` split in halves along the last dim."""
    half = x.shape[-1] // 2
    out = packrt.empty(*x.shape, dtype=x.dtype, device=x.device)
    out[..., :half] = -x[..., half:]
    out[..., half:] = x[..., :half]
    return out


class RotaryEmbedding(nn.Module):
    """Rotates queries or keys (batch, heads, seq, head_dim) by the position of each row.

    The cos/sin tables are constants derived from the geometry, not weights: they are
    non-persistent buffers (absent from ``state_dict`` and checkpoints) and hold storage even
    when the model is declared under :func:`packrt.meta_init`, so a model loaded with
    ``assign=True`` needs nothing more to serve.
    """

    def __init__(self, head_dim: int, max_positions: int, theta: float = 10000.0) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.max_positions = max_positions
        self.theta = float(theta)
        cos, sin = rotary_tables(max_positions, head_dim, theta)
        self.register_buffer("cos", packrt.from_numpy(cos), persistent=False)
        self.register_buffer("sin", packrt.from_numpy(sin), persistent=False)

    def forward(self, x: packrt.Tensor, offset: int = 0) -> packrt.Tensor:
        seq = x.shape[-2]
        cos: packrt.Tensor = self.cos[offset : offset + seq]
        sin: packrt.Tensor = self.sin[offset : offset + seq]
        if cos.dtype is not x.dtype:
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        return nn.functional.rotary_embedding(x, cos, sin)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_positions={self.max_positions}, theta={self.theta:g}"


__all__ = ["RotaryEmbedding", "rotary_tables", "rotate_half"]
