"""The serving plan of the BERT-family encoders (bert, roberta, xlm-roberta; SentenceEncoder's models).

What :class:`EncoderPlan` runs per layer, on 2-D (batch * seq, width) arrays, with no module call and no
tensor wrapper between the steps (at a 1x16 query those were two thirds of the forward)::

    qkv = [Wq | Wk | Wv] x + b          one GEMM (its weight shared with the three layers, see below)
    ctx = attention(qkv, key mask)      heads read in place, the mask inside softmax, merged output
    h   = LayerNorm(h + Wo ctx + bo)    the residual add and the norm in one pass
    u   = gelu(W1 h + b1)               the bias and GELU in the GEMM's epilogue, in place
    h   = LayerNorm(h + W2 u + b2)

When the query, key and value layers keep ``packed`` weights, their three packs are concatenated once
into one ``W^T`` (or one int8 weight: the activations are then quantized once, not three times) and
each layer's pack becomes a view of its columns (``PackedLayer._adopt``): one copy in memory, which
the plain road serves from too. Under ``borrowed`` the plan reads each layer's own arrays and copies
nothing. Intermediate activations live in buffers each thread reuses from call to call; the result is
a new array. The rules (when a call takes the plain road instead, one snapshot per call) are
:mod:`packrt_core.nn.plan`'s.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from packrt import nn
from packrt.models.layers import MultiHeadAttention
from packrt.models.plan_parts import as_float32, exact, require_storage
from packrt_base.plan import PlanKernels
from packrt_core import dispatch
from packrt_core.dtypes import float32
from packrt_core.nn.plan import PlanUnavailableError, array_of, owned_copy, serving_pack, share_pack, tensor_like
from packrt_core.tensor import Tensor

_LINEARS = (nn.Linear, nn.QuantizedLinear)
_DTYPES = ("float32", "bfloat16", "float16")  # weights the plan computes in float32 (float64 keeps its road)


@dataclass(frozen=True)
class Kinds:
    """The module classes an encoder is built from, whose forwards the plan reproduces: the model names
    them (its family's embeddings; the layer and MLP of :mod:`packrt.models.encoder`)."""

    embeddings: tuple[type, ...]
    layer: type
    mlp: type


_ACTIVATION = {"none": "gelu", "tanh": "gelu_tanh"}


def _exact(module: Any, kind: type | tuple[type, ...], path: str) -> Any:
    return exact(module, kind, path, "encoder")


@dataclass(frozen=True)
class _Norm:
    w: Any
    b: Any
    eps: float

    @classmethod
    def of(cls, norm: Any, path: str) -> _Norm:
        norm = _exact(norm, nn.LayerNorm, path)
        if len(norm.normalized_shape) != 1:
            raise PlanUnavailableError(f"{path} normalizes {norm.normalized_shape}: the plan serves one trailing dim")
        return cls(as_float32(owned_copy(norm.weight)), as_float32(owned_copy(norm.bias)), float(norm.eps))


@dataclass(frozen=True)
class _Layer:
    qkv: tuple[Any, ...]  # one PlanLinear (fused), or three writing the query, key and value columns
    o: Any
    up: Any
    down: Any
    norm1: _Norm
    norm2: _Norm
    extra: int  # bytes the layer's plan holds that no layer's pack shares (a fused weight not adopted)


def _plan_layer(kernels: PlanKernels, kinds: Kinds, layer: Any, path: str, heads: int) -> tuple[_Layer, str]:
    layer = _exact(layer, kinds.layer, path)
    attention = _exact(layer.attention, MultiHeadAttention, f"{path}.attention")
    mlp = _exact(layer.mlp, kinds.mlp, f"{path}.mlp")
    act = _exact(mlp.act, nn.GELU, f"{path}.mlp.act")
    if attention.heads != heads:
        raise PlanUnavailableError(f"{path}.attention has {attention.heads} heads, the model {heads}")
    projections = [
        _exact(getattr(attention, name), _LINEARS, f"{path}.attention.{name}")
        for name in ("q_proj", "k_proj", "v_proj")
    ]
    linears = [*projections, attention.o_proj, mlp.up, mlp.down]
    for name, linear in zip(("q_proj", "k_proj", "v_proj", "o_proj", "up", "down"), linears, strict=True):
        _exact(linear, _LINEARS, f"{path}.{name}")
        require_storage(linear, f"{path}.{name}")
    packs = [serving_pack(p) for p in projections]
    if all(p.serving_residency() == "packed" for p in projections) and kernels.fuses(packs):
        fused = kernels.linear(packs)
        shared = [
            share_pack(linear, old, part) for linear, old, part in zip(projections, packs, fused.parts, strict=True)
        ]
        qkv: tuple[Any, ...] = (fused,)
        note = "q, k, v: one GEMM over one weight, which the three layers' packs are views of"
        # what the joined weight holds beyond the layers' views of it (int8: its VNNI panels), or all of it
        extra = fused.nbytes - sum(int(part.nbytes) for part in fused.parts) if all(shared) else fused.nbytes
    else:
        qkv = tuple(kernels.linear([p]) for p in packs)
        note = "q, k, v: three GEMMs into one buffer (weights not packed, or not joinable)"
        extra = 0
    planned = _Layer(
        qkv=qkv,
        o=kernels.linear([serving_pack(attention.o_proj)]),
        up=kernels.linear([serving_pack(mlp.up)], _ACTIVATION[act.approximate]),
        down=kernels.linear([serving_pack(mlp.down)]),
        norm1=_Norm.of(layer.attention_norm, f"{path}.attention_norm"),
        norm2=_Norm.of(layer.mlp_norm, f"{path}.mlp_norm"),
        extra=extra,
    )
    return planned, note


class EncoderPlan:
    """A :class:`~packrt.models.BertEncoder`'s forward as the fused steps of the module docstring."""

    nbytes: int
    fused: tuple[str, ...]

    def __init__(self, model: Any, kernels: PlanKernels, kinds: Kinds) -> None:
        config = model.config
        embeddings = _exact(model.embeddings, kinds.embeddings, "embeddings")
        for name in ("word", "position", "token_type"):
            _exact(getattr(embeddings, name), nn.Embedding, f"embeddings.{name}")
            require_storage(getattr(embeddings, name), f"embeddings.{name}")
        for name, param in model.named_parameters():
            if param.dtype.is_floating_point and param.dtype.name not in _DTYPES:
                raise PlanUnavailableError(f"{name} is {param.dtype.name}: the plan serves float32, bfloat16, float16")
        self.kernels = kernels
        self.hidden, self.heads = config.hidden, config.heads
        self.embeddings = embeddings
        self.tables = tuple(serving_pack(getattr(embeddings, n)) for n in ("word", "position", "token_type"))
        self.vocab = tuple(getattr(embeddings, n).num_embeddings for n in ("word", "position", "token_type"))
        self.norm = _Norm.of(embeddings.norm, "embeddings.norm")
        self.device = embeddings.word.weight.device
        self.dtype = embeddings.word.weight.dtype
        self.record = dispatch.kernels_for(self.device)
        layers, notes = [], []
        for i, layer in enumerate(model.layers):
            planned, note = _plan_layer(kernels, kinds, layer, f"layers.{i}", self.heads)
            layers.append(planned)
            notes.append(note)
        self.layers = tuple(layers)
        self.nbytes = sum(layer.extra for layer in self.layers)
        self.nbytes += sum(a.nbytes for n in self._norms() for a in (n.w, n.b) if a is not None)
        self.fused = (
            f"{len(self.layers)} layers; {notes[0] if notes else ''}",
            "bias + GELU in the up projection's epilogue; residual add + LayerNorm in one pass (x2 per layer)",
            "attention: heads read in place from the qkv buffer, key mask inside softmax, merged output",
        )
        self._buffers = threading.local()

    def _norms(self) -> list[_Norm]:
        return [self.norm, *(n for layer in self.layers for n in (layer.norm1, layer.norm2))]

    def _buffer(self, name: str, rows: int, width: int) -> Any:
        """This thread's buffer ``name`` as a (rows, width) float32 array, grown to the largest call seen."""
        store: dict[str, Any] = self._buffers.__dict__
        size = rows * width
        held = store.get(name)
        if held is None or held.size < size:
            held = store[name] = np.empty(size, np.float32)
        return held[:size].reshape(rows, width)

    def _embed(self, ids: Any, positions: Any, types: Any) -> Any:
        """Word + token-type + position rows (in that order of addition, as the module road), in float32."""
        word, position, token_type = self.tables
        x = word.forward(ids).astype(np.float32, copy=False)
        x = x if x.base is None and x.flags.writeable else x.copy()
        x += token_type.forward(types)
        x += position.forward(positions)
        return x.reshape(-1, self.hidden)

    def inputs(self, input_ids: Tensor, token_type_ids: Tensor | None) -> tuple[Any, Any, Any] | None:
        """(ids, positions, token types) as arrays, or None when the plan does not take them (ids outside a
        table, a device other than the plan's): the plain road then checks them and raises its own error."""
        if input_ids.device != self.device:
            return None
        if token_type_ids is not None and (
            token_type_ids.device != self.device or token_type_ids.shape != input_ids.shape
        ):
            return None
        ids = array_of(input_ids)
        positions = array_of(self.embeddings.position_ids(input_ids))
        types = None if token_type_ids is None else array_of(token_type_ids)
        for values, limit in ((ids, self.vocab[0]), (positions, self.vocab[1]), (types, self.vocab[2])):
            if values is not None and values.size and (int(values.min()) < 0 or int(values.max()) >= limit):
                return None
        if types is None:
            types = np.zeros((1, ids.shape[1]), np.int64)
        return ids, positions, types

    def run(self, input_ids: Tensor, key_mask: Any, token_type_ids: Tensor | None) -> Tensor | None:
        """The last hidden state (batch, seq, hidden), or None for inputs the plain road must check."""
        taken = self.inputs(input_ids, token_type_ids)
        if taken is None:
            return None
        ids, positions, types = taken
        batch, seq = ids.shape
        rows, hidden = batch * seq, self.hidden
        kernels = self.kernels
        norm = self.norm
        h = self.record.layer_norm(self._embed(ids, positions, types), hidden, norm.w, norm.b, norm.eps)
        other = self._buffer("h", rows, hidden)
        ctx, a = self._buffer("ctx", rows, hidden), self._buffer("a", rows, hidden)
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            qkv = self._projections(layer, h, rows)
            kernels.self_attention(qkv, batch, self.heads, key_mask, None, ctx)
            attended = layer.o.forward(ctx, out=a)
            kernels.residual_norm(attended, h, layer.norm1.w, layer.norm1.b, layer.norm1.eps, other)
            h, other = other, h
            up = layer.up.forward(h, out=self._buffer("up", rows, layer.up.out_features))
            down = layer.down.forward(up, out=a)
            out = np.empty((rows, hidden), np.float32) if i == last else other
            kernels.residual_norm(down, h, layer.norm2.w, layer.norm2.b, layer.norm2.eps, out)
            h, other = out, h
        result = h.reshape(batch, seq, hidden)
        if self.dtype is not float32:
            result = result.astype(self.dtype.numpy)
        return tensor_like(input_ids, result)

    def _projections(self, layer: _Layer, h: Any, rows: int) -> Any:
        """The (rows, 3 * hidden) query, key and value projections of ``h``."""
        qkv = self._buffer("qkv", rows, 3 * self.hidden)
        if len(layer.qkv) == 1:
            return layer.qkv[0].forward(h, out=qkv)
        width = self.hidden
        for j, part in enumerate(layer.qkv):
            got = part.forward(h, out=qkv[:, j * width : (j + 1) * width])
            if got.base is not qkv and got is not qkv:  # it could not write into the column slice
                qkv[:, j * width : (j + 1) * width] = got
        return qkv


__all__ = ["EncoderPlan", "Kinds"]
