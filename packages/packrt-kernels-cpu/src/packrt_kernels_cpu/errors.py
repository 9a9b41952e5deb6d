"""The exceptions kernels raise: the contract's four (from packrt-base) and the CPU's own BLAS error.

``KernelError`` and its shape, dtype and index kinds are the kernels contract's
(:mod:`packrt_base.errors`), shared with every backend and mapped one to one by packrt-core;
they are re-exported here so ``packrt_kernels_cpu.KernelShapeError`` keeps working.
"""

from __future__ import annotations

from packrt_base.errors import KernelDTypeError, KernelError, KernelIndexError, KernelShapeError


class BlasUnavailableError(KernelError, ImportError):
    """``PACKRT_BLAS`` names a BLAS this process cannot load, or none packrt knows."""


class SettingError(KernelError, ValueError):
    """An environment variable that configures the CPU kernels holds a value packrt does not know."""


__all__ = [
    "BlasUnavailableError",
    "SettingError",
    "KernelDTypeError",
    "KernelError",
    "KernelIndexError",
    "KernelShapeError",
]
