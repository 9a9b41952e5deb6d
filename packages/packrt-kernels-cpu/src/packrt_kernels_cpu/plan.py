"""The CPU's serving-plan kernels (:class:`packrt_base.plan.PlanKernels`): the fused steps a planned model
runs instead of one module call per operation.

- :func:`plan_linear`: one GEMM for the linears that read one input. Owned float packs of one dtype
  and width (:func:`fuses`) are concatenated into one ``W^T`` (in, sum of outs), float32 panels
  (:mod:`.float_tiles`) into one run of panels; int8 packs into one int8 weight, so the activations
  are quantized once for all of them; a linear over quantized blocks (one pack) is served from its blocks.
  The bias and the activation
  run in one compiled pass over the GEMM's output, in place. Anything else (a borrowed view, one
  pack) is served from the arrays it holds, copying nothing.
- :func:`residual_norm`: the residual add and the LayerNorm or RMSNorm after it, one pass per row.
- :func:`self_attention`: queries, keys and values read in place from the fused projection (strided
  views: no split, no transpose copy), the key mask applied inside softmax's first step, and the
  context written straight into the merged (rows, heads * head_dim) layout the output projection reads.

Each fused pass runs the same arithmetic as the kernels it replaces (:mod:`._numba_plan` calls their
loops), so on float32 a plan and the module-by-module road differ only where a GEMM's summation order
does: within :data:`packrt_kernels_cpu.tolerance.ROAD_TOLERANCES`. Every function has a numpy road for
other dtypes and for ``PACKRT_NUMBA=0``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from packrt_base.arrays import FLOAT32, Array, compute_dtype
from packrt_base.plan import PlanKernels
from packrt_kernels_cpu import blas, compiled, float_tiles, functional, fused, gemv, int8
from packrt_kernels_cpu.attention import softmax_rows_in_place
from packrt_kernels_cpu.blocks import PackedBlockLinear
from packrt_kernels_cpu.decode import decode_layer
from packrt_kernels_cpu.errors import KernelShapeError
from packrt_kernels_cpu.namespace import astype
from packrt_kernels_cpu.packing import LinearView, PackedLinear, PanelLinear
from packrt_kernels_cpu.quantize import PackedQuantizedLinear
from packrt_kernels_cpu.scratch import scratch_f32

_OPS = {None: -1, "gelu": 0, "gelu_tanh": 1, "silu": 2, "relu": 3}  # _numba_plan's op codes (-1: bias only)
_NO_BIAS = np.empty(0, np.float32)
_NO_MASK = np.empty((0, 0), np.bool_)


def _loops() -> Any:
    return compiled.module("packrt_kernels_cpu._numba_plan")


_EVERY_KEY = np.empty((0, 0), np.bool_)  # tile_attention's mask where every key is seen


def _launch(name: str, work: int, *args: Any) -> None:
    """:func:`compiled.launch` over the plan's loops: on the pool when the work is large."""
    compiled.launch(name, work, *args, loops=_loops())


def _fast(*arrays: Array | None) -> bool:
    """Whether the compiled passes take these: C-contiguous float32 numpy arrays (None ignored)."""
    return fused.handles_all(*arrays)


def _activate(op: str | None, y: Array, b: Array | None) -> Array:
    """``y = act(y + b)`` in place (the GEMM's epilogue), returning ``y``."""
    if _fast(y, b) and y.ndim == 2:
        _launch("epilogue", y.size, _OPS[op], y, _NO_BIAS if b is None else b)
        return y
    if b is not None:
        y += astype(b, y.dtype)
    if op is None:
        return y
    fn = {"gelu": lambda a: functional.gelu(a), "gelu_tanh": lambda a: functional.gelu(a, "tanh")}.get(op)
    done = fn(y) if fn is not None else functional.silu(y) if op == "silu" else functional.relu(y)
    y[...] = done
    return y


