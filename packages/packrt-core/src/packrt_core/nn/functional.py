"""packrt.nn.functional: the layers' math on Tensors, with torch.nn.functional's names and semantics.

Every function takes packrt Tensors and returns a new Tensor on the input's device, in the
input's dtype (half precision is computed in float32 and rounded once). The kernels come from
that device's backend (:func:`packrt_core.dispatch.kernels_for`), so the same call runs numpy
code on the CPU and cupy code on CUDA. The tensors an operation combines must share a device: a
mismatch is a DeviceError naming both arguments. Arguments are checked once, here, by
:mod:`packrt_core.nn.checks` (the kernels check nothing): a wrong shape, dtype or index is a
ShapeError, DTypeError or IndexingError (still ValueError, TypeError and IndexError) prefixed
with the function's name and using torch's argument names (``input``, ``weight``, ``bias``,
...). A wrong argument *value* (``p=1.5``,
``approximate="fast"``) is a plain ValueError naming the argument.

Results agree with torch 2.13 within ``packrt_kernels_cpu.KERNEL_TOLERANCES`` for float16,
bfloat16, float32 and float64. There is no autograd: nothing here records a graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from packrt_core import dispatch
from packrt_core.dtypes import as_dtype
from packrt_core.nn import checks
from packrt_core.nn.checks import operands as _operands
from packrt_core.tensor import Tensor

IntPair = int | Sequence[int]
Padding = int | Sequence[int] | str
_GELU_APPROXIMATIONS = ("none", "tanh")


def _kernels(t: Tensor) -> Any:
    """The kernels of ``t``'s device: the one road from here to a kernel."""
    return dispatch.kernels_for(t.device)


def _write_back(fn: str, target: Tensor, values: Any) -> Tensor:
    """Store ``values`` into ``target`` (an ``inplace=True`` call) through the tensor's own in-place
    path, so its version moves and views and packs see the edit like any other write."""
    target._check_writable(f"{fn}(inplace=True)")  # refuses read-only and storage-free targets, naming fn
    return target.copy_(target._wrap(values))


# -- layers with weights ---------------------------------------------------------------------------
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``; ``weight`` is (out_features, in_features) as torch stores it."""
    x, w, b = _operands("linear", ("input", input), ("weight", weight), ("bias", bias))
    checks.linear_args("linear", input, weight, bias)
    return input._wrap(_kernels(input).linear(x, w, b))


def embedding(input: Tensor, weight: Tensor) -> Tensor:
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by the integer ids in ``input``.

    An id outside [0, num_embeddings) is an IndexingError naming the id, where it sits and the
    table size; nothing is gathered in that case.
    """
    ids, table = _operands("embedding", ("input", input), ("weight", weight))
    checks.embedding_ids("embedding", input, weight)
    return weight._wrap(_kernels(weight).embedding(ids, table))


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntPair = 1,
    padding: Padding = 0,
    dilation: IntPair = 1,
    groups: int = 1,
) -> Tensor:
    """2-D cross-correlation: input (N, C, H, W) or (C, H, W), weight (out, C / groups, kh, kw).

    ``padding`` takes an int, an (h, w) pair, ``"valid"`` or ``"same"`` (stride 1 only).
    A bad stride, padding, dilation or group count is a ShapeError naming it.
    """
    x, w, b = _operands("conv2d", ("input", input), ("weight", weight), ("bias", bias))
    checks.floating("conv2d", input)
    checks.rank_is("conv2d", weight, 4, "weight", "(out_channels, in_channels / groups, kh, kw)")
    kernels = _kernels(input)
    with dispatch.kernel_errors("conv2d"):  # the geometry arguments: parsed once, by the kernels' helper
        geometry = kernels.conv2d_geometry(weight.shape[2:], stride, padding, dilation, groups)
    checks.conv2d_args("conv2d", input, weight, bias, geometry.groups)
    with dispatch.kernel_errors("conv2d"):
        geometry.output_size(input.shape[-2], input.shape[-1])
    return input._wrap(kernels.conv2d(x, w, b, geometry))


# -- normalization -----------------------------------------------------------------------------------
def layer_norm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize over the trailing ``normalized_shape`` dims (mean 0, biased variance 1), then
    scale by ``weight`` and shift by ``bias`` when given (each of shape ``normalized_shape``)."""
    x, w, b = _operands("layer_norm", ("input", input), ("weight", weight), ("bias", bias))
    checks.norm_args("layer_norm", input, normalized_shape, ("weight", weight), ("bias", bias))
    return input._wrap(_kernels(input).layer_norm(x, normalized_shape, w, b, eps))


def rms_norm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """``input / sqrt(mean(input**2) + eps) * weight`` over the trailing ``normalized_shape`` dims.

    ``eps=None`` uses the machine epsilon of the dtype the arithmetic runs in (float32's for
    half-precision input), as torch does.
    """
    x, w = _operands("rms_norm", ("input", input), ("weight", weight))
    checks.norm_args("rms_norm", input, normalized_shape, ("weight", weight))
    return input._wrap(_kernels(input).rms_norm(x, normalized_shape, w, eps))


# -- activations ---------------------------------------------------------------------------------------
def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """``max(input, 0)`` elementwise (NaN stays NaN). ``inplace=True`` overwrites ``input`` and returns it."""
    (x,) = _operands("relu", ("input", input))
    checks.floating("relu", input)
    out = _kernels(input).relu(x)
    return _write_back("relu", input, out) if inplace else input._wrap(out)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU, ``input * Phi(input)``: exact with ``approximate="none"``, the tanh formula with ``"tanh"``."""
    if approximate not in _GELU_APPROXIMATIONS:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    (x,) = _operands("gelu", ("input", input))
    checks.floating("gelu", input)
    return input._wrap(_kernels(input).gelu(x, approximate))


