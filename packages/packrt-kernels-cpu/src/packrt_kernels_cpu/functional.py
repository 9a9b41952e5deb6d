"""The layers' math as array functions, with torch.nn.functional's semantics.

Every function takes float16, bfloat16, float32 or float64 arrays, computes half precision
in float32, and returns the input's dtype. Arguments are checked before any arithmetic, so a
wrong shape is a ValueError naming the argument with the expected and actual shape, and a
wrong dtype is a TypeError, never a numpy broadcasting traceback.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from packrt_kernels_cpu.errors import KernelDTypeError, KernelIndexError, KernelShapeError
from packrt_kernels_cpu.namespace import (
    Array,
    array_namespace,
    compute_dtype,
    normalize_dim,
    quiet,
    require_float,
    require_ndim,
    require_same_dtype,
    require_shape,
)
from packrt_kernels_cpu.special import erfc

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_APPROXIMATIONS = ("none", "tanh")


def _upcast(a: Array, cd: np.dtype[Any]) -> Array:
    """``a`` in the compute dtype, copying only when the dtype changes."""
    return a.astype(cd, copy=False)


def check_linear_args(x: Array, w: Array, b: Array | None) -> np.dtype[Any]:
    """Validate ``linear``'s arguments; return the shared dtype."""
    dt = require_float(x, "input")
    require_ndim(w, 2, "weight", "(out_features, in_features)")
    require_same_dtype(dt, w, "weight", "input")
    require_same_dtype(dt, b, "bias", "input")
    if x.ndim == 0 or x.shape[-1] != w.shape[1]:
        raise KernelShapeError(
            f"input's last dimension must equal weight's in_features={w.shape[1]}, got input of shape {tuple(x.shape)}"
        )
    require_shape(b, (w.shape[0],), "bias")
    return dt


def gemm_rows(x: Array, wt: Array) -> Array:
    """``x @ wt`` for ``x`` of shape (..., in) as ONE 2-D GEMM (batch dims folded into rows)."""
    lead = tuple(x.shape[:-1])
    out = x.reshape(-1, x.shape[-1]) @ wt
    return out.reshape((*lead, wt.shape[1]))


def linear(x: Array, w: Array, b: Array | None = None) -> Array:
    """``x @ w.T + b`` with ``w`` laid out (out_features, in_features) as torch stores it.

    Computes straight from the declared weight: for float32/float64 ``w.T`` is a view the
    BLAS call reads transposed, so no copy of the weight is made; half weights are upcast to
    float32 for the call (see ``pack_linear`` to pay that once).
    """
    dt = check_linear_args(x, w, b)
    cd = compute_dtype(dt)
    out = gemm_rows(_upcast(x, cd), _upcast(w, cd).T)
    if b is not None:
        out += _upcast(b, cd)
    return out.astype(dt, copy=False)


def embedding(ids: Array, table: Array) -> Array:
    """Rows of ``table`` (num_embeddings, dim) picked by integer ``ids`` of any shape.

    Every id must lie in [0, num_embeddings); the first one that does not raises IndexError
    naming it, its position and the table size, before anything is gathered.
    """
    xp = array_namespace(ids, table)
    require_ndim(table, 2, "weight", "(num_embeddings, embedding_dim)")
    if np.dtype(ids.dtype).kind not in "iu":
        raise KernelDTypeError(f"input must be an integer array, got dtype {np.dtype(ids.dtype).name}")
    num = int(table.shape[0])
    bad = (ids < 0) | (ids >= num)
    if bool(xp.any(bad)):
        where = tuple(int(i) for i in xp.argwhere(bad)[0])
        raise KernelIndexError(
            f"embedding id {int(ids[where])} at position {where} is out of range for a table of "
            f"{num} rows (ids must lie in [0, {num - 1}])"
        )
    return xp.take(table, ids, axis=0)


