"""A BERT-style encoder: embeddings, then post-LN transformer layers with a GELU MLP.

Parameter names (``L`` is the layer index)::

    embeddings.word.weight              (vocab, hidden)
    embeddings.position.weight          (max_positions, hidden)
    embeddings.token_type.weight        (type_vocab, hidden)
    embeddings.norm.{weight,bias}       (hidden,)
    layers.L.attention.{q,k,v,o}_proj.{weight,bias}   (hidden, hidden) / (hidden,)
    layers.L.attention_norm.{weight,bias}             (hidden,)
    layers.L.mlp.up.{weight,bias}       (intermediate, hidden) / (intermediate,)
    layers.L.mlp.down.{weight,bias}     (hidden, intermediate) / (hidden,)
    layers.L.mlp_norm.{weight,bias}     (hidden,)

Each layer is ``x = norm1(x + attention(x)); x = norm2(x + mlp(x))`` (post-LN, as in BERT),
with the exact (erf) GELU.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import packrt
from packrt import nn
from packrt.errors import ShapeError
from packrt.models.encoder_plan import EmbeddingsPlan, EncoderLayerPlan
from packrt.models.layers import (
    Embedding,
    MultiHeadAttention,
    check_attention_mask,
    check_heads,
    check_ids,
    check_positive,
)
from packrt_core.nn.plan import serve


@dataclass(frozen=True)
class EncoderConfig:
    """Geometry of a :class:`BertEncoder`. ``hidden`` must be divisible by ``heads``."""

    vocab: int = 30522
    hidden: int = 768
    heads: int = 12
    layers: int = 12
    intermediate: int = 3072
    max_positions: int = 512
    type_vocab: int = 2
    eps: float = 1e-12

    def __post_init__(self) -> None:
        check_positive(self, "vocab", "hidden", "heads", "layers", "intermediate", "max_positions", "type_vocab")
        check_heads(self, self.hidden, self.heads)
        if not self.eps > 0:
            raise ValueError(f"EncoderConfig.eps must be positive (it keeps LayerNorm finite), got {self.eps!r}")


class EncoderEmbeddings(nn.Module):
    """Sum of token, token-type and position embeddings (in that order), then LayerNorm."""

    serves_plans: ClassVar[bool] = True  # its fused form: packrt.models.encoder_plan.EmbeddingsPlan
    owner: ClassVar[str] = "BertEncoder"  # the model its messages name

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.word = Embedding(config.vocab, config.hidden)
        self.position = Embedding(config.max_positions, config.hidden)
        self.token_type = Embedding(config.type_vocab, config.hidden)
        self.norm = nn.LayerNorm(config.hidden, eps=config.eps)

    def position_ids(self, input_ids: packrt.Tensor) -> packrt.Tensor:
        """The positions of ``input_ids``' tokens: 0..seq-1, (1, seq), the same for every sequence."""
        return packrt.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)

    def forward(self, input_ids: packrt.Tensor, token_type_ids: packrt.Tensor | None = None) -> packrt.Tensor:
        fused = serve(self, self.word.weight.device, EmbeddingsPlan)
        if fused is not None:
            planned: packrt.Tensor | None = fused.run(input_ids, token_type_ids)
            if planned is not None:
                return planned
        _, seq = input_ids.shape
        positions = self.position_ids(input_ids)
        if token_type_ids is None:
            token_type_ids = packrt.zeros(1, seq, dtype=packrt.int64, device=input_ids.device)
        elif token_type_ids.shape != input_ids.shape:
            raise ShapeError(
                f"{self.owner}: token_type_ids has shape {token_type_ids.shape}, expected input_ids' shape "
                f"{input_ids.shape}"
            )
        # transformers' order: in half precision each sum rounds, and this order rounds as its runs do
        x = self.word(input_ids) + self.token_type(token_type_ids) + self.position(positions)
        out: packrt.Tensor = self.norm(x)
        return out


