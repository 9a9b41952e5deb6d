"""The serving plan's kernels: what a device computes when a model runs as one fused plan.

A model served with no hook watching its inner modules may run a plan built from its layers' packs
(``packrt_core.nn.plan``): several linears that read one input (attention's query, key and value) as
one GEMM over one weight, the bias and the activation in that GEMM's epilogue, a residual add and the
norm after it in one pass, self-attention read straight out of the fused projection. A device's
:class:`~packrt_base.kernels.Kernels` record names these kernels in its ``plan_kernels`` field: a
:class:`PlanKernels` record, or None where the device has none (its models then serve module by
module, the plain road, which gives the same numbers within the road tolerance).

Like every kernel, these check nothing: the plan builder checks once, at build time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from packrt_base.arrays import Array

ACTIVATIONS = ("gelu", "gelu_tanh", "silu", "relu")  # what a plan linear's epilogue applies (None: nothing)


class PlanLinear(Protocol):
    """One GEMM serving one or more linear layers that read the same input, bias and activation included.

    A layer may serve from its part of the fused weight instead of its own copy (``parts``)."""

    @property
    def nbytes(self) -> int:
        """Bytes held beyond the packs it was built from (the fused weight, when it made one)."""
        ...

    @property
    def out_features(self) -> int:
        """The width of one output row: the layers' output widths added up."""
        ...

    @property
    def parts(self) -> tuple[Any, ...]:
        """Per layer, a serving form over its columns of the fused weight; empty when none was made."""
        ...

    def forward(self, x: Array, /, out: Array | None = None) -> Array:
        """``act(x @ W^T + b)`` of a 2-D ``x`` (rows, in), into ``out`` (rows, out_features) when given."""
        ...


class PlanLinearKernel(Protocol):
    """A :class:`PlanLinear` over the packs of layers reading one input (concatenated when
    :class:`FusesKernel` says they can be), with ``activation`` (one of :data:`ACTIVATIONS`, or None)
    applied in the epilogue."""

    def __call__(self, packs: Sequence[Any], activation: str | None = None) -> PlanLinear: ...


class FusesKernel(Protocol):
    """Whether :class:`PlanLinearKernel` would concatenate these packs into one weight (owned packs of one
    kind, dtype and input width); a single pack or packs it cannot join are served as they are."""

    def __call__(self, packs: Sequence[Any]) -> bool: ...


class ResidualNormKernel(Protocol):
    """``residual += x`` in place, then ``out = norm(residual)`` row by row over the last axis, in one pass:
    LayerNorm with ``w`` and ``b`` (``rms=False``) or RMSNorm with ``w`` (``b`` unused); 2-D arrays of
    one shape, ``out`` distinct from both inputs."""

    def __call__(
        self, x: Array, residual: Array, w: Array | None, b: Array | None, eps: float, out: Array, rms: bool = False
    ) -> Array: ...


class GatedKernel(Protocol):
    """``out = act(x[:, :n]) * x[:, n:]`` for ``x`` (rows, 2n) (a gated MLP's gate and up projections side
    by side, as one plan linear gives them), ``activation`` one of :data:`ACTIVATIONS`."""

    def __call__(self, x: Array, activation: str, out: Array) -> Array: ...


class SelfAttentionKernel(Protocol):
    """Multi-head self-attention of ``batch`` sequences read from a fused projection ``qkv``
    (batch * seq, 3 * heads * head_dim; each row its queries, keys then values, head after head),
    written merged into ``out`` (batch * seq, heads * head_dim). ``key_mask`` (batch, seq) bool marks
    the keys a query may see (None: all); a query that may see none gets zeros. ``scale`` defaults to
    ``1/sqrt(head_dim)``."""

    def __call__(
        self, qkv: Array, batch: int, heads: int, key_mask: Array | None, scale: float | None, out: Array
    ) -> Array: ...


class DecodeAttentionKernel(Protocol):
    """One decode step's attention: each sequence's one query per head, ``q`` (batch, heads, head_dim), against
    the keys and values cached so far: ``keys`` / ``values`` are the cache's whole buffers (batch, kv_heads,
    capacity, head_dim; heads a multiple of kv_heads, each group of query heads reading one key head), of which
    positions ``first:stop`` are read (``first``: a sliding window's start, else 0). ``key_mask`` (batch, stop)
    bool marks the keys a query may see (None: all); a head that sees none gets zeros. Scores are
    ``q . k * scale``, soft-capped as ``softcap * tanh(s / softcap)`` when ``softcap`` is given (gemma2), then a
    float32 softmax; the result is written merged into ``out`` (batch, heads * head_dim)."""

    def __call__(
        self,
        q: Array,
        keys: Array,
        values: Array,
        first: int,
        stop: int,
        key_mask: Array | None,
        scale: float,
        softcap: float | None,
        out: Array,
    ) -> Array: ...


