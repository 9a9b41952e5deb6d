"""packrt's CPU kernels: numpy (and ml_dtypes for bfloat16) arrays in, arrays out.

Kernels never see packrt's ``Tensor`` or ``Module``; ``packrt-core`` wraps arrays and
dispatches each operation to the backend registered for a tensor's device under the
entry-point group ``packrt.backends``. :class:`ArrayBackend` is written against an array
namespace (``xp``) so the CUDA backend runs the same code on cupy.
"""

from packrt_kernels_cpu.array_backend import (
    BINARY_OPS,
    INPLACE_OPS,
    REDUCTIONS,
    UNARY_OPS,
    ArrayBackend,
)
from packrt_kernels_cpu.cpu import CpuBackend

__all__ = [
    "BINARY_OPS",
    "INPLACE_OPS",
    "REDUCTIONS",
    "UNARY_OPS",
    "ArrayBackend",
    "CpuBackend",
]
__version__ = "0.1.0"
