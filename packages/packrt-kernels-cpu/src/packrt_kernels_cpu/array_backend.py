"""The kernel interface every packrt backend implements, written once against ``xp``.

A backend is a small object that turns array-level requests ("add these two arrays",
"fill this one with normal samples") into calls on its array namespace. Core validates
shapes, dtypes and devices before it calls in, so kernels assume well-formed input and
stay on the hot path without checks of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

Array = Any  # numpy.ndarray on the CPU, cupy.ndarray on CUDA

# Each table maps the operation name core uses to the ufunc (or function) name in xp.
BINARY_OPS: dict[str, str] = {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "div": "true_divide",
    "floordiv": "floor_divide",
    "mod": "remainder",
    "pow": "power",
    "eq": "equal",
    "ne": "not_equal",
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
    "and": "logical_and",
    "or": "logical_or",
    "maximum": "maximum",
    "minimum": "minimum",
}
UNARY_OPS: dict[str, str] = {
    "neg": "negative",
    "abs": "abs",
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "tanh": "tanh",
    "sin": "sin",
    "cos": "cos",
    "not": "logical_not",
    "isfinite": "isfinite",
}
INPLACE_OPS: dict[str, str] = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "true_divide"}
REDUCTIONS: frozenset[str] = frozenset({"sum", "mean", "max", "min", "argmax", "argmin", "any", "all"})

# numpy's random generator draws only float32/float64; narrower floats are drawn in
# float32 and rounded once, which is what a user initialising fp16/bf16 weights expects.
_DRAW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class ArrayBackend:
    """Array kernels over one namespace (``numpy`` here, ``cupy`` in packrt-kernels-cuda).

    ``name`` is the device type the backend serves ("cpu", "cuda"); ``index`` arguments
    select a device ordinal and are ignored by single-device backends.
    """

    name: str = "array"

    def __init__(self, xp: ModuleType) -> None:
        self.xp = xp
        self._generator = np.random.default_rng()

    # -- availability --------------------------------------------------------------
    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def unavailable_reason(self) -> str:
        return ""

    # -- creation and transfer -----------------------------------------------------
    def asarray(self, data: Any, dtype: np.dtype | None, index: int = 0) -> Array:
        return self.xp.asarray(data, dtype=dtype)

    def empty(self, shape: Sequence[int], dtype: np.dtype, index: int = 0) -> Array:
        return self.xp.empty(tuple(shape), dtype=dtype)

    def full(self, shape: Sequence[int], value: Any, dtype: np.dtype, index: int = 0) -> Array:
        return self.xp.full(tuple(shape), value, dtype=dtype)

    def arange(self, start: Any, stop: Any, step: Any, dtype: np.dtype, index: int = 0) -> Array:
        return self.xp.arange(start, stop, step, dtype=dtype)

    def to_host(self, a: Array) -> np.ndarray:
        return np.asarray(a)

    def from_host(self, a: np.ndarray, index: int = 0) -> Array:
        return self.xp.asarray(a)

    def astype(self, a: Array, dtype: np.dtype) -> Array:
        return a.astype(dtype, copy=True)

    def copy(self, a: Array) -> Array:
        return a.copy()

    def ascontiguous(self, a: Array) -> Array:
        return self.xp.ascontiguousarray(a)

    # -- random --------------------------------------------------------------------
    def manual_seed(self, seed: int) -> None:
        self._generator = np.random.default_rng(seed)

    def _draw(self, kind: str, shape: tuple[int, ...], dtype: np.dtype, a: float, b: float) -> np.ndarray:
        draw = dtype if dtype in _DRAW_DTYPES else np.dtype(np.float32)
        if kind == "normal":
            out = self._generator.standard_normal(shape, dtype=draw)
            out *= b
            out += a
        else:
            out = self._generator.random(shape, dtype=draw)
            out *= b - a
            out += a
        return out.astype(dtype, copy=False)

    def random(self, kind: str, shape: Sequence[int], dtype: np.dtype, a: float, b: float, index: int = 0) -> Array:
        """Samples of ``kind`` ("normal": mean a, std b; "uniform": [a, b))."""
        return self.from_host(self._draw(kind, tuple(shape), dtype, a, b), index)

    def random_(self, kind: str, dst: Array, a: float, b: float) -> None:
        dst[...] = self.from_host(self._draw(kind, tuple(dst.shape), dst.dtype, a, b))

    # -- math ----------------------------------------------------------------------
    def binary(self, op: str, a: Any, b: Any) -> Array:
        return getattr(self.xp, BINARY_OPS[op])(a, b)

    def unary(self, op: str, a: Array) -> Array:
        return getattr(self.xp, UNARY_OPS[op])(a)

    def matmul(self, a: Array, b: Array) -> Array:
        return self.xp.matmul(a, b)

    def reduce(self, op: str, a: Array, axis: int | tuple[int, ...] | None, keepdims: bool) -> Array:
        return getattr(self.xp, op)(a, axis=axis, keepdims=keepdims)

    def where(self, cond: Array, a: Any, b: Any) -> Array:
        return self.xp.where(cond, a, b)

    def take_along_axis(self, a: Array, indices: Array, axis: int) -> Array:
        return self.xp.take_along_axis(a, indices, axis=axis)

    def shares_memory(self, a: Array, b: Array) -> bool:
        """Whether two arrays may overlap (a bounds check, not an exact answer)."""
        return bool(self.xp.may_share_memory(a, b))

    # -- in-place writes -----------------------------------------------------------
    def inplace(self, op: str, dst: Array, src: Any) -> None:
        getattr(self.xp, INPLACE_OPS[op])(dst, src, out=dst, casting="same_kind")

    def copy_into(self, dst: Array, src: Any) -> None:
        self.xp.copyto(dst, src, casting="unsafe")

    def fill(self, dst: Array, value: Any) -> None:
        dst.fill(value)

    def setitem(self, dst: Array, index: Any, value: Any) -> None:
        dst[index] = value