@dataclass(frozen=True, slots=True)
class DecodeLayer:
    """What one token's step through a rotary decoder layer computes, for a kernel that runs the whole step
    in one call (:class:`DecodeLayerKernel`). With ``x`` the residual stream (rows, width), one row per
    sequence:

    1. ``h = rms(x) * norms[0]``; ``qkv = h @ qkv^T`` (queries, keys, values side by side, head after head: the
       outputs of ``qkv``'s linears, one or the three a plan could not join);
    2. each query and key head RMS-normed by ``head_norms`` (qwen3, gemma3) when given, then rotated by the
       step's rotary tables (none: a layer without rotary positions); the keys and values written into the
       cache at the step's position;
    3. the attention of :class:`DecodeAttentionKernel` (``scale``, ``softcap``) over the cached positions, then
       ``o``; the branch normed by ``post_norms[0]`` (gemma) and scaled by ``residual_scale`` (granite) when
       given, and added to the stream;
    4. ``h = rms(stream) * norms[1]``; ``act(h @ gate^T) * (h @ up^T)`` through ``gate_up`` (one linear, or the
       gate's and the up's), then ``down``; the
       branch as in 3 (``post_norms[1]``), added to the stream, which is the layer's output.

    The linears are :class:`PlanLinear` objects (a kernel serves the kinds it knows and declines the others);
    the norms' weights are float32 arrays with any weight offset (gemma's ``1 + w``) already folded in."""

    qkv: tuple[PlanLinear, ...]
    o: PlanLinear
    gate_up: tuple[PlanLinear, ...]
    down: PlanLinear
    norms: tuple[Array, Array]
    eps: tuple[float, float]
    heads: int
    kv_heads: int
    head_dim: int
    activation: str
    scale: float
    softcap: float | None = None
    head_norms: tuple[Array, Array, float] | None = None  # the query's and key's weights, one eps
    post_norms: tuple[tuple[Array, float], tuple[Array, float]] | None = None
    residual_scale: float | None = None


class DecodeStep(Protocol):
    """A layer's one-token step in one call (see :class:`DecodeLayer`)."""

    def run(
        self,
        x: Array,
        tables: tuple[Array, Array] | None,
        keys: Array,
        values: Array,
        position: int,
        first: int,
        key_mask: Array | None,
    ) -> Array | None:
        """The stream after the layer for ``x`` (rows, width) at cache ``position``, its keys and values written
        into the whole cache buffers ``keys`` / ``values`` (batch, kv_heads, capacity, head_dim); ``tables``: the
        rotary cos and sin (1, head_dim), or None; ``first`` and ``key_mask`` as :class:`DecodeAttentionKernel`
        takes them. None, with nothing written, where the kernel does not take these inputs now (the caller
        runs the layer step by step)."""
        ...


class DecodeLayerKernel(Protocol):
    """A :class:`DecodeStep` for ``layer``, or None where the device's kernel cannot serve its linears."""

    def __call__(self, layer: DecodeLayer) -> DecodeStep | None: ...


@dataclass(frozen=True, slots=True)
class PlanKernels:
    """One device's serving-plan kernels by name (each field's Protocol is its signature)."""

    linear: PlanLinearKernel
    fuses: FusesKernel
    residual_norm: ResidualNormKernel
    self_attention: SelfAttentionKernel
    gated: GatedKernel
    # None: the device attends through its ``scaled_dot_product_attention`` at every step (a table written
    # before this field still builds)
    decode_attention: DecodeAttentionKernel | None = None
    # None: a decode step runs a layer kernel by kernel
    decode_layer: DecodeLayerKernel | None = None


class PlanKernelsOf(Protocol):
    """The device's :class:`PlanKernels`, or None where it serves every model module by module."""

    def __call__(self) -> PlanKernels | None: ...


__all__ = [
    "ACTIVATIONS",
    "DecodeAttentionKernel",
    "DecodeLayer",
    "DecodeLayerKernel",
    "DecodeStep",
    "FusesKernel",
    "GatedKernel",
    "PlanKernels",
    "PlanKernelsOf",
    "PlanLinear",
    "PlanLinearKernel",
    "ResidualNormKernel",
    "SelfAttentionKernel",
]
