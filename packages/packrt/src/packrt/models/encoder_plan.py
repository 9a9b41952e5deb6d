"""The fused forms of the BERT-family encoders' blocks (bert, roberta, xlm-roberta; SentenceEncoder's models):
what :class:`~packrt.models.encoder.EncoderLayer` and :class:`~packrt.models.encoder.EncoderEmbeddings` run when
nothing observes their inner modules. The encoder keeps one forward (embeddings, then its layer loop); each
block asks :func:`packrt_core.nn.plan.serve` for its fused form at the start of its own forward.

What :class:`EncoderLayerPlan` runs, on 2-D (batch * seq, width) arrays, with no module call and no tensor
wrapper between the steps (at a 1x16 query those were two thirds of the forward)::

    qkv = [Wq | Wk | Wv] x + b          one GEMM (its weight shared with the three layers, see below)
    ctx = attention(qkv, key mask)      heads read in place, the mask inside softmax, merged output
    h   = LayerNorm(x + Wo ctx + bo)    the residual add and the norm in one pass
    u   = gelu(W1 h + b1)               the bias and GELU in the GEMM's epilogue, in place
    out = LayerNorm(h + W2 u + b2)

:class:`EmbeddingsPlan` gathers the word, token-type and position rows, sums them in float32 and normalizes
them in one pass. With half-precision weights each block computes in float32 and rounds its output once to the
weights' dtype (the module road rounds after every operation).

When the query, key and value layers keep ``packed`` weights, their three packs are concatenated once
into one ``W^T`` (or one int8 weight: the activations are then quantized once, not three times) and
each layer's pack becomes a view of its columns (:func:`~packrt_core.nn.plan.share_pack`): one copy in memory,
which the module road serves from too. Under ``borrowed`` the fused form reads each layer's own arrays and copies
nothing. Intermediate activations live in buffers each thread reuses from call to call (one set for all the
blocks); each block's output is a new array. The rules (when a call takes the module road instead) are
:mod:`packrt_core.nn.plan`'s.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from packrt import nn
from packrt.models.layers import MultiHeadAttention
from packrt.models.plan_parts import as_float32, exact, require_served_dtypes, require_storage
from packrt_base.plan import PlanKernels
from packrt_core import dispatch
from packrt_core.dtypes import float32
from packrt_core.nn.plan import PlanUnavailableError, array_of, owned_copy, serving_pack, share_pack, tensor_like
from packrt_core.tensor import Tensor

_LINEARS = (nn.Linear, nn.QuantizedLinear)


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


_BUFFERS = threading.local()


def _buffer(name: str, rows: int, width: int) -> Any:
    """This thread's buffer ``name`` as a (rows, width) float32 array, grown to the largest call seen; the
    blocks of every encoder in the thread share it (a block's run uses it only until it returns)."""
    store: dict[str, Any] = _BUFFERS.__dict__
    size = rows * width
    held = store.get(name)
    if held is None or held.size < size:
        held = store[name] = np.empty(size, np.float32)
    return held[:size].reshape(rows, width)


def _output(like: Tensor, out: Any, dtype: Any) -> Tensor:
    """``out`` (float32) as a new tensor on ``like``'s device, rounded once to the weights' ``dtype``."""
    return tensor_like(like, out if dtype is float32 else out.astype(dtype.numpy))


class EncoderLayerPlan:
    """An :class:`~packrt.models.encoder.EncoderLayer` as the fused steps of the module docstring."""

    nbytes: int
    fused: tuple[str, ...]

    def __init__(self, layer: Any, kernels: PlanKernels, layer_kind: type, mlp_kind: type) -> None:
        _exact(layer, layer_kind, "the block")
        require_served_dtypes(layer)
        attention = _exact(layer.attention, MultiHeadAttention, "attention")
        mlp = _exact(layer.mlp, mlp_kind, "mlp")
        act = _exact(mlp.act, nn.GELU, "mlp.act")
        projections = [
            _exact(getattr(attention, n), _LINEARS, f"attention.{n}") for n in ("q_proj", "k_proj", "v_proj")
        ]
        for name, linear in zip(
            ("q_proj", "k_proj", "v_proj", "o_proj"), [*projections, attention.o_proj], strict=True
        ):
            require_storage(_exact(linear, _LINEARS, f"attention.{name}"), f"attention.{name}")
        for name in ("up", "down"):
            require_storage(_exact(getattr(mlp, name), _LINEARS, f"mlp.{name}"), f"mlp.{name}")
        self.kernels, self.heads, self.hidden = kernels, attention.heads, attention.hidden
        self.device = layer.attention_norm.weight.device
        self.dtype = layer.attention_norm.weight.dtype  # what the module road's output comes in
        packs = [serving_pack(p) for p in projections]
        if all(p.serving_residency() == "packed" for p in projections) and kernels.fuses(packs):
            fused = kernels.linear(packs)
            shared = [
                share_pack(lin, old, part) for lin, old, part in zip(projections, packs, fused.parts, strict=True)
            ]
            self.qkv: tuple[Any, ...] = (fused,)
            note = "q, k, v: one GEMM over one weight, which the three layers' packs are views of"
            # what the joined weight holds beyond the layers' views of it (int8: its VNNI panels), or all of it
            extra = fused.nbytes - sum(int(part.nbytes) for part in fused.parts) if all(shared) else fused.nbytes
        else:
            self.qkv = tuple(kernels.linear([p]) for p in packs)
            note = "q, k, v: three GEMMs into one buffer (weights not packed, or not joinable)"
            extra = 0
        self.o = kernels.linear([serving_pack(attention.o_proj)])
        self.up = kernels.linear([serving_pack(mlp.up)], _ACTIVATION[act.approximate])
        self.down = kernels.linear([serving_pack(mlp.down)])
        self.norm1 = _Norm.of(layer.attention_norm, "attention_norm")
        self.norm2 = _Norm.of(layer.mlp_norm, "mlp_norm")
        self.nbytes = extra + sum(a.nbytes for n in (self.norm1, self.norm2) for a in (n.w, n.b))
        self.fused = (
            note,
            "bias + GELU in the up projection's epilogue; residual add + LayerNorm in one pass (x2)",
            "attention: heads read in place from the qkv buffer, key mask inside softmax, merged output",
        )

    def run(self, x: Tensor, key_mask: Tensor | None) -> Tensor | None:
        """The layer's output, or None for an input the module road must take (on another device).
        ``key_mask``: (batch, 1, 1, seq) True for keys a query may see, or None (every key)."""
        if x.device != self.device or (key_mask is not None and key_mask.device != self.device):
            return None
        stream = array_of(x)
        batch, seq, hidden = (int(s) for s in stream.shape)
        rows = batch * seq
        keys = None if key_mask is None else array_of(key_mask).reshape(batch, seq)
        x2 = np.ascontiguousarray(stream.reshape(rows, hidden), dtype=np.float32)  # x itself when it is float32
        kernels = self.kernels
        ctx, a = _buffer("ctx", rows, hidden), _buffer("a", rows, hidden)
        kernels.self_attention(self._projections(x2, rows), batch, self.heads, keys, None, ctx)
        h = _buffer("h", rows, hidden)
        # the attention's output + x (the same sum as x + it), normed: x is read, never written
        kernels.residual_norm(x2, self.o.forward(ctx, out=a), self.norm1.w, self.norm1.b, self.norm1.eps, h)
        up = self.up.forward(h, out=_buffer("up", rows, self.up.out_features))
        out = np.empty((rows, hidden), np.float32)
        kernels.residual_norm(self.down.forward(up, out=a), h, self.norm2.w, self.norm2.b, self.norm2.eps, out)
        return _output(x, out.reshape(batch, seq, hidden), self.dtype)

    def _projections(self, h: Any, rows: int) -> Any:
        """The (rows, 3 * hidden) query, key and value projections of ``h``."""
        qkv = _buffer("qkv", rows, 3 * self.hidden)
        if len(self.qkv) == 1:
            return self.qkv[0].forward(h, out=qkv)
        width = self.hidden
        for j, part in enumerate(self.qkv):
            got = part.forward(h, out=qkv[:, j * width : (j + 1) * width])
            if got.base is not qkv and got is not qkv:  # it could not write into the column slice
                qkv[:, j * width : (j + 1) * width] = got
        return qkv


class EmbeddingsPlan:
    """An :class:`~packrt.models.encoder.EncoderEmbeddings` (or a subclass numbering positions its own way):
    the three rows gathered and summed in float32 (word, token type, position: the module road's order), then
    LayerNorm, rounded once."""

    nbytes: int
    fused: tuple[str, ...] = ("word + token type + position rows summed in float32, then LayerNorm",)

    def __init__(self, embeddings: Any, kernels: PlanKernels) -> None:
        names = ("word", "position", "token_type")
        for name in names:
            require_storage(_exact(getattr(embeddings, name), nn.Embedding, name), name)
        require_served_dtypes(embeddings)
        self.embeddings = embeddings
        self.tables = tuple(serving_pack(getattr(embeddings, n)) for n in names)
        self.vocab = tuple(getattr(embeddings, n).num_embeddings for n in names)
        self.norm = _Norm.of(embeddings.norm, "norm")
        self.device = embeddings.word.weight.device
        self.dtype = embeddings.word.weight.dtype
        self.record = dispatch.kernels_for(self.device)
        self.nbytes = sum(a.nbytes for a in (self.norm.w, self.norm.b))

    def run(self, input_ids: Tensor, token_type_ids: Tensor | None) -> Tensor | None:
        """The embeddings' output, or None for inputs the module road must check (ids outside a table, another
        device, token types of another shape): it raises its own error."""
        taken = self._inputs(input_ids, token_type_ids)
        if taken is None:
            return None
        ids, positions, types = taken
        word, position, token_type = self.tables
        x = word.forward(ids).astype(np.float32, copy=False)
        x = x if x.base is None and x.flags.writeable else x.copy()
        x += token_type.forward(types)
        x += position.forward(positions)
        hidden = x.shape[-1]
        out = self.record.layer_norm(x.reshape(-1, hidden), hidden, self.norm.w, self.norm.b, self.norm.eps)
        return _output(input_ids, out.reshape(x.shape), self.dtype)

    def _inputs(self, input_ids: Tensor, token_type_ids: Tensor | None) -> tuple[Any, Any, Any] | None:
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


__all__ = ["EmbeddingsPlan", "EncoderLayerPlan"]
