"""The CPU's own array helpers: its fast cast, and warnings off.

The array namespace, the float dtypes, the compute dtype and the argument checks are the
kernels contract's: the CPU modules import them from :mod:`packrt_base.arrays`, as
packrt-kernels-cuda does. What is the CPU's own lives here: :func:`astype`, which converts
bfloat16 <-> float32 with the compiled cast, and :func:`quiet`, numpy's ``errstate``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np

from packrt_base.arrays import Array
from packrt_kernels_cpu import fused


def astype(a: Array, dtype: Any) -> Array:
    """``a`` in ``dtype``, copying only when the dtype changes; bfloat16 <-> float32 on the CPU
    takes the fused bit-arithmetic path (``fused.cast``) instead of ml_dtypes' slow loop."""
    dt = np.dtype(dtype)
    if a.dtype == dt:
        return a
    if fused.casts(a, dt):
        return fused.cast(a, dt)
    return a.astype(dt)


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


__all__ = ["astype", "quiet"]