class FloatPlanLinear:
    """``act(x @ wt + b)`` over a float weight: a concatenated pack, one layer's pack, float32 panels
    (``panels``: :class:`~packrt_kernels_cpu.float_tiles.FloatPanels`), or a borrowed view (``w``
    (out, in) read transposed in place; half weights widened for the call, as the view does)."""

    def __init__(
        self,
        wt: Array | None,
        w: Array | None,
        b: Array | None,
        activation: str | None,
        parts: tuple[Any, ...],
        panels: float_tiles.FloatPanels | None = None,
    ) -> None:
        self.wt, self.w, self.b, self.activation, self.panels = wt, w, b, activation, panels
        self.parts = parts
        if panels is not None:
            self.out_features, weight_bytes = panels.out_features, panels.nbytes
        else:
            self.out_features = int(wt.shape[1] if wt is not None else w.shape[0])  # type: ignore[union-attr]
            weight_bytes = 0 if wt is None else int(wt.nbytes)
        held = 0 if wt is None and panels is None else weight_bytes + (0 if b is None else int(b.nbytes))
        self.nbytes = held if parts else 0  # a weight it made (joined), not one it serves in place

    def _weight(self, x: Array) -> tuple[Array, Array]:
        """(the input in the GEMM's dtype, the (in, out) weight it multiplies)."""
        wt = self.wt
        if wt is None:
            w = self.w
            cd = compute_dtype(x.dtype)
            wt = w.T if blas.multiplies(w.dtype) else astype(w, cd).T  # type: ignore[union-attr]
        return (x if x.dtype == wt.dtype else astype(x, wt.dtype)), wt

    def forward(self, x: Array, /, out: Array | None = None) -> Array:
        """``act(x @ W^T + b)`` of 2-D ``x``; float32 out for float32 and bfloat16 weights (the plan's
        activations stay in the compute dtype between layers)."""
        b = self.b
        if self.panels is not None:
            x32 = x if x.dtype == np.float32 else astype(x, FLOAT32)
            # gemm writes into ``out`` only where it fits (float32, this shape, C-contiguous)
            return _activate(self.activation, float_tiles.gemm(x32, self.panels, out), b)
        xc, wt = self._weight(x)
        if xc.shape[0] == 1 and out is None and gemv.gemv_takes(xc, wt, b):
            return _activate(self.activation, gemv.gemv(xc, wt, b), None)
        if out is not None and (out.dtype != np.result_type(xc.dtype, np.float32) or out.shape[0] != xc.shape[0]):
            out = None  # a buffer planned for another dtype: the GEMM allocates
        y = blas.matmul(xc, wt, out=out)
        return _activate(self.activation, y, b)


class QuantizedPlanLinear:
    """``act(x @ (q * scale)^T + b)`` through int8: activations quantized once per call for every layer the
    weight concatenates (int8 road: :func:`packrt_kernels_cpu.int8.linear`)."""

    def __init__(self, pack: PackedQuantizedLinear, activation: str | None, parts: tuple[Any, ...]) -> None:
        self.pack, self.activation, self.parts = pack, activation, parts
        self.out_features = pack.out_features
        self._operands = pack.int8_operands() if type(pack.q) is np.ndarray else None
        self.nbytes = int(pack.nbytes) if parts else 0

    def forward(self, x: Array, /, out: Array | None = None) -> Array:
        pack, operands = self.pack, self._operands
        if operands is None or type(x) is not np.ndarray or x.dtype == np.float64:
            return _activate(self.activation, pack.forward(x), None)
        x32 = np.ascontiguousarray(astype(x, FLOAT32))
        if out is not None and (out.dtype != FLOAT32 or out.shape != (x32.shape[0], self.out_features)):
            out = None
        sums, bias, panels = operands
        y = int8.linear(x32, pack.q, pack.scale, sums, bias, out=out, panels=panels)
        return y if self.activation is None else _activate(self.activation, y, None)


class BlockPlanLinear:
    """``act(x @ W^T + b)`` over quantized blocks (:class:`~packrt_kernels_cpu.blocks.PackedBlockLinear`): served
    from the layer's own pack (the plan holds nothing more), or from the rows of several packs joined (``parts``:
    each layer's rows of them), the activation applied to its output in place."""

    def __init__(self, pack: PackedBlockLinear, activation: str | None, parts: tuple[Any, ...] = ()) -> None:
        self.pack, self.activation, self.parts = pack, activation, parts
        self.out_features = pack.out_features
        self.nbytes = int(pack.nbytes) if parts else 0

    def forward(self, x: Array, /, out: Array | None = None) -> Array:
        x32 = x if x.dtype == np.float32 else astype(x, FLOAT32)
        y = self.pack.forward(x32, out=out)
        return y if self.activation is None else _activate(self.activation, y, None)


