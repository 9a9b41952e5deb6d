"""Scaled dot-product attention on arrays, with torch's semantics (inference only: no dropout).

Shapes: query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev); the leading
dims broadcast against each other. A boolean mask marks with True the (query, key) pairs that
take part; a float mask is added to the scores. ``is_causal`` lets query i see keys 0..i
(the mask is aligned to the top-left corner, as torch does when L != S). A query that may see
no key at all gets zeros rather than NaN, matching torch 2.13.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from packrt_kernels_cpu.errors import KernelShapeError
from packrt_kernels_cpu.namespace import (
    Array,
    array_namespace,
    compute_dtype,
    quiet,
    require_float,
    require_same_dtype,
)


def broadcast_shape(shapes: Sequence[tuple[int, ...]], names: Sequence[str]) -> tuple[int, ...]:
    """The shape ``shapes`` broadcast to, or ValueError naming the two arguments that disagree."""
    ndim = max(len(s) for s in shapes)
    out: list[int] = []
    for axis in range(-ndim, 0):
        size, owner = 1, ""
        for shape, name in zip(shapes, names, strict=True):
            n = shape[axis] if -axis <= len(shape) else 1
            if n == 1:
                continue
            if size not in (1, n):
                raise KernelShapeError(
                    f"{owner} and {name} do not broadcast: size {size} vs {n} at dim {axis} "
                    f"(shapes {dict(zip(names, shapes, strict=True))})"
                )
            size, owner = n, name
        out.append(size)
    return tuple(out)


def scaled_dot_product_attention(
    q: Array,
    k: Array,
    v: Array,
    attn_mask: Array | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> Array:
    """``softmax(q @ k^T * scale + mask) @ v``; ``scale`` defaults to ``1/sqrt(E)``.

    Raises ValueError when the feature dims of query and key differ, when key and value have
    different lengths, when batch dims or the mask do not broadcast, or when both a mask and
    ``is_causal`` are given; TypeError when dtypes are mixed (a bool mask is always accepted).
    """
    dt = require_float(q, "query")
    require_same_dtype(dt, k, "key", "query")
    require_same_dtype(dt, v, "value", "query")
    for a, name in ((q, "query"), (k, "key"), (v, "value")):
        if a.ndim < 2:
            raise KernelShapeError(f"{name} must have at least 2 dims (..., length, features), got {tuple(a.shape)}")
    if k.shape[-1] != q.shape[-1]:
        raise KernelShapeError(
            f"key's feature dim must equal query's ({q.shape[-1]}), got key {tuple(k.shape)} and query {tuple(q.shape)}"
        )
    if v.shape[-2] != k.shape[-2]:
        raise KernelShapeError(
            f"value's length must equal key's ({k.shape[-2]}), got value {tuple(v.shape)} and key {tuple(k.shape)}"
        )
    batch = broadcast_shape([q.shape[:-2], k.shape[:-2], v.shape[:-2]], ["query", "key", "value"])
    length, source = int(q.shape[-2]), int(k.shape[-2])
    if attn_mask is not None:
        if is_causal:
            raise KernelShapeError("pass either attn_mask or is_causal=True, not both (the causal mask is built here)")
        if np.dtype(attn_mask.dtype) != np.dtype(bool):
            require_same_dtype(dt, attn_mask, "attn_mask", "query (or use a bool mask)")
        broadcast_shape([tuple(attn_mask.shape), (*batch, length, source)], ["attn_mask", "scores"])

    xp = array_namespace(q, k, v)
    cd = compute_dtype(dt)
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q.astype(cd, copy=False) @ xp.swapaxes(k.astype(cd, copy=False), -1, -2)) * cd.type(factor)
    neg_inf = cd.type(-np.inf)
    if is_causal:
        scores = xp.where(xp.tril(xp.ones((length, source), dtype=bool)), scores, neg_inf)
    elif attn_mask is not None and np.dtype(attn_mask.dtype) == np.dtype(bool):
        scores = xp.where(attn_mask, scores, neg_inf)
    elif attn_mask is not None:
        scores = scores + attn_mask.astype(cd, copy=False)
    with quiet(xp):
        top = xp.max(scores, axis=-1, keepdims=True)
        # A fully masked row has max -inf; shifting by 0 instead makes every exp 0, not NaN.
        top = xp.where(top == neg_inf, cd.type(0), top)
        e = xp.exp(scores - top)
        total = xp.sum(e, axis=-1, keepdims=True)
        weights = e / xp.where(total == 0, cd.type(1), total)
    return (weights @ v.astype(cd, copy=False)).astype(dt, copy=False)
