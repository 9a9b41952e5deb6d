"""The kernels contract: the typed record of what a device's backend computes, one field per kernel.

packrt-core's layers and functions never import a kernels package: they ask their tensors'
device backend for its :class:`Kernels` and call what they need there, so the same layer code
runs numpy kernels on the CPU and cupy kernels on CUDA. Each field's type is a Protocol whose
``__call__`` is the kernel's signature (argument names, defaults, return type), so mypy --strict
checks every backend's table where it is built: a kernel with a missing argument, another name
or another default is a type error there (``tests/test_kernels_contract.py`` proves it on a fixture).

Arrays are ``Any`` (numpy's or cupy's), so what the checker holds a kernel to is its arity,
names, defaults, the types of its non-array arguments and the serving forms its packs return.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from packrt_base.arrays import Array
from packrt_base.geometry import Conv2dGeometry, IntPair, Padding
from packrt_base.plan import PlanKernelsOf

Dims = int | Sequence[int]


class Pack(Protocol):
    """A serving form, what every weight residency calls: ``forward(x)`` and the bytes it keeps
    resident (0 for a view over the declared weights)."""

    @property
    def nbytes(self) -> int:
        """Bytes the form keeps resident (scratch a call allocates and frees is not counted)."""
        ...

    def forward(self, x: Array, /) -> Array:
        """The layer's output for ``x``, in ``x``'s dtype."""
        ...


class OwnedPack(Pack, Protocol):
    """A pack that owns its arrays and gives the declared ones back: ``unpack()`` returns new arrays
    equal bit for bit to those packed (a tuple in the pack function's argument order, or one array)."""

    def unpack(self) -> Any:
        """New arrays equal bit for bit to those packed."""
        ...


class UnaryKernel(Protocol):
    """``f(x)``: relu, sigmoid, silu."""

    def __call__(self, x: Array) -> Array: ...


class LinearKernel(Protocol):
    """``x @ w.T + b`` from the declared (out, in) weight."""

    def __call__(self, x: Array, w: Array, b: Array | None = None) -> Array: ...


class EmbeddingKernel(Protocol):
    """The rows of ``table`` for integer ``ids``."""

    def __call__(self, ids: Array, table: Array) -> Array: ...


class Conv2dKernel(Protocol):
    """torch.nn.functional.conv2d with the geometry resolved once."""

    def __call__(self, x: Array, w: Array, b: Array | None, geometry: Conv2dGeometry) -> Array: ...


class Conv2dGeometryKernel(Protocol):
    """Validate a convolution's arguments once and resolve its padding."""

    def __call__(
        self,
        kernel_size: tuple[int, int],
        stride: IntPair = 1,
        padding: Padding = 0,
        dilation: IntPair = 1,
        groups: int = 1,
    ) -> Conv2dGeometry: ...


class LayerNormKernel(Protocol):
    """LayerNorm over the trailing ``shape`` dims."""

    def __call__(
        self, x: Array, shape: Dims, w: Array | None = None, b: Array | None = None, eps: float = 1e-5
    ) -> Array: ...


class RmsNormKernel(Protocol):
    """RMSNorm over the trailing dims; ``eps=None`` is float32's machine epsilon."""

    def __call__(self, x: Array, shape: Dims, w: Array | None = None, eps: float | None = None) -> Array: ...


class GeluKernel(Protocol):
    """GELU, exact (``approximate="none"``) or tanh."""

    def __call__(self, x: Array, approximate: str = "none") -> Array: ...


class SoftmaxKernel(Protocol):
    """Softmax along ``dim``."""

    def __call__(self, x: Array, dim: int = -1) -> Array: ...


class AttentionKernel(Protocol):
    """``softmax(q @ k^T * scale + mask) @ v``; ``scale`` defaults to ``1/sqrt(E)``."""

    def __call__(
        self,
        q: Array,
        k: Array,
        v: Array,
        attn_mask: Array | None = None,
        is_causal: bool = False,
        scale: float | None = None,
    ) -> Array: ...


class RotaryKernel(Protocol):
    """Rotary position embedding of ``x`` with the given cos and sin tables."""

    def __call__(self, x: Array, cos: Array, sin: Array) -> Array: ...


class PackLinear(Protocol):
    """The owned serving form of a linear layer."""

    def __call__(self, w: Array, b: Array | None = None) -> OwnedPack: ...


class BorrowLinear(Protocol):
    """A zero-copy serving form over the declared linear weight."""

    def __call__(self, w: Array, b: Array | None = None) -> Pack: ...


class PackConv2d(Protocol):
    """The owned serving form of a convolution."""

    def __call__(self, w: Array, b: Array | None, geometry: Conv2dGeometry) -> OwnedPack: ...


class BorrowConv2d(Protocol):
    """A zero-copy serving form over the declared convolution weight."""

    def __call__(self, w: Array, b: Array | None, geometry: Conv2dGeometry) -> Pack: ...


class PackEmbedding(Protocol):
    """The owned serving form of an embedding table."""

    def __call__(self, table: Array) -> OwnedPack: ...


class BorrowEmbedding(Protocol):
    """A serving form over the declared table."""

    def __call__(self, table: Array) -> Pack: ...


class PackQuantizedLinear(Protocol):
    """The owned serving form of an int8 weight-only linear (``scratch_bytes`` bounds a call's scratch)."""

    def __call__(self, q: Array, scale: Array, b: Array | None = None, scratch_bytes: int = ...) -> OwnedPack: ...


class BorrowQuantizedLinear(Protocol):
    """A serving form over the declared int8 weight, scales and bias."""

    def __call__(self, q: Array, scale: Array, b: Array | None = None, scratch_bytes: int = ...) -> Pack: ...


class PackBlockLinear(Protocol):
    """The owned serving form of a linear whose (out, in) weight is kept in quantized blocks: ``blocks`` the
    uint8 (out, row bytes) array of format ``block_format`` (:data:`packrt_base.blocks.BLOCK_FORMATS`)."""

    def __call__(self, blocks: Array, block_format: str, in_features: int, b: Array | None = None) -> OwnedPack: ...


class BorrowBlockLinear(Protocol):
    """A serving form over the declared blocks and bias, copying nothing."""

    def __call__(self, blocks: Array, block_format: str, in_features: int, b: Array | None = None) -> Pack: ...


class PackBlockEmbedding(Protocol):
    """The owned serving form of an embedding table kept in quantized blocks (uint8 (rows, row bytes) of format
    ``block_format``): ``forward(ids)`` gives the rows' float32 values."""

    def __call__(self, blocks: Array, block_format: str, embedding_dim: int) -> OwnedPack: ...


class BorrowBlockEmbedding(Protocol):
    """A serving form over the declared blocks, copying nothing."""

    def __call__(self, blocks: Array, block_format: str, embedding_dim: int) -> Pack: ...


class QuantizePerChannel(Protocol):
    """Symmetric int8 quantization, one float32 scale per output row: ``(q, scale)``."""

    def __call__(self, w: Array) -> tuple[Array, Array]: ...


@dataclass(frozen=True, slots=True)
class Kernels:
    """One device's kernels by name. ``pack_*`` build a layer's owned serving form; ``borrow_*``
    build a zero-copy one over the declared arrays; both serve through ``.forward(x)``."""

    linear: LinearKernel
    embedding: EmbeddingKernel
    conv2d: Conv2dKernel
    conv2d_geometry: Conv2dGeometryKernel
    layer_norm: LayerNormKernel
    rms_norm: RmsNormKernel
    relu: UnaryKernel
    gelu: GeluKernel
    sigmoid: UnaryKernel
    silu: UnaryKernel
    softmax: SoftmaxKernel
    scaled_dot_product_attention: AttentionKernel
    rotary_embedding: RotaryKernel
    pack_linear: PackLinear
    borrow_linear: BorrowLinear
    pack_conv2d: PackConv2d
    borrow_conv2d: BorrowConv2d
    pack_embedding: PackEmbedding
    borrow_embedding: BorrowEmbedding
    pack_quantized_linear: PackQuantizedLinear
    borrow_quantized_linear: BorrowQuantizedLinear
    quantize_per_channel: QuantizePerChannel
    plan_kernels: PlanKernelsOf  # the serving plan's kernels (packrt_base.plan), or None: module by module
    # Linears and embeddings over quantized blocks (packrt_base.blocks), or None where a device serves none: such
    # a layer says so when it is moved there. Defaulted so that a kernels table written before them still builds.
    pack_block_linear: PackBlockLinear | None = None
    borrow_block_linear: BorrowBlockLinear | None = None
    pack_block_embedding: PackBlockEmbedding | None = None
    borrow_block_embedding: BorrowBlockEmbedding | None = None


__all__ = [
    "AttentionKernel",
    "BorrowBlockEmbedding",
    "BorrowBlockLinear",
    "BorrowConv2d",
    "BorrowEmbedding",
    "BorrowLinear",
    "BorrowQuantizedLinear",
    "Conv2dGeometryKernel",
    "Conv2dKernel",
    "Dims",
    "EmbeddingKernel",
    "GeluKernel",
    "Kernels",
    "LayerNormKernel",
    "LinearKernel",
    "OwnedPack",
    "Pack",
    "PackBlockEmbedding",
    "PackBlockLinear",
    "PackConv2d",
    "PackEmbedding",
    "PackLinear",
    "PackQuantizedLinear",
    "PlanKernelsOf",
    "QuantizePerChannel",
    "RmsNormKernel",
    "RotaryKernel",
    "SoftmaxKernel",
    "UnaryKernel",
]
