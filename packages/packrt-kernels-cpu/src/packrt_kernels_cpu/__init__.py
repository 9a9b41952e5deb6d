"""packrt's CPU kernels, written against the array namespace of their inputs; numpy here.

Kernels never see packrt's ``Tensor`` or ``Module``. ``packrt-core`` finds a device's backend
under the entry-point group ``packrt.backends`` (``cpu`` is this package's :class:`CpuBackend`)
and reaches every kernel through that backend's ``kernels``: :data:`CPU_KERNELS`, this
package's table of the kernels contract (:class:`Kernels`, from packrt-base, as are
:class:`ArrayBackend` and the ``Kernel*Error`` classes, re-exported here).
"""

from packrt_base.arrays import FLOAT_DTYPES, HALF_DTYPES, array_namespace, compute_dtype
from packrt_base.backend import ArrayBackend
from packrt_base.geometry import Conv2dGeometry
from packrt_kernels_cpu.attention import scaled_dot_product_attention
from packrt_kernels_cpu.blocks import PackedBlockLinear, borrow_block_linear, pack_block_linear
from packrt_kernels_cpu.conv import conv2d, conv2d_geometry
from packrt_kernels_cpu.cpu import CpuBackend
from packrt_kernels_cpu.errors import (
    BlasUnavailableError,
    KernelDTypeError,
    KernelError,
    KernelIndexError,
    KernelShapeError,
    SettingError,
)
from packrt_kernels_cpu.functional import (
    embedding,
    gelu,
    layer_norm,
    linear,
    relu,
    rms_norm,
    rotary_embedding,
    sigmoid,
    silu,
    softmax,
)
from packrt_kernels_cpu.kernel_set import CPU_KERNELS, Kernels
from packrt_kernels_cpu.packing import (
    Conv2dView,
    LinearView,
    PackedConv2d,
    PackedEmbedding,
    PackedLinear,
    PanelLinear,
    borrow_conv2d,
    borrow_embedding,
    borrow_linear,
    linear_borrowed,
    pack_conv2d,
    pack_embedding,
    pack_linear,
)
from packrt_kernels_cpu.quantize import (
    QMAX,
    PackedQuantizedLinear,
    borrow_quantized_linear,
    dequantize,
    pack_quantized_linear,
    quantize_per_channel,
)
from packrt_kernels_cpu.special import erf, erfc
from packrt_kernels_cpu.tolerance import (
    KERNEL_TOLERANCES,
    MODEL_ROAD_TOLERANCES,
    ROAD_TOLERANCES,
    assert_same_model_output,
    road_tolerance,
    tolerance,
)

__all__ = [
    "BlasUnavailableError",
    "CPU_KERNELS",
    "FLOAT_DTYPES",
    "HALF_DTYPES",
    "KERNEL_TOLERANCES",
    "QMAX",
    "ROAD_TOLERANCES",
    "ArrayBackend",
    "Conv2dGeometry",
    "Conv2dView",
    "CpuBackend",
    "KernelDTypeError",
    "KernelError",
    "KernelIndexError",
    "KernelShapeError",
    "SettingError",
    "Kernels",
    "LinearView",
    "PackedConv2d",
    "PackedEmbedding",
    "PackedLinear",
    "PanelLinear",
    "PackedQuantizedLinear",
    "array_namespace",
    "borrow_conv2d",
    "borrow_embedding",
    "borrow_linear",
    "borrow_quantized_linear",
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
    "pack_block_linear",
    "borrow_block_linear",
    "PackedBlockLinear",
    "quantize_per_channel",
    "relu",
    "rms_norm",
    "road_tolerance",
    "assert_same_model_output",
    "MODEL_ROAD_TOLERANCES",
    "rotary_embedding",
    "scaled_dot_product_attention",
    "sigmoid",
    "silu",
    "softmax",
    "tolerance",
]
__version__ = "0.2.0"
