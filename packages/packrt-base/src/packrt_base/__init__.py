"""The bottom of packrt's stack: what every other packrt distribution may import.

- :class:`PackrtError`, the root of packrt's exception hierarchy, and the ``Kernel*Error``
  classes kernels raise (:mod:`packrt_base.errors`).
- The kernels contract: :class:`Kernels`, one typed field per kernel, the serving forms
  (:class:`Pack`, :class:`OwnedPack`) and :class:`Conv2dGeometry` (:mod:`packrt_base.kernels`).
- Block-quantized weight formats (llama.cpp's GGML block types): :data:`BLOCK_FORMATS`
  (:mod:`packrt_base.blocks`).
- The serving plan's kernels: :class:`PlanKernels`, what a device computes when a model runs as one
  fused plan (:mod:`packrt_base.plan`).
- The device contract: :class:`DeviceBackend`, and :class:`ArrayBackend`, a backend over one
  array namespace that the CPU and CUDA backends start from (:mod:`packrt_base.backend`).
- Handing a mapped file's pages back once a copy of them serves: :func:`packrt_base.pages.release_pages`.
- The array helpers every backend's kernels share: :func:`array_namespace`, the float dtypes,
  :func:`compute_dtype` and the argument checks (:mod:`packrt_base.arrays`).

It is its own distribution because the kernels packages implement the contract and packrt-core
consumes it, while packrt-core depends on the kernels packages (the CPU backend is always
there): the contract cannot live in core without a cycle, nor in one backend without the other
depending on it.
"""

from typing import TYPE_CHECKING

from packrt_base import arrays
from packrt_base.arrays import (
    FLOAT16,
    FLOAT32,
    FLOAT64,
    Array,
    array_namespace,
    astype,
    bfloat16_dtype,
    check_linear_args,
    compute_dtype,
    dtype_name,
    is_bfloat16,
    require_float,
    require_ndim,
    require_same_dtype,
    require_shape,
)
from packrt_base.backend import ArrayBackend, DeviceBackend
from packrt_base.blocks import BLOCK_FORMATS, BlockFormat, block_format
from packrt_base.errors import KernelDTypeError, KernelError, KernelIndexError, KernelShapeError, PackrtError
from packrt_base.geometry import Conv2dGeometry
from packrt_base.kernels import Kernels, OwnedPack, Pack
from packrt_base.plan import PlanKernels, PlanLinear

__all__ = [
    "BLOCK_FORMATS",
    "ArrayBackend",
    "BlockFormat",
    "Conv2dGeometry",
    "DeviceBackend",
    "KernelDTypeError",
    "KernelError",
    "KernelIndexError",
    "KernelShapeError",
    "Kernels",
    "OwnedPack",
    "Pack",
    "PackrtError",
    "PlanKernels",
    "PlanLinear",
    "block_format",
]
__all__ += [  # arrays.__all__, spelled out so that the lazy names below are listed too
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

# The dtype sets that hold bfloat16 are read from arrays on first use, so that `import packrt_base` does not
# import ml_dtypes (arrays' docstring says why).
_LAZY_FROM_ARRAYS = frozenset({"BFLOAT16", "FLOAT_DTYPES", "HALF_DTYPES"})
if TYPE_CHECKING:
    from packrt_base.arrays import BFLOAT16, FLOAT_DTYPES, HALF_DTYPES


def __getattr__(name: str) -> object:
    if name in _LAZY_FROM_ARRAYS:
        return getattr(arrays, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.1.0"