def fuses(packs: Sequence[Any]) -> bool:
    """Whether :func:`plan_linear` joins ``packs`` into one weight: two or more owned packs of one kind
    (float linear, int8, or quantized blocks of one format), one weight dtype and one input width, all with a
    bias or none."""
    if len(packs) < 2:
        return False
    first = packs[0]
    if all(type(p) is PackedLinear for p in packs):
        return all(
            type(p.wt) is np.ndarray
            and p.wt.dtype == first.wt.dtype
            and p.dtype == first.dtype
            and p.in_features == first.in_features
            and (p.b is None) == (first.b is None)
            for p in packs
        )
    if all(type(p) is PanelLinear for p in packs):
        return all(
            p.dtype == first.dtype
            and p.panels.dtype == first.panels.dtype
            and p.in_features == first.in_features
            and (p.b is None) == (first.b is None)
            for p in packs
        )
    if all(type(p) is PackedQuantizedLinear for p in packs):
        return all(
            type(p.q) is np.ndarray and p.in_features == first.in_features and (p.b is None) == (first.b is None)
            for p in packs
        )
    if all(type(p) is PackedBlockLinear for p in packs):
        return all(
            p.owned
            and p.format == first.format
            and p.in_features == first.in_features
            and (p.b is None) == (first.b is None)
            for p in packs
        )
    return False


def _joined(parts: Sequence[Any], axis: int) -> Array | None:
    return None if parts[0] is None else np.ascontiguousarray(np.concatenate(parts, axis=axis))


def _fuse_float(packs: Sequence[PackedLinear], activation: str | None) -> FloatPlanLinear:
    wt = _joined([p.wt for p in packs], 1)
    b = _joined([p.b for p in packs], 0)
    ends = np.cumsum([0, *(p.out_features for p in packs)])
    parts = tuple(
        PackedLinear(wt[:, lo:hi], None if b is None else b[lo:hi], p.dtype)  # type: ignore[index]
        for p, lo, hi in zip(packs, ends[:-1], ends[1:], strict=True)
    )
    return FloatPlanLinear(wt, None, b, activation, parts)


