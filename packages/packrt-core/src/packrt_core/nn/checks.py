"""The argument checks layers and ``nn.functional`` share: what a caller gets wrong most,
named before a kernel sees it (which input, what was expected, what came, and the fix)."""

from __future__ import annotations

from typing import Any

from packrt_core.errors import DeviceError, DTypeError, IndexingError, ShapeError
from packrt_core.tensor import Tensor


def require_tensor(where: str, value: Any, what: str = "a packrt Tensor") -> None:
    """TypeError unless ``value`` is a packrt Tensor."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{where} takes {what}, got {type(value).__name__}")


def matches_weights(layer: str, x: Tensor, weight: Tensor, *, dtype: bool = True, what: str = "input") -> None:
    """The input shares the weights' device (and, with ``dtype``, their dtype)."""
    if dtype and x.dtype is not weight.dtype:
        raise DTypeError(
            f"{layer} holds {weight.dtype.name} weights but got {x.dtype.name} {what}: cast one to the other "
            f"(x.to({weight.dtype.name!r}) or layer.to({x.dtype.name!r}))"
        )
    if x.device != weight.device:
        raise DeviceError(f"{layer}: {what} on {x.device}, weights on {weight.device}: move one to the other")


def linear_input(layer: str, x: Any, in_features: int, weight: Tensor, *, dtype: bool = True) -> None:
    """A (..., in_features) tensor for a linear layer holding ``weight``."""
    require_tensor(layer, x)
    if x.ndim == 0 or x.shape[-1] != in_features:
        raise ShapeError(f"{layer} expects input (..., {in_features}), got shape {x.shape}")
    matches_weights(layer, x, weight, dtype=dtype)


def operands(fn: str, *named: tuple[str, Tensor | None]) -> list[Any]:
    """The storage arrays of ``named`` tensors (None stays None), after checking each is a Tensor
    on the first one's device."""
    ref_name, ref = named[0]
    arrays: list[Any] = []
    for name, value in named:
        if value is None:
            arrays.append(None)
            continue
        if not isinstance(value, Tensor):
            raise TypeError(
                f"{fn}: {name} must be a packrt Tensor, got {type(value).__name__} (make one with packrt.tensor(...))"
            )
        assert ref is not None  # the first operand is always required
        if value.device != ref.device:
            raise DeviceError(
                f"{fn}: {name} is on {value.device} but {ref_name} is on {ref.device}; move {name} to "
                f"{ref_name}'s device first ({name}.to({ref_name}.device))"
            )
        arrays.append(value._array())
    return arrays


# -- the checks the kernels do not run: one per function, shared by the layers and nn.functional --
def _fail(fn: str, message: str, kind: type[Exception] = ShapeError) -> Exception:
    return kind(f"{fn}: {message}")


def floating(fn: str, t: Tensor, name: str = "input") -> None:
    """DTypeError naming ``name`` unless ``t`` is one of the four float dtypes kernels compute in."""
    if not t.dtype.is_floating_point:
        raise _fail(
            fn,
            f"{name} has dtype {t.dtype.name}; expected one of float16, bfloat16, float32, float64 "
            f"(convert it with {name}.float() first)",
            DTypeError,
        )


def same_dtype(fn: str, t: Tensor | None, name: str, ref: Tensor, ref_name: str = "input") -> None:
    """DTypeError when ``t`` (if given) does not share ``ref``'s dtype: kernels do not mix dtypes."""
    if t is not None and t.dtype is not ref.dtype:
        raise _fail(
            fn,
            f"{name} has dtype {t.dtype.name} but {ref_name} has {ref.dtype.name}; kernels do not mix dtypes, "
            "cast one of them first",
            DTypeError,
        )


def shape_is(fn: str, t: Tensor | None, expected: tuple[int, ...], name: str) -> None:
    """ShapeError when ``t`` (if given) does not have shape ``expected``."""
    if t is not None and t.shape != tuple(expected):
        raise _fail(fn, f"{name} must have shape {tuple(expected)}, got {t.shape}")


