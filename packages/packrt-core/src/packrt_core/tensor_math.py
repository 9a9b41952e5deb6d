"""The arithmetic behind Tensor's operators, as free functions over arrays and packrt dtypes.

Each function takes the array namespace ``xp`` of its operands (numpy on the CPU, cupy on
CUDA) and calls it directly, by its array-API name: there is no table of operation names in
between. Operands meet in PyTorch's promoted dtype (:func:`packrt_core.dtypes.promote_types`);
Python numbers are weak. Half precision reduces and multiplies in float32 and rounds once,
since numpy has no fast half-precision kernels. Nothing here knows the Tensor class: it
wraps what these functions return.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from packrt_core.dtypes import (
    bfloat16,
    bool_,
    dtype,
    float16,
    float32,
    from_numpy_dtype,
    promote_types,
    promote_with_scalar,
)
from packrt_core.errors import DTypeError, IndexingError, ShapeError

Array = Any
NUMBER = (int, float, bool, np.number, np.bool_)
COMPARISONS = frozenset({"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})
BITWISE = frozenset({"bitwise_and", "bitwise_or", "bitwise_xor"})  # & | ^: bool and integer tensors only
HALF = (float16, bfloat16)


def shape_of(size: Sequence[Any]) -> tuple[int, ...]:
    """``f(2, 3)`` and ``f((2, 3))`` both mean shape (2, 3)."""
    if len(size) == 1 and isinstance(size[0], tuple | list):
        size = tuple(size[0])
    try:
        shape = tuple(int(s) for s in size)
    except (TypeError, ValueError) as err:
        raise ShapeError(f"a shape is a sequence of ints, got {tuple(size)!r}") from err
    return shape


def normalize_dim(d: int, ndim: int) -> int:
    """A dimension normalized to 0..ndim-1 (negative counts from the end)."""
    lo, hi = (-ndim, ndim - 1) if ndim else (-1, 0)
    if not lo <= d <= hi:
        raise IndexingError(f"dimension {d} is out of range for a {ndim}-d tensor (expected {lo}..{hi})")
    return d % ndim if ndim else 0


def broadcast(a: tuple[int, ...], b: tuple[int, ...], op: str) -> tuple[int, ...]:
    """The shape ``a`` and ``b`` broadcast to, or ShapeError naming ``op``."""
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError as err:
        raise ShapeError(f"{op}: shapes {a} and {b} do not broadcast") from err


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether an operand of ``shape`` broadcasts to exactly ``target``."""
    try:
        return tuple(np.broadcast_shapes(shape, target)) == target
    except ValueError:
        return False


def binary(
    xp: ModuleType, op: str, a: Array, a_dtype: dtype, b: Array, b_dtype: dtype | None, reverse: bool = False
) -> Array:
    """``xp.<op>(a, b)`` in the promoted dtype; ``b_dtype`` None means ``b`` is a Python number,
    which ``reverse`` puts on the left (``2 - t``)."""
    if b_dtype is not None:
        target = promote_types(a_dtype, b_dtype)
        if b_dtype is not target:
            b = b.astype(target.numpy)
        if a.shape != b.shape:
            broadcast(a.shape, b.shape, op)
    else:
        target = promote_with_scalar(a_dtype, b)
    if op == "divide" and not target.is_floating_point:
        target = float32  # true division of integers gives the default float, as in PyTorch
    if op in BITWISE and target.is_floating_point:
        raise DTypeError(f"{op} (& | ^) needs bool or integer tensors, got {target.name}: compare first (t > 0)")
    if a_dtype is not target:
        a = a.astype(target.numpy)
    try:
        out = getattr(xp, op)(b, a) if reverse else getattr(xp, op)(a, b)
    except OverflowError as err:
        raise DTypeError(f"{op}: the number {b!r} does not fit {target.name}") from err
    want = bool_.numpy if op in COMPARISONS else target.numpy
    return out if out.dtype == want else out.astype(want)


def unary(xp: ModuleType, op: str, a: Array, a_dtype: dtype) -> Array:
    """``xp.<op>(a)``; math functions of integers compute in float32, as in PyTorch."""
    if op not in ("abs", "negative") and not a_dtype.is_floating_point:
        a = a.astype(float32.numpy)
    return getattr(xp, op)(a)


def matmul(xp: ModuleType, a: Array, a_dtype: dtype, b: Array, b_dtype: dtype) -> Array:
    """``a @ b`` with PyTorch's shape rules and messages; half precision computes in float32."""
    sa, sb = tuple(a.shape), tuple(b.shape)
    if not sa or not sb:
        raise ShapeError("matmul needs tensors with at least one dimension (use * for scalars)")
    inner_b = sb[0] if len(sb) == 1 else sb[-2]
    if sa[-1] != inner_b:
        raise ShapeError(
            f"matmul: shapes {sa} and {sb} do not fit: {sa[-1]} != {inner_b} "
            "(the last dimension of the first must equal the second-to-last of the second)"
        )
    if len(sa) > 2 and len(sb) > 2:
        broadcast(sa[:-2], sb[:-2], "matmul batch dimensions")
    target = promote_types(a_dtype, b_dtype)
    if target is bool_:
        raise DTypeError("matmul of bool tensors is not defined: cast to an integer or float dtype first")
    if a_dtype is not target:
        a = a.astype(target.numpy)
    if b_dtype is not target:
        b = b.astype(target.numpy)
    if target in HALF:  # numpy has no fast half GEMM: compute in float32, round once
        return xp.matmul(a.astype(np.float32), b.astype(np.float32)).astype(target.numpy)
    return xp.matmul(a, b)


def reduce(
    xp: ModuleType, op: str, a: Array, a_dtype: dtype, axes: int | tuple[int, ...] | None, keepdim: bool
) -> Array:
    """``sum`` / ``mean`` (half accumulates in float32; integers and bools sum to int64)."""
    if a_dtype in HALF:
        out = getattr(xp, op)(a.astype(np.float32), axis=axes, keepdims=keepdim)
        return out.astype(a_dtype.numpy)
    if not a_dtype.is_floating_point:
        a = a.astype(np.int64)
    return getattr(xp, op)(a, axis=axes, keepdims=keepdim)


def inplace_source(
    xp: ModuleType,
    op: str,
    label: str,
    dst_shape: tuple[int, ...],
    dst_dtype: dtype,
    src: Any,
    src_dtype: dtype | None,
    alpha: Any,
) -> Any:
    """What ``dst <op>= src`` adds in, after checking the result keeps ``dst``'s shape and dtype
    category (an in-place write cannot widen or reshape its tensor)."""
    target = (
        promote_types(dst_dtype, src_dtype)
        if src_dtype is not None
        else promote_with_scalar(dst_dtype, src)
        if isinstance(src, NUMBER)
        else from_numpy_dtype(np.asarray(src).dtype)
    )
    if op == "divide" and not target.is_floating_point:
        target = float32
    if target.category > dst_dtype.category:
        raise DTypeError(
            f"{label}: the result is {target.name} and cannot be written into this "
            f"{dst_dtype.name} tensor in place; use the out-of-place form"
        )
    shape = tuple(np.shape(src))
    if shape != dst_shape and not broadcasts_to(shape, dst_shape):
        raise ShapeError(
            f"{label} would change the tensor's shape from {dst_shape} to "
            f"{broadcast(dst_shape, shape, label)}: in-place results keep the shape"
        )
    if alpha is not None:
        src = xp.multiply(src, alpha)
    if src_dtype is not None and src_dtype is not dst_dtype:
        src = src.astype(dst_dtype.numpy)  # same category: meet in the destination's dtype
    return src