def _fuse_panels(packs: Sequence[PanelLinear], activation: str | None) -> FloatPlanLinear:
    data = np.ascontiguousarray(np.concatenate([p.panels.data for p in packs], axis=0))
    b = _joined([p.b for p in packs], 0)
    ends = np.cumsum([0, *(p.out_features for p in packs)])
    width = float_tiles.PANEL
    parts = tuple(
        PanelLinear(float_tiles.FloatPanels(data[lo // width : hi // width]), None if b is None else b[lo:hi], p.dtype)
        for p, lo, hi in zip(packs, ends[:-1], ends[1:], strict=True)
    )
    return FloatPlanLinear(None, None, b, activation, parts, float_tiles.FloatPanels(data))


def _fuse_int8(packs: Sequence[PackedQuantizedLinear], activation: str | None) -> QuantizedPlanLinear:
    q, scale = _joined([p.q for p in packs], 0), _joined([p.scale for p in packs], 0)
    b = _joined([p.b for p in packs], 0)
    whole = PackedQuantizedLinear(q, scale, b, packs[0].scratch_bytes)
    ends = np.cumsum([0, *(p.out_features for p in packs)])
    parts = tuple(
        PackedQuantizedLinear(q[lo:hi], scale[lo:hi], None if b is None else b[lo:hi], p.scratch_bytes)  # type: ignore[index]
        for p, lo, hi in zip(packs, ends[:-1], ends[1:], strict=True)
    )
    return QuantizedPlanLinear(whole, activation, parts)


def _fuse_blocks(packs: Sequence[PackedBlockLinear], activation: str | None) -> BlockPlanLinear:
    """One pack over the packs' rows of blocks: the activations are quantized once for all of them, and one
    loop runs over every row (a decode step's q, k and v; gate and up)."""
    blocks = np.ascontiguousarray(np.concatenate([p.blocks for p in packs], axis=0))
    b = _joined([p.b for p in packs], 0)
    first = packs[0]
    whole = PackedBlockLinear(blocks, first.format, first.in_features, b, owned=True)
    ends = np.cumsum([0, *(p.out_features for p in packs)])
    parts = tuple(
        PackedBlockLinear(blocks[lo:hi], p.format, p.in_features, None if b is None else b[lo:hi], owned=True)
        for p, lo, hi in zip(packs, ends[:-1], ends[1:], strict=True)
    )
    return BlockPlanLinear(whole, activation, parts)


def plan_linear(
    packs: Sequence[Any], activation: str | None = None
) -> FloatPlanLinear | QuantizedPlanLinear | BlockPlanLinear:
    """The plan's linear over ``packs`` (see the module docstring); KernelShapeError for several packs
    :func:`fuses` cannot join, or for a pack that is not a linear's."""
    if activation not in _OPS:
        raise KernelShapeError(f"activation {activation!r} is not one a plan linear applies ({sorted(map(str, _OPS))})")
    if len(packs) > 1:
        if not fuses(packs):
            raise KernelShapeError(
                "these packs cannot share one GEMM (kinds, dtypes or widths differ): plan each alone"
            )
        if type(packs[0]) is PackedLinear:
            return _fuse_float(packs, activation)
        if type(packs[0]) is PanelLinear:
            return _fuse_panels(packs, activation)
        if type(packs[0]) is PackedBlockLinear:
            return _fuse_blocks(packs, activation)
        return _fuse_int8(packs, activation)
    pack = packs[0]
    if type(pack) is PackedLinear:
        return FloatPlanLinear(pack.wt, None, pack.b, activation, ())
    if type(pack) is PanelLinear:
        return FloatPlanLinear(None, None, pack.b, activation, (), pack.panels)
    if type(pack) is LinearView:
        cd = compute_dtype(pack.w.dtype)
        return FloatPlanLinear(None, pack.w, None if pack.b is None else astype(pack.b, cd), activation, ())
    if type(pack) is PackedQuantizedLinear:
        return QuantizedPlanLinear(pack, activation, ())
    if type(pack) is PackedBlockLinear:
        return BlockPlanLinear(pack, activation)
    raise KernelShapeError(f"a plan linear serves linear packs, got a {type(pack).__name__}")


def residual_norm(
    x: Array, residual: Array, w: Array | None, b: Array | None, eps: float, out: Array, rms: bool = False
) -> Array:
    """``residual += x``, then ``out`` = LayerNorm (or RMSNorm, ``rms=True``) of each row of ``residual``."""
    width = int(x.shape[-1])
    if _fast(x, residual, out, w, b) and x.ndim == 2 and w is not None:
        bias = _NO_BIAS if b is None else b
        if not rms and b is None:
            bias = np.zeros(width, np.float32)
        _launch("residual_norm", x.size, rms, x, residual, w, bias, np.float32(eps), out)
        return out
    residual += astype(x, residual.dtype)
    norm = functional.rms_norm(residual, width, w, eps) if rms else functional.layer_norm(residual, width, w, b, eps)
    out[...] = norm
    return out


def self_attention(
    qkv: Array, batch: int, heads: int, key_mask: Array | None, scale: float | None, out: Array
) -> Array:
    """Self-attention read from the fused projection ``qkv`` and written merged into ``out``
    (see :class:`packrt_base.plan.SelfAttentionKernel`)."""
    rows, width = (int(s) for s in qkv.shape)
    seq, dim = rows // batch, width // (3 * heads)
    split = qkv.reshape(batch, seq, 3, heads, dim)
    q, k, v = (split[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (batch, heads, seq, dim) views
    factor = 1.0 / math.sqrt(dim) if scale is None else scale
    context = out.reshape(batch, seq, heads, dim).transpose(0, 2, 1, 3)
    if not (_fast(qkv, out) and blas.multiplies(qkv.dtype)):
        scores = np.matmul(q, k.swapaxes(-1, -2)) * qkv.dtype.type(factor)
        neg_inf = scores.dtype.type(-np.inf)
        if key_mask is not None:
            np.copyto(scores, neg_inf, where=~key_mask[:, None, None, :])
        softmax_rows_in_place(np, scores, neg_inf)  # a query that may see no key gets zeros
        np.matmul(scores, v, out=context)
        return out
    tiles = float_tiles.addresses() if dim % float_tiles.PANEL == 0 else None
    if tiles is not None:  # each head on one pool thread, its products on the panel tiles: no BLAS pool
        mask = _EVERY_KEY if key_mask is None else np.ascontiguousarray(key_mask, dtype=np.bool_)
        args = (tiles, qkv, mask, batch, heads, np.float32(factor), out, compiled.pool_size())
        _launch("tile_attention", batch * heads * seq * seq * dim, *args)
        return out
    scores = blas.matmul(q, k.swapaxes(-1, -2), alpha=factor, out=scratch_f32((batch, heads, seq, seq)))
    flat = scores.reshape(-1, seq)
    if key_mask is not None and not bool(key_mask.all()):
        _launch("masked_shift", flat.size, flat, np.ascontiguousarray(key_mask, dtype=np.bool_), heads * seq)
        blas.exp(flat, out=flat)
        compiled.launch("softmax_step", flat.size, compiled.kernels().NORMALIZE, flat)
    else:
        fused.softmax_in_place(flat)
    blas.matmul(scores, v, out=context)
    return out


def decode_attention(
    q: Array,
    keys: Array,
    values: Array,
    first: int,
    stop: int,
    key_mask: Array | None,
    scale: float,
    softcap: float | None,
    out: Array,
) -> Array:
    """One query per sequence against its cached keys (see :class:`packrt_base.plan.DecodeAttentionKernel`): on the
    compiled road each head in one pass (scores, soft cap, mask, softmax and the weighted values), with no
    scores array per call; numpy's road through batched matmuls."""
    batch, heads, dim = (int(s) for s in q.shape)
    if _fast(q, keys, values, out):
        mask = _NO_MASK if key_mask is None else np.ascontiguousarray(key_mask, dtype=np.bool_)
        cap = np.float32(0 if softcap is None else softcap)
        work = batch * heads * (stop - first) * dim
        _launch("decode_attention", work, q, keys, values, first, stop, mask, np.float32(scale), cap, out)
        return out
    kv = int(keys.shape[1])
    grouped = astype(q, FLOAT32).reshape(batch, kv, heads // kv, 1, dim)
    k, v = (astype(a[:, :, first:stop], FLOAT32)[:, :, None] for a in (keys, values))
    scores = np.matmul(grouped, k.swapaxes(-1, -2)) * np.float32(scale)  # (batch, kv, group, 1, keys)
    if softcap is not None:
        scores = np.float32(softcap) * np.tanh(scores / np.float32(softcap))
    neg_inf = np.float32(-np.inf)
    if key_mask is not None:
        np.copyto(scores, neg_inf, where=~key_mask[:, None, None, None, first:stop])
    softmax_rows_in_place(np, scores, neg_inf)  # a head that may see no key gets zeros
    out[...] = np.matmul(scores, v).reshape(batch, heads * dim)
    return out


def gated(x: Array, activation: str, out: Array) -> Array:
    """``out = act(x[:, :n]) * x[:, n:]`` (a gated MLP: SwiGLU's ``silu(gate) * up``), in one pass."""
    n = int(out.shape[-1])
    if _fast(x, out) and x.ndim == 2:
        _launch("gated", out.size, _OPS[activation], x, out)
        return out
    gate = np.ascontiguousarray(x[:, :n])
    out[...] = _activate(activation, gate, None) * x[:, n:]
    return out


def plan_kernels() -> PlanKernels | None:
    """The CPU's plan kernels (numpy roads included: a plan serves without numba too)."""
    return CPU_PLAN


CPU_PLAN = PlanKernels(
    linear=plan_linear,
    fuses=fuses,
    residual_norm=residual_norm,
    self_attention=self_attention,
    gated=gated,
    decode_attention=decode_attention,
    decode_layer=decode_layer,
)

__all__ = [
    "CPU_PLAN",
    "FloatPlanLinear",
    "QuantizedPlanLinear",
    "decode_attention",
    "fuses",
    "gated",
    "plan_kernels",
    "plan_linear",
    "residual_norm",
    "self_attention",
]