def rank_is(fn: str, t: Tensor, ndim: int | tuple[int, ...], name: str, layout: str) -> None:
    """ShapeError naming ``name`` when its rank is not ``ndim`` (an int or the allowed ranks)."""
    allowed = (ndim,) if isinstance(ndim, int) else ndim
    if t.ndim not in allowed:
        want = " or ".join(str(n) for n in allowed)
        raise _fail(fn, f"{name} must be {want}-D {layout}, got shape {t.shape}")


def linear_args(fn: str, x: Tensor, w: Tensor, b: Tensor | None) -> None:
    """``linear(input, weight, bias)``: float input, a 2-D weight of its dtype and width, bias (out,)."""
    floating(fn, x)
    rank_is(fn, w, 2, "weight", "(out_features, in_features)")
    same_dtype(fn, w, "weight", x)
    same_dtype(fn, b, "bias", x)
    if x.ndim == 0 or x.shape[-1] != w.shape[1]:
        raise _fail(
            fn, f"input's last dimension must equal weight's in_features={w.shape[1]}, got input of shape {x.shape}"
        )
    shape_is(fn, b, (w.shape[0],), "bias")


def embedding_ids(fn: str, ids: Tensor, table: Tensor) -> None:
    """Integer ids, each in [0, num_embeddings) of a 2-D table: the first bad id is named with its
    position and the table size, before anything is gathered (a negative id would wrap around)."""
    rank_is(fn, table, 2, "weight", "(num_embeddings, embedding_dim)")
    if ids.dtype.is_floating_point or ids.dtype.name == "bool":
        raise _fail(fn, f"input must be an integer array, got dtype {ids.dtype.name}", DTypeError)
    values = ids._array()
    num = int(table.shape[0])
    xp = ids._xp
    bad = (values < 0) | (values >= num)
    if bool(xp.any(bad)):
        where = tuple(int(i) for i in xp.argwhere(bad)[0])
        raise _fail(
            fn,
            f"embedding id {int(values[where])} at position {where} is out of range for a table of {num} rows "
            f"(ids must lie in [0, {num - 1}])",
            IndexingError,
        )


def norm_args(fn: str, x: Tensor, normalized_shape: Any, *params: tuple[str, Tensor | None]) -> None:
    """The trailing dims of ``x`` are ``normalized_shape``; each affine parameter has that shape and x's dtype."""
    floating(fn, x)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(int(s) for s in normalized_shape)
    k = len(shape)
    if k == 0 or x.ndim < k or x.shape[-k:] != shape:
        raise _fail(
            fn, f"input's trailing dimensions must equal normalized_shape={shape}, got input of shape {x.shape}"
        )
    for name, t in params:
        same_dtype(fn, t, name, x)
        shape_is(fn, t, shape, name)