class EncoderMLP(nn.Module):
    """``down(gelu(up(x)))``."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.hidden, config.intermediate)
        self.act = nn.GELU()
        self.down = nn.Linear(config.intermediate, config.hidden)

    def forward(self, x: packrt.Tensor) -> packrt.Tensor:
        out: packrt.Tensor = self.down(self.act(self.up(x)))
        return out


class EncoderLayer(nn.Module):
    """One post-LN transformer layer: attention, add, norm; MLP, add, norm."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(config.hidden, config.heads, bias=True)
        self.attention_norm = nn.LayerNorm(config.hidden, eps=config.eps)
        self.mlp = EncoderMLP(config)
        self.mlp_norm = nn.LayerNorm(config.hidden, eps=config.eps)

    serves_plans: ClassVar[bool] = True  # its fused form: packrt.models.encoder_plan.EncoderLayerPlan

    def forward(self, x: packrt.Tensor, attn_mask: packrt.Tensor | None = None) -> packrt.Tensor:
        fused = serve(self, self.attention_norm.weight.device, _fused_layer)
        if fused is not None:
            planned: packrt.Tensor | None = fused.run(x, attn_mask)
            if planned is not None:
                return planned
        x = self.attention_norm(x + self.attention(x, attn_mask=attn_mask))
        out: packrt.Tensor = self.mlp_norm(x + self.mlp(x))
        return out


class BertEncoder(nn.Module):
    """A BERT-style encoder returning the last hidden state (batch, seq, hidden).

    ``forward(input_ids, attention_mask=None, token_type_ids=None)``: ``input_ids`` is an
    integer tensor (batch, seq) with ``seq <= max_positions``; ``attention_mask`` (batch, seq)
    marks real tokens with 1/True and padding with 0/False, and no token attends to padding
    (padded positions still get an output row, computed from the real tokens).
    ``token_type_ids`` defaults to all zeros. Build it under :func:`packrt.meta_init` and bind a
    checkpoint with ``load_state_dict(..., assign=True)`` to allocate the weights only once; the
    load's ``weight_residency`` sets how its layers keep them.

    Its forward is one: the embeddings, then the layers. Each of those blocks, while no hook observes its
    inner modules, runs as its fused form (fused steps over its layers' packs,
    :mod:`packrt.models.encoder_plan`), which gives the module-by-module road's numbers within the road
    tolerance; :func:`packrt.nn.plan_report` says which road the blocks' last calls took.
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = EncoderEmbeddings(config)
        self.layers = nn.ModuleList([EncoderLayer(config) for _ in range(config.layers)])

    def forward(
        self,
        input_ids: packrt.Tensor,
        attention_mask: packrt.Tensor | None = None,
        token_type_ids: packrt.Tensor | None = None,
    ) -> packrt.Tensor:
        batch, seq = self._check_ids(input_ids)
        mask = None
        if attention_mask is not None:
            check_attention_mask("BertEncoder", attention_mask, batch, seq)
            # (batch, 1, 1, seq): the same key mask for every head and every query
            mask = (attention_mask != 0).reshape(batch, 1, 1, seq)
            mask = None if bool(mask.all()) else mask  # every key seen: both roads skip the masking
        x: packrt.Tensor = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            x = layer(x, mask)
        return x

    def _check_ids(self, input_ids: packrt.Tensor) -> tuple[int, int]:
        """(batch, seq) of ``input_ids``, refused when the model cannot place them."""
        return check_ids("BertEncoder", input_ids, self.config.max_positions)

    def extra_repr(self) -> str:
        c = self.config
        return f"vocab={c.vocab}, hidden={c.hidden}, heads={c.heads}, layers={c.layers}"


_fused_layer = partial(EncoderLayerPlan, layer_kind=EncoderLayer, mlp_kind=EncoderMLP)

__all__ = ["BertEncoder", "EncoderConfig", "EncoderEmbeddings", "EncoderLayer", "EncoderMLP"]
