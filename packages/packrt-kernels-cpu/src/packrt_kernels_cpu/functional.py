"""The layers' math as array functions, with torch.nn.functional's semantics.

Every function takes float16, bfloat16, float32 or float64 arrays, computes half precision
in float32, and returns the input's dtype. These are hot-path kernels: they check nothing.
packrt-core validates arguments once, before it calls in (``packrt_core.nn.checks``); a
direct caller passes well-formed arrays (``check_linear_args`` is the check ``pack_linear``
runs at load time).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from packrt_base.arrays import Array, array_namespace, compute_dtype
from packrt_kernels_cpu import blas, compiled, fused, gemv
from packrt_kernels_cpu.namespace import astype, quiet
from packrt_kernels_cpu.special import erfc

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _upcast(a: Array, cd: np.dtype[Any]) -> Array:
    """``a`` in the compute dtype, copying only when the dtype changes."""
    return astype(a, cd)


def _compute_input(x: Array, cd: np.dtype[Any]) -> tuple[Array, bool]:
    """``x`` as a norm or activation computes on it, and whether the fused kernels take it: a contiguous
    bfloat16 array as it is (they widen and round back tile by tile, one pass), else in ``cd``. Only a
    fusable result can still be bfloat16, so a caller that then takes numpy's road upcasts only when
    something else (a norm's weight) kept it off the fused one."""
    if fused.handles_bf16(x):
        return x, True
    xc = _upcast(x, cd)
    return xc, fused.handles(xc)


def gemm_rows(x: Array, wt: Array, bias: Array | None = None) -> Array:
    """``x @ wt (+ bias)`` for ``x`` of shape (..., in) as ONE 2-D GEMM (batch dims folded into rows),
    through :func:`blas.matmul` (MKL adds the bias inside the GEMM); a single row on two threads or more
    through the compiled :func:`gemv.gemv`, which shares the pool of the other compiled kernels."""
    rows = x if x.ndim == 2 else x.reshape(-1, x.shape[-1])
    if rows.shape[0] == 1 and gemv.gemv_takes(rows, wt, bias):
        out = gemv.gemv(rows, wt, bias)
    elif bias is not None and _lays_out_bias(rows, wt, bias):  # the bias laid out on the pool, then added onto
        out = blas.matmul(rows, wt, out=fused.broadcast_rows(bias, rows.shape[0]), accumulate=True)
    else:
        out = blas.matmul(rows, wt, bias)
    return out if x.ndim == 2 else out.reshape((*x.shape[:-1], wt.shape[1]))


def _lays_out_bias(rows: Array, wt: Array, bias: Array) -> bool:
    """Whether gemm_rows fills the output with the bias on the pool first: a large float32 output on
    MKL's road (which adds onto it; numpy's would need a pass more) with numba loaded."""
    return (
        rows.shape[0] * wt.shape[1] >= compiled.PARALLEL_MIN
        and rows.dtype == np.float32
        and bias.dtype == np.float32
        and blas.provider() == "mkl"
        and compiled.enabled()
    )


def linear(x: Array, w: Array, b: Array | None = None) -> Array:
    """``x @ w.T + b`` with ``w`` laid out (out_features, in_features) as torch stores it.

    Computes straight from the declared weight: for float32/float64 ``w.T`` is a view the
    BLAS call reads transposed, so no copy of the weight is made. A bfloat16 weight is read
    in place too where the BLAS multiplies bfloat16 (MKL); elsewhere half weights are upcast
    to float32 for the call (see ``pack_linear`` to pay that once).
    """
    dt = np.dtype(x.dtype)
    cd = compute_dtype(dt)
    bias = None if b is None else _upcast(b, cd)
    if blas.multiplies(dt):
        return astype(gemm_rows(x, w.T, bias), dt)
    return astype(gemm_rows(_upcast(x, cd), _upcast(w, cd).T, bias), dt)


def embedding(ids: Array, table: Array) -> Array:
    """Rows of ``table`` (num_embeddings, dim) picked by integer ``ids`` of any shape, each in
    [0, num_embeddings) (the caller checks: a negative id would wrap around)."""
    return array_namespace(ids, table).take(table, ids, axis=0)


Dims = int | Sequence[int]  # torch's normalized_shape: the trailing dims a norm runs over


def _fusable(p: Array | None, cd: np.dtype[Any]) -> bool:
    """An affine parameter the fused norms can take: absent, or a numpy array in the compute dtype."""
    return p is None or (type(p) is np.ndarray and cd == np.float32)


def _flat(p: Array | None, cd: np.dtype[Any]) -> Array | None:
    return None if p is None else np.ascontiguousarray(_upcast(p, cd)).reshape(-1)


def _norm_axes(x: Array, shape: Dims) -> tuple[int, ...]:
    k = 1 if isinstance(shape, int) else len(tuple(shape))
    return tuple(range(x.ndim - k, x.ndim))


def layer_norm(x: Array, shape: Dims, w: Array | None = None, b: Array | None = None, eps: float = 1e-5) -> Array:
    """Normalize over the trailing ``shape`` dims (biased variance), then ``* w + b``."""
    dt = np.dtype(x.dtype)
    axes = _norm_axes(x, shape)
    xp = array_namespace(x)
    cd = compute_dtype(dt)
    xc, fusable = _compute_input(x, cd)
    if fusable and _fusable(w, cd) and _fusable(b, cd):
        width = math.prod(xc.shape[len(xc.shape) - len(axes) :])
        return astype(fused.layer_norm(xc, width, _flat(w, cd), _flat(b, cd), eps), dt)
    xc = _upcast(xc, cd)
    mean = xp.mean(xc, axis=axes, keepdims=True)
    centered = xc - mean
    var = xp.mean(centered * centered, axis=axes, keepdims=True)
    out = centered / xp.sqrt(var + cd.type(eps))
    if w is not None:
        out *= _upcast(w, cd)
    if b is not None:
        out += _upcast(b, cd)
    return astype(out, dt)


def rms_norm(x: Array, shape: Dims, w: Array | None = None, eps: float | None = None) -> Array:
    """``x / sqrt(mean(x^2) + eps) * w`` over the trailing dims.

    ``eps=None`` means the machine epsilon of the dtype the arithmetic runs in (float32's for
    half inputs), as torch does.
    """
    dt = np.dtype(x.dtype)
    axes = _norm_axes(x, shape)
    xp = array_namespace(x)
    cd = compute_dtype(dt)
    xc, fusable = _compute_input(x, cd)
    eps_value = float(np.finfo(cd).eps) if eps is None else eps
    if fusable and _fusable(w, cd):
        width = math.prod(xc.shape[len(xc.shape) - len(axes) :])
        return astype(fused.rms_norm(xc, width, _flat(w, cd), eps_value), dt)
    xc = _upcast(xc, cd)
    ms = xp.mean(xc * xc, axis=axes, keepdims=True)
    out = xc / xp.sqrt(ms + cd.type(eps_value))
    if w is not None:
        out *= _upcast(w, cd)
    return astype(out, dt)


def relu(x: Array) -> Array:
    """``max(x, 0)`` elementwise; NaN stays NaN."""
    if fused.handles(x):
        return fused.relu(x)
    return array_namespace(x).maximum(x, x.dtype.type(0))


def gelu(x: Array, approximate: str = "none") -> Array:
    """GELU: ``x * Phi(x)`` exactly (``approximate="none"``) or by the tanh formula (``"tanh"``).

    The exact form is evaluated as ``x/2 * erfc(-x/sqrt(2))``, which keeps its relative accuracy
    in the negative tail where ``1 + erf`` would cancel to zero.
    """
    dt = np.dtype(x.dtype)
    xp = array_namespace(x)
    cd = compute_dtype(dt)
    xc, fusable = _compute_input(x, cd)
    if fusable:
        return astype(fused.gelu(xc, approximate), dt)
    if approximate == "tanh":
        inner = cd.type(_SQRT_2_OVER_PI) * (xc + cd.type(0.044715) * xc * xc * xc)
        out = cd.type(0.5) * xc * (cd.type(1.0) + xp.tanh(inner))
    else:
        out = cd.type(0.5) * xc * erfc(xc * cd.type(-_SQRT_HALF))
    return astype(out, dt)


def sigmoid(x: Array) -> Array:
    """``1 / (1 + exp(-x))`` without overflow: exp is only ever taken of ``-|x|``."""
    dt = np.dtype(x.dtype)
    xp = array_namespace(x)
    xc = _upcast(x, compute_dtype(dt))
    e = xp.exp(-xp.abs(xc))
    out = xp.where(xc >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    return astype(out, dt)


def silu(x: Array) -> Array:
    """SiLU (swish): ``x * sigmoid(x)``."""
    dt = np.dtype(x.dtype)
    xc, fusable = _compute_input(x, compute_dtype(dt))
    if fusable:
        return astype(fused.silu(xc), dt)
    return astype(xc * sigmoid(xc), dt)


def softmax(x: Array, dim: int = -1) -> Array:
    """``exp(x) / sum(exp(x))`` along ``dim``, shifted by the max so large inputs cannot overflow.

    A slice that is all ``-inf`` gives NaN, as in torch (there is nothing to normalize).
    """
    dt = np.dtype(x.dtype)
    if x.ndim == 0:  # torch treats a scalar as a one-element slice along dim 0 or -1
        return softmax(x.reshape(1), 0).reshape(())
    axis = dim % x.ndim
    xp = array_namespace(x)
    xc = _upcast(x, compute_dtype(dt))
    if axis == x.ndim - 1 and xc.shape[-1] > 0 and fused.handles(xc):
        return astype(fused.softmax_last(xc), dt)
    with quiet(xp):
        e = xp.exp(xc - xp.max(xc, axis=axis, keepdims=True))
        out = e / xp.sum(e, axis=axis, keepdims=True)
    return astype(out, dt)


def rotary_embedding(x: Array, cos: Array, sin: Array) -> Array:
    """``x * cos + rotate_half(x) * sin`` over the last dim D (even), ``rotate_half([a, b]) = [-b, a]``;
    ``cos``/``sin`` broadcast to ``x`` (the caller checks). Half dtypes compute in float32, rounded once.
    The compiled path (a 4-D float32 ``x``, any strides, with (T, D) tables) gives the numpy path's bits."""
    dt = np.dtype(x.dtype)
    cd = compute_dtype(dt)
    xc, c, s = _upcast(x, cd), _upcast(cos, cd), _upcast(sin, cd)
    if fused.rotates(xc, c, s):
        return astype(fused.rotary(xc, c, s), dt)
    xp = array_namespace(xc)
    half = xc.shape[-1] // 2
    turned = xp.concatenate([-xc[..., half:], xc[..., :half]], axis=-1)  # cupy has concatenate, not concat
    return astype(xc * c + turned * s, dt)
