"""The three exceptions kernels raise, each also the builtin a numpy user expects.

Kernels know arrays, not packrt's error hierarchy, so they raise these; packrt-core maps
each one to its own error one to one (``KernelShapeError`` -> ``ShapeError`` and so on).
Messages already use torch.nn.functional's argument names (``input``, ``weight``, ...), which
callers pass in, so nothing downstream rewrites them.
"""

from __future__ import annotations


class KernelError(Exception):
    """Root of the errors a kernel raises on purpose."""


class KernelShapeError(KernelError, ValueError):
    """An argument's shape, rank or geometry does not fit the kernel."""


class KernelDTypeError(KernelError, TypeError):
    """An argument's dtype is not one the kernel computes in, or two arguments' dtypes differ."""


class KernelIndexError(KernelError, IndexError):
    """An index (an embedding id, a dimension) lies outside its range."""


class BlasUnavailableError(KernelError, ImportError):
    """``PACKRT_BLAS`` names a BLAS this process cannot load, or none packrt knows."""


__all__ = ["BlasUnavailableError", "KernelDTypeError", "KernelError", "KernelIndexError", "KernelShapeError"]
