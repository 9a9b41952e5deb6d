"""The root of packrt's exception hierarchy and the errors kernels raise.

:class:`PackrtError` lives at the bottom of the stack so every packrt distribution (hooks, core,
io, the models) can raise it without importing another: one ``except PackrtError`` catches all
of them. packrt-hooks and packrt-core re-export it.

Kernels know arrays, not packrt's error hierarchy, so they raise the ``Kernel*Error`` classes,
each also the builtin a numpy user expects; packrt-core maps each one to its own error one to
one (``KernelShapeError`` -> ``ShapeError`` and so on), prefixed with the public function that
called the kernel. They are deliberately not ``PackrtError`` subclasses: one that reached a user
unmapped would carry no function name, and ``except PackrtError`` should not make that look meant.
Messages already use torch.nn.functional's argument names (``input``, ``weight``, ...), which
callers pass in, so nothing downstream rewrites them.
"""

from __future__ import annotations


class PackrtError(Exception):
    """Base class of every error packrt raises on purpose."""


class KernelError(Exception):
    """Root of the errors a kernel raises on purpose."""


class KernelShapeError(KernelError, ValueError):
    """An argument's shape, rank or geometry does not fit the kernel."""


class KernelDTypeError(KernelError, TypeError):
    """An argument's dtype is not one the kernel computes in, or two arguments' dtypes differ."""


class KernelIndexError(KernelError, IndexError):
    """An index (an embedding id, a dimension) lies outside its range."""


__all__ = ["KernelDTypeError", "KernelError", "KernelIndexError", "KernelShapeError", "PackrtError"]
