"""A sparse mixture-of-experts MLP: each token goes through the few experts its router picks, and only those run.

:class:`SparseMoE` replaces a decoder layer's gated MLP (Qwen3-MoE: Qwen3-30B-A3B, 128 experts, 8 per token).
For a block of tokens (batch * seq rows):

1. the router, a Linear without bias, scores every expert for every token; a softmax over the experts (in
   float32) gives probabilities, of which each token keeps its ``top_k`` best;
2. with ``normalize`` (``norm_topk_prob``) the kept probabilities are divided by their sum; they are then
   rounded to the router's dtype, as transformers rounds them;
3. each expert that at least one token picked runs once, on exactly the tokens that picked it, and its output,
   times each token's weight for it, is added to those tokens' rows, experts in ascending order (transformers'
   order of additions). An expert no token picked is not called at all: a decode step of one token runs
   ``top_k`` experts per layer, whatever the number of experts.

The routing is decided on the host from the router's scores (tokens x experts: small); the experts are
:class:`~packrt.models.decoder_blocks.GatedMLP` modules, whose Linears pack and keep their weights as any other
(``borrowed``: the mapped checkpoint's expert tensors are the only copy).

Parameter names: ``router.weight`` (experts, hidden); ``experts.E.{gate,up,down}.weight``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import packrt
from packrt import nn
from packrt.models.decoder_blocks import GatedMLP
from packrt.models.devices import host, placed


def dispatch(
    flat: packrt.Tensor,
    chosen: np.ndarray,
    weights: np.ndarray,
    expert: Callable[[int, packrt.Tensor], packrt.Tensor],
) -> packrt.Tensor:
    """The mixture for (tokens, hidden) ``flat``: each expert some token ``chosen`` (tokens, top_k) called once,
    as ``expert(index, its tokens' rows)``, experts in ascending order, and its output times each token's weight
    (``weights``, (tokens, top_k), in ``flat``'s dtype) added to those tokens' rows. An expert no token chose is
    never called (the rule every sparse MoE block here keeps: a decode step runs ``top_k`` experts per layer)."""
    out = packrt.zeros(*flat.shape, dtype=flat.dtype, device=flat.device)
    for index in np.unique(chosen):  # ascending; an expert nobody picked is never called
        tokens, slots = np.nonzero(chosen == index)
        rows = placed(tokens.astype(np.int64), flat.device)
        share = placed(np.ascontiguousarray(weights[tokens, slots][:, None]), flat.device)
        out[rows] = out[rows] + expert(int(index), flat[rows]) * share
    return out


class SparseMoE(nn.Module):
    """Top-``top_k`` routed gated-MLP experts (see the module docstring): (..., hidden) in, (..., hidden) out."""

    def __init__(self, hidden: int, intermediate: int, experts: int, top_k: int, *, normalize: bool) -> None:
        super().__init__()
        if not 0 < top_k <= experts:
            raise ValueError(f"SparseMoE: top_k must be in [1, experts={experts}], got {top_k}")
        self.top_k, self.normalize = top_k, normalize
        self.router = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList([GatedMLP(hidden, intermediate, nn.SiLU()) for _ in range(experts)])

    def route(self, flat: packrt.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(chosen experts, their weights), each (tokens, top_k), best first, for (tokens, hidden) ``flat``."""
        logits = self.router(flat)
        scores = np.asarray(host(logits), dtype=np.float32)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        chosen = np.argsort(-probs, axis=-1, kind="stable")[:, : self.top_k]
        weights = np.take_along_axis(probs, chosen, axis=-1)
        if self.normalize:
            weights = weights / weights.sum(axis=-1, keepdims=True)
        return chosen, weights.astype(logits.dtype.numpy)  # rounded to the router's dtype, as transformers does

    def forward(self, x: packrt.Tensor) -> packrt.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        chosen, weights = self.route(flat)
        out = dispatch(flat, chosen, weights, lambda expert, rows: self.experts[expert](rows))
        result: packrt.Tensor = out.reshape(*shape)
        return result

    def extra_repr(self) -> str:
        return f"experts={len(self.experts)}, top_k={self.top_k}, normalize={self.normalize}"


__all__ = ["SparseMoE", "dispatch"]
