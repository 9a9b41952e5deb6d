"""What every kernel shares: the array namespace, the float dtypes, the compute dtype, checks.

Kernels are written once against an array namespace ``xp`` (numpy here, cupy in
packrt-kernels-cuda) and find it from their input with :func:`array_namespace`. Half
precision (float16, bfloat16) is computed in float32 and rounded once on the way out,
because numpy has no fast half GEMM and summing in half loses most of its digits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import array_api_compat
import ml_dtypes
import numpy as np

from packrt_kernels_cpu import fused
from packrt_kernels_cpu.errors import KernelDTypeError, KernelShapeError

Array = Any  # numpy.ndarray on the CPU, cupy.ndarray on CUDA

FLOAT16 = np.dtype(np.float16)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
# bfloat16's numpy kind is "V" (an ml_dtypes extension type), so "is it a float" is this set.
FLOAT_DTYPES: frozenset[np.dtype[Any]] = frozenset({FLOAT16, BFLOAT16, FLOAT32, FLOAT64})
HALF_DTYPES: frozenset[np.dtype[Any]] = frozenset({FLOAT16, BFLOAT16})


def array_namespace(*arrays: Any) -> ModuleType:
    """The namespace (``numpy``, ``cupy``, ...) the arrays live in, found with array-api-compat.

    numpy arrays, by far the common case on the hot path, are answered without the lookup;
    Python numbers mixed in are ignored, as array-api-compat ignores them.
    """
    if all(type(a) is np.ndarray for a in arrays):
        return np
    namespace: ModuleType = array_api_compat.array_namespace(*arrays, use_compat=False)
    return namespace


def astype(a: Array, dtype: Any) -> Array:
    """``a`` in ``dtype``, copying only when the dtype changes; bfloat16 <-> float32 on the CPU
    takes the fused bit-arithmetic path (``fused.cast``) instead of ml_dtypes' slow loop."""
    dt = np.dtype(dtype)
    if a.dtype == dt:
        return a
    if fused.casts(a, dt):
        return fused.cast(a, dt)
    return a.astype(dt)


def compute_dtype(dtype: Any) -> np.dtype[Any]:
    """The dtype a kernel does its arithmetic in: float32 for half inputs, the dtype itself otherwise."""
    dt: np.dtype[Any] = np.dtype(dtype)
    return FLOAT32 if dt in HALF_DTYPES else dt


def dtype_name(dtype: Any) -> str:
    """The dtype's short name ("float16", "bfloat16", ...), as messages and tolerance tables use it."""
    return str(np.dtype(dtype).name)


def require_float(a: Array, name: str) -> np.dtype[Any]:
    """``a``'s dtype, after checking it is one of the four float dtypes kernels compute in.

    Raises TypeError naming the argument when it is not (integers, bool, complex, float8).
    """
    dt: np.dtype[Any] = np.dtype(a.dtype)
    if dt not in FLOAT_DTYPES:
        raise KernelDTypeError(
            f"{name} has dtype {dt.name}; expected one of float16, bfloat16, float32, float64 "
            f"(convert it with .astype(...) first)"
        )
    return dt


def require_same_dtype(expected: np.dtype[Any], a: Array | None, name: str, ref: str) -> None:
    """Raise TypeError when ``a`` (if given) does not share the dtype of argument ``ref``."""
    if a is not None and np.dtype(a.dtype) != expected:
        raise KernelDTypeError(
            f"{name} has dtype {np.dtype(a.dtype).name} but {ref} has {expected.name}; "
            f"kernels do not mix dtypes, cast one of them first"
        )


def require_ndim(a: Array, ndim: int | Sequence[int], name: str, layout: str) -> None:
    """Raise ValueError naming ``name`` when its rank is not ``ndim`` (an int or the allowed ranks)."""
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if a.ndim not in allowed:
        want = " or ".join(str(n) for n in allowed)
        raise KernelShapeError(f"{name} must be {want}-D {layout}, got shape {tuple(a.shape)}")


def require_shape(a: Array | None, expected: Sequence[int], name: str) -> None:
    """Raise ValueError naming ``name`` when ``a`` (if given) does not have shape ``expected``."""
    if a is not None and tuple(a.shape) != tuple(expected):
        raise KernelShapeError(f"{name} must have shape {tuple(expected)}, got {tuple(a.shape)}")


@contextlib.contextmanager
def quiet(xp: ModuleType) -> Iterator[None]:
    """Silence numpy's floating-point warnings for the block (inf - inf in a masked softmax is meant).

    cupy raises no such warnings and has no ``errstate``, so other namespaces get a no-op.
    """
    errstate = getattr(xp, "errstate", None)
    if errstate is None:
        yield
        return
    with errstate(all="ignore"):
        yield