def _norm_axes(x: Array, normalized_shape: int | Sequence[int], name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(int(s) for s in normalized_shape)
    k = len(shape)
    if k == 0 or x.ndim < k or tuple(x.shape[-k:]) != shape:
        raise KernelShapeError(
            f"{name}: input's trailing dimensions must equal normalized_shape={shape}, "
            f"got input of shape {tuple(x.shape)}"
        )
    return shape, tuple(range(x.ndim - k, x.ndim))


def layer_norm(
    x: Array,
    normalized_shape: int | Sequence[int],
    w: Array | None = None,
    b: Array | None = None,
    eps: float = 1e-5,
) -> Array:
    """Normalize over the trailing ``normalized_shape`` dims (biased variance), then ``* w + b``."""
    dt = require_float(x, "input")
    shape, axes = _norm_axes(x, normalized_shape, "layer_norm")
    for arg, name in ((w, "weight"), (b, "bias")):
        require_same_dtype(dt, arg, name, "input")
        require_shape(arg, shape, name)
    xp = array_namespace(x)
    cd = compute_dtype(dt)
    xc = _upcast(x, cd)
    mean = xp.mean(xc, axis=axes, keepdims=True)
    centered = xc - mean
    var = xp.mean(centered * centered, axis=axes, keepdims=True)
    out = centered / xp.sqrt(var + cd.type(eps))
    if w is not None:
        out *= _upcast(w, cd)
    if b is not None:
        out += _upcast(b, cd)
    return out.astype(dt, copy=False)


def rms_norm(
    x: Array, normalized_shape: int | Sequence[int], w: Array | None = None, eps: float | None = None
) -> Array:
    """``x / sqrt(mean(x^2) + eps) * w`` over the trailing dims.

    ``eps=None`` means the machine epsilon of the dtype the arithmetic runs in (float32's for
    half inputs), as torch does.
    """
    dt = require_float(x, "input")
    shape, axes = _norm_axes(x, normalized_shape, "rms_norm")
    require_same_dtype(dt, w, "weight", "input")
    require_shape(w, shape, "weight")
    xp = array_namespace(x)
    cd = compute_dtype(dt)
    xc = _upcast(x, cd)
    eps_value = float(np.finfo(cd).eps) if eps is None else eps
    ms = xp.mean(xc * xc, axis=axes, keepdims=True)
    out = xc / xp.sqrt(ms + cd.type(eps_value))
    if w is not None:
        out *= _upcast(w, cd)
    return out.astype(dt, copy=False)


def relu(x: Array) -> Array:
    """``max(x, 0)`` elementwise; NaN stays NaN."""
    require_float(x, "input")
    return array_namespace(x).maximum(x, x.dtype.type(0))


def gelu(x: Array, approximate: str = "none") -> Array:
    """GELU: ``x * Phi(x)`` exactly (``approximate="none"``) or by the tanh formula (``"tanh"``).

    The exact form is evaluated as ``x/2 * erfc(-x/sqrt(2))``, which keeps its relative accuracy
    in the negative tail where ``1 + erf`` would cancel to zero.
    """
    dt = require_float(x, "input")
    if approximate not in GELU_APPROXIMATIONS:
        raise KernelShapeError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    xp = array_namespace(x)
    cd = compute_dtype(dt)
    xc = _upcast(x, cd)
    if approximate == "tanh":
        inner = cd.type(_SQRT_2_OVER_PI) * (xc + cd.type(0.044715) * xc * xc * xc)
        out = cd.type(0.5) * xc * (cd.type(1.0) + xp.tanh(inner))
    else:
        out = cd.type(0.5) * xc * erfc(xc * cd.type(-_SQRT_HALF))
    return out.astype(dt, copy=False)


def sigmoid(x: Array) -> Array:
    """``1 / (1 + exp(-x))`` without overflow: exp is only ever taken of ``-|x|``."""
    dt = require_float(x, "input")
    xp = array_namespace(x)
    xc = _upcast(x, compute_dtype(dt))
    e = xp.exp(-xp.abs(xc))
    out = xp.where(xc >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    return out.astype(dt, copy=False)


def silu(x: Array) -> Array:
    """SiLU (swish): ``x * sigmoid(x)``."""
    dt = require_float(x, "input")
    xc = _upcast(x, compute_dtype(dt))
    return (xc * sigmoid(xc)).astype(dt, copy=False)


def softmax(x: Array, dim: int = -1) -> Array:
    """``exp(x) / sum(exp(x))`` along ``dim``, shifted by the max so large inputs cannot overflow.

    A slice that is all ``-inf`` gives NaN, as in torch (there is nothing to normalize).
    """
    dt = require_float(x, "input")
    if x.ndim == 0:  # torch treats a scalar as a one-element slice along dim 0 or -1
        normalize_dim(dim, 1)
        return softmax(x.reshape(1), 0).reshape(())
    axis = normalize_dim(dim, x.ndim)
    xp = array_namespace(x)
    xc = _upcast(x, compute_dtype(dt))
    with quiet(xp):
        e = xp.exp(xc - xp.max(xc, axis=axis, keepdims=True))
        out = e / xp.sum(e, axis=axis, keepdims=True)
    return out.astype(dt, copy=False)
