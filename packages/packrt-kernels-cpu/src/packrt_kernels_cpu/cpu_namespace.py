"""The array namespace CpuBackend hands packrt-core, which Tensor arithmetic calls: numpy's own, except
that ``add``, ``subtract`` and ``multiply`` of two large float32 arrays of one shape run on numba's
pool. numpy's loops stay on one core, and the pool's workers, kept busy, wake faster for the
LayerNorm that follows (docs/benchmarks.md measures a residual add). Every other case of the three
(broadcasting, scalars, other dtypes, ``out=`` or other keywords) and every other name is numpy's,
looked up on first use. The results are numpy's bits: each element is one IEEE operation either way.
"""

from __future__ import annotations

from typing import Any

import numpy

from packrt_kernels_cpu import fused


def add(a: Any, b: Any, /, **kwargs: Any) -> Any:
    """``numpy.add``; on the pool for two large float32 arrays of one shape (no keywords)."""
    if not kwargs and fused.binary_takes(a, b):
        return fused.binary("add", a, b)
    return numpy.add(a, b, **kwargs)


def subtract(a: Any, b: Any, /, **kwargs: Any) -> Any:
    """``numpy.subtract``; on the pool for two large float32 arrays of one shape (no keywords)."""
    if not kwargs and fused.binary_takes(a, b):
        return fused.binary("subtract", a, b)
    return numpy.subtract(a, b, **kwargs)


def multiply(a: Any, b: Any, /, **kwargs: Any) -> Any:
    """``numpy.multiply``; on the pool for two large float32 arrays of one shape (no keywords)."""
    if not kwargs and fused.binary_takes(a, b):
        return fused.binary("multiply", a, b)
    return numpy.multiply(a, b, **kwargs)


def __getattr__(name: str) -> Any:
    """Every other name is numpy's, kept here after its first lookup (a plain lookup from then on)."""
    value = getattr(numpy, name)
    globals()[name] = value
    return value
