"""The kernels a device serves, as one typed record: what packrt-core's layers and functions call.

Layers never import a kernels package: they ask their tensors' device backend for its
``kernels`` and call what they need there, so the same layer code runs numpy kernels on the
CPU and cupy kernels (plus any GPU-only fused ones) on CUDA. packrt-kernels-cuda starts from
:data:`CPU_KERNELS`, which are written against the array namespace of their inputs, and
replaces entries with ``dataclasses.replace``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from packrt_kernels_cpu import functional
from packrt_kernels_cpu.attention import scaled_dot_product_attention
from packrt_kernels_cpu.conv import conv2d, conv2d_geometry
from packrt_kernels_cpu.packing import (
    borrow_conv2d,
    borrow_embedding,
    borrow_linear,
    pack_conv2d,
    pack_embedding,
    pack_linear,
)
from packrt_kernels_cpu.quantize import borrow_quantized_linear, pack_quantized_linear, quantize_per_channel

Kernel = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Kernels:
    """One device's kernels by name. ``pack_*`` build a layer's owned serving form; ``borrow_*``
    build a zero-copy one over the declared arrays; both serve through ``.forward(x)``."""

    linear: Kernel
    embedding: Kernel
    conv2d: Kernel
    conv2d_geometry: Kernel
    layer_norm: Kernel
    rms_norm: Kernel
    relu: Kernel
    gelu: Kernel
    sigmoid: Kernel
    silu: Kernel
    softmax: Kernel
    scaled_dot_product_attention: Kernel
    rotary_embedding: Kernel
    pack_linear: Kernel
    borrow_linear: Kernel
    pack_conv2d: Kernel
    borrow_conv2d: Kernel
    pack_embedding: Kernel
    borrow_embedding: Kernel
    pack_quantized_linear: Kernel
    borrow_quantized_linear: Kernel
    quantize_per_channel: Kernel


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
)
