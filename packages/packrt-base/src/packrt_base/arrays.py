"""What every backend's kernels share: the array namespace, the float dtypes, the compute dtype, checks.

Kernels are written once against an array namespace ``xp`` (numpy on the CPU, cupy on CUDA) and
find it from their input with :func:`array_namespace` (array-api-compat's lookup, rather than
class names sniffed by hand). Half precision (float16, bfloat16) is
computed in float32 and rounded once on the way out (:func:`compute_dtype`), because summing in
half loses most of its digits. The ``require_*`` checks raise the kernel errors of
:mod:`packrt_base.errors` with the argument's name, so every backend refuses bad input alike.

``BFLOAT16``, ``FLOAT_DTYPES`` and ``HALF_DTYPES`` hold ml_dtypes' bfloat16, and ml_dtypes is imported
the first time one of them (or :func:`bfloat16_dtype`) is read, not with this module: importing it
costs more CPU than the rest of ``import packrt`` together.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import array_api_compat
import numpy as np

from packrt_base.errors import KernelDTypeError, KernelShapeError

Array = Any  # numpy.ndarray on the CPU, cupy.ndarray on CUDA

FLOAT16 = np.dtype(np.float16)
FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
_IEEE_FLOATS: frozenset[np.dtype[Any]] = frozenset({FLOAT16, FLOAT32, FLOAT64})

if TYPE_CHECKING:  # made on first read by __getattr__ below; declared here for the type checker
    BFLOAT16: np.dtype[Any]
    # bfloat16's numpy kind is "V" (an ml_dtypes extension type), so "is it a float" is this set.
    FLOAT_DTYPES: frozenset[np.dtype[Any]]
    HALF_DTYPES: frozenset[np.dtype[Any]]


@functools.cache
def bfloat16_dtype() -> np.dtype[Any]:
    """ml_dtypes' bfloat16 as a numpy dtype (the same object as ``BFLOAT16``); imports ml_dtypes on
    the first call."""
    import ml_dtypes  # deferred: the import alone is most of `import packrt`'s CPU time

    made: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return made


def _lazy_constant(name: str) -> frozenset[np.dtype[Any]] | np.dtype[Any] | None:
    if name == "BFLOAT16":
        return bfloat16_dtype()
    if name == "FLOAT_DTYPES":
        return frozenset({*_IEEE_FLOATS, bfloat16_dtype()})
    if name == "HALF_DTYPES":
        return frozenset({FLOAT16, bfloat16_dtype()})
    return None


def __getattr__(name: str) -> object:
    value = _lazy_constant(name)
    if value is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later reads find it without coming here
    return value


def is_bfloat16(dt: np.dtype[Any]) -> bool:
    """Whether ``dt`` is bfloat16; ml_dtypes is imported only for a dtype of numpy kind "V" (bfloat16's
    kind), so float32 and integer checks never load it."""
    return dt.kind == "V" and dt == bfloat16_dtype()


def array_namespace(*arrays: Any) -> ModuleType:
    """The namespace (``numpy``, ``cupy``, ...) the arrays live in, found with array-api-compat.

    numpy arrays, by far the common case on the hot path, are answered without the lookup;
    Python numbers mixed in are ignored, as array-api-compat ignores them. Arrays of two
    namespaces, or an object of no array library, raise TypeError.
    """
    if all(type(a) is np.ndarray for a in arrays):
        return np
    namespace: ModuleType = array_api_compat.array_namespace(*arrays, use_compat=False)
    return namespace


def astype(a: Array, dtype: Any) -> Array:
    """``a`` in ``dtype``, copying only when the dtype changes (a backend may take a faster road:
    the CPU converts large bfloat16 <-> float32 arrays with its compiled cast)."""
    dt = np.dtype(dtype)
    return a if a.dtype == dt else a.astype(dt)


def compute_dtype(dtype: Any) -> np.dtype[Any]:
    """The dtype a kernel does its arithmetic in: float32 for half inputs, the dtype itself otherwise."""
    dt: np.dtype[Any] = np.dtype(dtype)
    return FLOAT32 if dt == FLOAT16 or is_bfloat16(dt) else dt


def dtype_name(dtype: Any) -> str:
    """The dtype's short name ("float16", "bfloat16", ...), as messages and tolerance tables use it."""
    return str(np.dtype(dtype).name)


def require_float(a: Array, name: str) -> np.dtype[Any]:
    """``a``'s dtype, after checking it is one of the four float dtypes kernels compute in.

    Raises TypeError naming the argument when it is not (integers, bool, complex, float8).
    """
    dt: np.dtype[Any] = np.dtype(a.dtype)
    if dt not in _IEEE_FLOATS and not is_bfloat16(dt):
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


def check_linear_args(x: Array, w: Array, b: Array | None) -> np.dtype[Any]:
    """Validate ``linear``'s arguments (float input, a 2-D weight of the input's dtype whose
    in_features match, a bias of out_features); return the shared dtype. Every backend's
    ``pack_linear`` runs it at load time, so each refuses a bad weight with the same words."""
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


__all__ = [
    "BFLOAT16",
    "FLOAT16",
    "FLOAT32",
    "FLOAT64",
    "FLOAT_DTYPES",
    "HALF_DTYPES",
    "Array",
    "array_namespace",
    "astype",
    "bfloat16_dtype",
    "check_linear_args",
    "compute_dtype",
    "dtype_name",
    "is_bfloat16",
    "require_float",
    "require_ndim",
    "require_same_dtype",
    "require_shape",
]
