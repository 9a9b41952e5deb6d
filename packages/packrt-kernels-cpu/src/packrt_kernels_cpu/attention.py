"""Scaled dot-product attention on arrays, with torch's semantics (inference only: no dropout).

Shapes: query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev); the leading
dims broadcast against each other. A boolean mask marks with True the (query, key) pairs that
take part; a float mask is added to the scores. ``is_causal`` lets query i see keys 0..i
(the mask is aligned to the top-left corner, as torch does when L != S). A query that may see
no key at all gets zeros rather than NaN, matching torch 2.13.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from packrt_base.arrays import Array, array_namespace, compute_dtype
from packrt_kernels_cpu import blas, fused
from packrt_kernels_cpu.namespace import astype, quiet


def scaled_dot_product_attention(
    q: Array, k: Array, v: Array, attn_mask: Array | None = None, is_causal: bool = False, scale: float | None = None
) -> Array:
    """The contract's attention (:class:`packrt_base.kernels.AttentionKernel`) on host arrays: the
    scaled scores from one (batched) GEMM in the compute dtype, masked and normalized in place,
    then multiplied by ``v``.

    A hot-path kernel: it checks nothing (packrt-core's ``nn.checks.attention`` runs first).
    """
    dt = np.dtype(q.dtype)
    length, source = int(q.shape[-2]), int(k.shape[-2])
    xp = array_namespace(q, k, v)
    cd = compute_dtype(dt)
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # The scores array is this call's own, so every step after the GEMM works in place: a fresh
    # array per step cost a page-faulting allocation and a pass over memory each.
    # blas.matmul: MKL reads the heads in place (strided views) and runs a stack as one batched call.
    scores = blas.matmul(astype(q, cd), xp.swapaxes(astype(k, cd), -1, -2), alpha=factor)  # scaled inside
    neg_inf = cd.type(-np.inf)
    hidden = None  # True where a (query, key) pair takes no part
    if is_causal:
        hidden = ~xp.tril(xp.ones((length, source), dtype=bool))
    elif attn_mask is not None and np.dtype(attn_mask.dtype) == np.dtype(bool):
        hidden = None if bool(xp.all(attn_mask)) else ~attn_mask
    elif attn_mask is not None:
        bias = astype(attn_mask, cd)
        if np.broadcast_shapes(scores.shape, bias.shape) == scores.shape:
            scores += bias
        else:  # the mask widens the scores' shape: the sum is a new, larger array
            scores = scores + bias
    if hidden is not None:
        if np.broadcast_shapes(scores.shape, hidden.shape) != scores.shape:
            scores = xp.broadcast_to(scores, np.broadcast_shapes(scores.shape, hidden.shape)).copy()
        xp.copyto(scores, neg_inf, where=hidden)
    if fused.handles(scores):  # the same steps, the row max and sum compiled, on the scores in place
        fused.softmax_in_place(scores)
    else:
        softmax_rows_in_place(xp, scores, neg_inf)
    return astype(blas.matmul(scores, astype(v, cd)), dt)


def softmax_rows_in_place(xp: Any, scores: Array, neg_inf: Any) -> None:
    """The numpy-namespace softmax over the last axis, written over ``scores`` (the reference): a row that
    is all ``neg_inf`` (a query that may see no key) becomes zeros."""
    with quiet(xp):
        top = xp.max(scores, axis=-1, keepdims=True)
        # A fully masked row has max -inf; shifting by 0 instead makes every exp 0, not NaN.
        if bool(xp.any(top == neg_inf)):
            top = xp.where(top == neg_inf, neg_inf.dtype.type(0), top)
        scores -= top
        xp.exp(scores, out=scores)
        total = xp.sum(scores, axis=-1, keepdims=True)
        if not bool(xp.all(total)):
            total = xp.where(total == 0, neg_inf.dtype.type(1), total)
        scores /= total