def sigmoid(input: Tensor) -> Tensor:
    """``1 / (1 + exp(-input))`` elementwise, without overflow for large ``|input|``."""
    (x,) = _operands("sigmoid", ("input", input))
    checks.floating("sigmoid", input)
    return input._wrap(_kernels(input).sigmoid(x))


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """SiLU (swish), ``input * sigmoid(input)``. ``inplace=True`` overwrites ``input`` and returns it."""
    (x,) = _operands("silu", ("input", input))
    checks.floating("silu", input)
    out = _kernels(input).silu(x)
    return _write_back("silu", input, out) if inplace else input._wrap(out)


def softmax(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """``exp(input) / sum(exp(input))`` along ``dim``; large inputs cannot overflow.

    ``dtype`` casts ``input`` first (as torch does), so the result has that dtype. A slice
    that is entirely ``-inf`` gives NaN, as in torch. ``dim`` must be given: torch's implicit
    choice for ``dim=None`` is deprecated there and not offered here.
    """
    if not isinstance(dim, int | np.integer) or isinstance(dim, bool):
        raise TypeError(f"softmax: dim must be an int (the axis to normalize over), got {dim!r}")
    if not isinstance(input, Tensor):
        _operands("softmax", ("input", input))  # raises the TypeError naming input
    source = input if dtype is None else input.to(as_dtype(dtype))
    (x,) = _operands("softmax", ("input", source))
    checks.floating("softmax", source)
    axis = checks.dim_in_range("softmax", int(dim), source.ndim)
    return source._wrap(_kernels(source).softmax(x, axis))


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the survivors by ``1 / (1 - p)``, so the
    expected value is unchanged; with ``training=False`` (or ``p == 0``) it returns ``input`` itself.

    The draws come from packrt's generator for ``input``'s device: ``packrt.manual_seed`` makes
    them reproducible (they do not match torch's draws). As in torch, NaN and inf stay NaN
    even where dropped (the mask is multiplied in).
    """
    if not isinstance(p, int | float) or isinstance(p, bool) or not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"dropout: p (the drop probability) must be between 0 and 1, got {p!r}")
    (x,) = _operands("dropout", ("input", input))
    if not training or p == 0 or input.numel() == 0:
        return input
    checks.floating("dropout", input)
    xp = input._xp
    cd = np.dtype(np.float32) if input.dtype.itemsize == 2 else np.dtype(x.dtype)  # half computes in float32
    if p == 1:
        noise = xp.zeros(x.shape, dtype=cd)
    else:
        backend = dispatch.backend_for(input.device)
        draws = backend.random("uniform", x.shape, np.dtype(np.float32), 0.0, 1.0, input.device.index or 0)
        noise = (draws >= np.float32(p)).astype(cd) * cd.type(1.0 / (1.0 - float(p)))
    out = (x.astype(cd, copy=False) * noise).astype(x.dtype, copy=False)
    return _write_back("dropout", input, out) if inplace else input._wrap(out)


# -- attention -------------------------------------------------------------------------------------------
def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value``; ``scale`` defaults to ``1/sqrt(E)``.

    Shapes: query (..., L, E), key (..., S, E), value (..., S, Ev) give (..., L, Ev); leading
    dims broadcast. A bool ``attn_mask`` marks with True the pairs that take part; a float one
    is added to the scores. ``is_causal=True`` lets query i see keys 0..i (top-left aligned).
    A query that sees no key gets zeros. packrt serves inference, so ``dropout_p`` must be 0.
    """
    if dropout_p != 0.0:
        raise ValueError(
            f"scaled_dot_product_attention: dropout_p must be 0.0 (packrt serves inference and applies no "
            f"attention dropout), got {dropout_p!r}"
        )
    q, k, v, mask = _operands(
        "scaled_dot_product_attention", ("query", query), ("key", key), ("value", value), ("attn_mask", attn_mask)
    )
    checks.attention_args("scaled_dot_product_attention", query, key, value, attn_mask, is_causal)
    out = _kernels(query).scaled_dot_product_attention(q, k, v, mask, is_causal, scale)
    return query._wrap(out)


# -- positions ---------------------------------------------------------------------------------------
def rotary_embedding(input: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``input * cos + rotate_half(input) * sin``: rotary position embedding in the rotate-half layout
    (the first half of the last dim pairs with the second, as transformers' llama family pairs them),
    where ``rotate_half([a, b]) = [-b, a]``. ``cos`` and ``sin`` (..., D) broadcast to ``input``
    (..., D), D even; all three share one float dtype. Half inputs are computed in float32 and
    rounded once. A packrt function (torch has none): one pass instead of five elementwise ops.
    """
    x, c, s = _operands("rotary_embedding", ("input", input), ("cos", cos), ("sin", sin))
    checks.rotary_args("rotary_embedding", input, cos, sin)
    return input._wrap(_kernels(input).rotary_embedding(x, c, s))


__all__ = [  # in the order the page defines them
    "linear",
    "embedding",
    "conv2d",
    "layer_norm",
    "rms_norm",
    "relu",
    "gelu",
    "sigmoid",
    "silu",
    "softmax",
    "dropout",
    "scaled_dot_product_attention",
    "rotary_embedding",  # packrt's own, after the page's
]
