"""The CPU's table of the kernels contract (:class:`packrt_base.kernels.Kernels`).

Layers never import a kernels package: they ask their tensors' device backend for its
``kernels`` and call what they need there. Building the record here is where mypy checks each
CPU kernel's signature against the contract's. These kernels are written against the array
namespace of their inputs, so packrt-kernels-cuda serves several of them on cupy arrays as
they are (its table names which).
"""

from __future__ import annotations

from packrt_base.kernels import Kernels
from packrt_kernels_cpu import functional
from packrt_kernels_cpu.attention import scaled_dot_product_attention
from packrt_kernels_cpu.blocks import (
    borrow_block_embedding,
    borrow_block_linear,
    pack_block_embedding,
    pack_block_linear,
)
from packrt_kernels_cpu.conv import conv2d, conv2d_geometry
from packrt_kernels_cpu.packing import (
    borrow_conv2d,
    borrow_embedding,
    borrow_linear,
    pack_conv2d,
    pack_embedding,
    pack_linear,
)
from packrt_kernels_cpu.plan import plan_kernels
from packrt_kernels_cpu.quantize import borrow_quantized_linear, pack_quantized_linear, quantize_per_channel

CPU_KERNELS = Kernels(  # keywords by kind: layers with weights, rows, attention, convolution, elementwise, packs
    linear=functional.linear,
    embedding=functional.embedding,
    layer_norm=functional.layer_norm,
    rms_norm=functional.rms_norm,
    softmax=functional.softmax,
    scaled_dot_product_attention=scaled_dot_product_attention,
    rotary_embedding=functional.rotary_embedding,
    conv2d=conv2d,
    conv2d_geometry=conv2d_geometry,
    relu=functional.relu,
    gelu=functional.gelu,
    sigmoid=functional.sigmoid,
    silu=functional.silu,
    pack_linear=pack_linear,
    borrow_linear=borrow_linear,
    pack_conv2d=pack_conv2d,
    borrow_conv2d=borrow_conv2d,
    pack_embedding=pack_embedding,
    borrow_embedding=borrow_embedding,
    pack_quantized_linear=pack_quantized_linear,
    borrow_quantized_linear=borrow_quantized_linear,
    quantize_per_channel=quantize_per_channel,
    plan_kernels=plan_kernels,
    pack_block_linear=pack_block_linear,
    borrow_block_linear=borrow_block_linear,
    pack_block_embedding=pack_block_embedding,
    borrow_block_embedding=borrow_block_embedding,
)


__all__ = ["CPU_KERNELS", "Kernels"]