def dim_in_range(fn: str, dim: int, ndim: int) -> int:
    """``dim`` as a non-negative axis (a 0-d tensor has one: torch's rule); IndexingError otherwise."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise _fail(fn, f"dim={dim} is out of range for a {ndim}-D array (expected {-n} to {n - 1})", IndexingError)
    return dim % n


def _broadcast(fn: str, shapes: list[tuple[int, ...]], names: list[str]) -> tuple[int, ...]:
    """The shape ``shapes`` broadcast to, or ShapeError naming the two arguments that disagree."""
    ndim = max(len(s) for s in shapes)
    out: list[int] = []
    for axis in range(-ndim, 0):
        size, owner = 1, ""
        for shape, name in zip(shapes, names, strict=True):
            n = shape[axis] if -axis <= len(shape) else 1
            if n == 1:
                continue
            if size not in (1, n):
                raise _fail(
                    fn,
                    f"{owner} and {name} do not broadcast: size {size} vs {n} at dim {axis} "
                    f"(shapes {dict(zip(names, shapes, strict=True))})",
                )
            size, owner = n, name
        out.append(size)
    return tuple(out)


def attention_args(fn: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> None:
    """query (..., L, E), key (..., S, E), value (..., S, Ev) of one float dtype, batch dims and the
    mask broadcasting, and not both a mask and ``is_causal``."""
    floating(fn, q, "query")
    same_dtype(fn, k, "key", q, "query")
    same_dtype(fn, v, "value", q, "query")
    for t, name in ((q, "query"), (k, "key"), (v, "value")):
        if t.ndim < 2:
            raise _fail(fn, f"{name} must have at least 2 dims (..., length, features), got {t.shape}")
    if k.shape[-1] != q.shape[-1]:
        raise _fail(fn, f"key's feature dim must equal query's ({q.shape[-1]}), got key {k.shape} and query {q.shape}")
    if v.shape[-2] != k.shape[-2]:
        raise _fail(fn, f"value's length must equal key's ({k.shape[-2]}), got value {v.shape} and key {k.shape}")
    batch = _broadcast(fn, [q.shape[:-2], k.shape[:-2], v.shape[:-2]], ["query", "key", "value"])
    if mask is not None:
        if is_causal:
            raise _fail(fn, "pass either attn_mask or is_causal=True, not both (the causal mask is built here)")
        if mask.dtype.name != "bool":
            same_dtype(fn, mask, "attn_mask", q, "query (or use a bool mask)")
        _broadcast(fn, [mask.shape, (*batch, q.shape[-2], k.shape[-2])], ["attn_mask", "scores"])


def rotary_args(fn: str, x: Tensor, cos: Tensor, sin: Tensor) -> None:
    """input (..., D) with D even, cos and sin of its dtype, each broadcasting to input's shape."""
    floating(fn, x)
    same_dtype(fn, cos, "cos", x)
    same_dtype(fn, sin, "sin", x)
    if x.ndim == 0 or x.shape[-1] % 2:
        raise _fail(fn, f"input's last dim pairs features in halves, so it must be even; got input {x.shape}")
    for t, name in ((cos, "cos"), (sin, "sin")):
        if t.ndim == 0 or t.shape[-1] != x.shape[-1]:
            raise _fail(fn, f"{name}'s last dim must equal input's ({x.shape[-1]}), got {name} {t.shape}")
        if t.shape == x.shape[x.ndim - t.ndim :]:
            continue  # the tables of a step's positions: nothing to broadcast (checked on every call)
        if _broadcast(fn, [x.shape, t.shape], ["input", name]) != x.shape:
            raise _fail(fn, f"{name} {t.shape} must broadcast to input's shape {x.shape} without growing it")


def conv2d_args(fn: str, x: Tensor, w: Tensor, b: Tensor | None, groups: int) -> None:
    """Float input (N, C, H, W) or (C, H, W) with C = weight.shape[1] * groups; weight
    (out, in/groups, kh, kw) with out divisible by groups; bias (out,); one dtype."""
    floating(fn, x)
    rank_is(fn, w, 4, "weight", "(out_channels, in_channels / groups, kh, kw)")
    same_dtype(fn, w, "weight", x)
    same_dtype(fn, b, "bias", x)
    if w.shape[0] % groups:
        raise _fail(fn, f"weight's out_channels={w.shape[0]} must be divisible by groups={groups}")
    shape_is(fn, b, (w.shape[0],), "bias")
    rank_is(fn, x, (3, 4), "input", "(N, C, H, W) or (C, H, W)")
    in_channels = w.shape[1] * groups
    if x.shape[-3] != in_channels:
        raise _fail(
            fn,
            f"input has {x.shape[-3]} channels (shape {x.shape}) but the weight expects "
            f"in_channels = weight.shape[1] * groups = {w.shape[1]} * {groups} = {in_channels}",
        )
