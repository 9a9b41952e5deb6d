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
from packrt_kernels_cpu.attention import scaled_dot_product_attention
from packrt_kernels_cpu.conv import Conv2dGeometry, conv2d, conv2d_geometry
from packrt_kernels_cpu.cpu import CpuBackend
from packrt_kernels_cpu.functional import (
    embedding,
    gelu,
    layer_norm,
    linear,
    relu,
    rms_norm,
    sigmoid,
    silu,
    softmax,
)
from packrt_kernels_cpu.namespace import FLOAT_DTYPES, HALF_DTYPES, array_namespace, compute_dtype
from packrt_kernels_cpu.packing import (
    PackedConv2d,
    PackedEmbedding,
    PackedLinear,
    linear_borrowed,
    pack_conv2d,
    pack_embedding,
    pack_linear,
)
from packrt_kernels_cpu.quantize import (
    QMAX,
    PackedQuantizedLinear,
    dequantize,
    pack_quantized_linear,
    quantize_per_channel,
)
from packrt_kernels_cpu.special import erf, erfc
from packrt_kernels_cpu.tolerance import KERNEL_TOLERANCES, tolerance

__all__ = [
    "BINARY_OPS",
    "FLOAT_DTYPES",
    "HALF_DTYPES",
    "INPLACE_OPS",
    "KERNEL_TOLERANCES",
    "QMAX",
    "REDUCTIONS",
    "UNARY_OPS",
    "ArrayBackend",
    "Conv2dGeometry",
    "CpuBackend",
    "PackedConv2d",
    "PackedEmbedding",
    "PackedLinear",
    "PackedQuantizedLinear",
    "array_namespace",
    "compute_dtype",
    "conv2d",
    "conv2d_geometry",
    "dequantize",
    "embedding",
    "erf",
    "erfc",
    "gelu",
    "layer_norm",
    "linear",
    "linear_borrowed",
    "pack_conv2d",
    "pack_embedding",
    "pack_linear",
    "pack_quantized_linear",
    "quantize_per_channel",
    "relu",
    "rms_norm",
    "scaled_dot_product_attention",
    "sigmoid",
    "silu",
    "softmax",
    "tolerance",
]
__version__ = "0.1.0"
