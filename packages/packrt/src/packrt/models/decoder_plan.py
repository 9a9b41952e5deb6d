"""The serving plan of the causal LMs (the rotary decoders built from :mod:`packrt.models.decoder_blocks`:
llama, qwen2, mistral, qwen3, phi3; gpt2): one forward step, prompt or decode, as fused steps over the layers'
packs (the rules are :mod:`packrt_core.nn.plan`'s).

Per layer, on 2-D (batch * length, width) arrays, with no module call between the steps::

    qkv = [Wq | Wk | Wv] h + b        one GEMM (the three layers' packs become views of its weight)
    q, k = norm(q), norm(k)           qwen3: an RMSNorm over each head
    q, k = rotary(q), rotary(k)       rotary decoders: the heads read in place from the qkv buffer
    ctx = attend(q, k, v, cache)      the family's own cached, grouped, windowed attention
    x  += Wo ctx;  h = norm(x)        the residual add and the next norm in one pass
    u   = act(W1 h + b1)              gpt2: the activation in the GEMM's epilogue
    u   = act(Wg h) * (Wu h)          rotary decoders: gate and up as one GEMM, then one gated pass
    x  += W2 u;  h = norm'(x)         the next layer's first norm (or the final norm) in the same pass

Which modules it reproduces is the model's to say (:class:`DecoderBlocks`): the plan refuses any module
whose class is not exactly one of them (a subclass may compute anything), and a block whose options it
does not reproduce (a scaled embedding, norms of another class), so such a model keeps the module road.

The key/value cache is the model's own :class:`~packrt.models.attention.KVCache`, written through its
API, so a generation may switch roads between steps (a hook registered halfway) and both read the
same cache. Logits stay with the model's ``lm_head`` (one call a step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import packrt
from packrt import nn
from packrt.models.attention import KVCache, Step, attend
from packrt.models.plan_parts import as_float32, exact, require_storage
from packrt_base.plan import PlanKernels
from packrt_core import dispatch
from packrt_core.dtypes import float32
from packrt_core.nn.plan import PlanUnavailableError, array_of, owned_copy, serving_pack, share_pack, tensor_like
from packrt_core.tensor import Tensor

_LINEARS = (nn.Linear, nn.QuantizedLinear)
_DTYPES = ("float32", "bfloat16", "float16")
_ACTIVATIONS: dict[type, str] = {nn.SiLU: "silu", nn.ReLU: "relu"}


def _exact(module: Any, kind: type | tuple[type, ...], path: str) -> Any:
    module = exact(module, kind, path, "decoder")
    require_storage(module, path)
    return module


def _activation(module: Any, path: str) -> str:
    if type(module) is nn.GELU:
        return "gelu" if module.approximate == "none" else "gelu_tanh"
    if type(module) in _ACTIVATIONS and not module.inplace:
        return _ACTIVATIONS[type(module)]
    raise PlanUnavailableError(f"{path} is a {type(module).__name__}, an activation the decoder's plan does not serve")


@dataclass(frozen=True)
class DecoderBlocks:
    """The classes of a decoder's blocks that the plan reproduces, as the model declares them.

    ``rotary``: llama-style blocks (a pre-norm layer of rotary grouped-query attention, with ``q_proj``,
    ``k_proj``, ``v_proj`` or one ``qkv_proj``, and a gated MLP, ``gate`` and ``up`` or one ``gate_up``);
    otherwise gpt2's (one ``qkv`` projection, ``out``, and an ``up``-activation-``down`` MLP) with learned
    positions. ``norm``: the norm class the layers use besides ``nn.LayerNorm`` / ``nn.RMSNorm``.
    """

    layer: type
    attention: type
    mlp: type
    norm: type
    rotary: bool


@dataclass(frozen=True)
class _Norm:
    w: Any
    b: Any
    eps: float
    rms: bool

    @classmethod
    def of(cls, norm: Any, path: str, kind: type) -> _Norm:
        norm = _exact(norm, (nn.LayerNorm, nn.RMSNorm, kind), path)
        if type(norm) in (nn.LayerNorm, nn.RMSNorm) and (len(norm.normalized_shape) != 1 or norm.weight is None):
            raise PlanUnavailableError(f"{path}: the plan serves norms over one trailing dim with a weight")
        rms = type(norm) is not nn.LayerNorm
        eps = float(np.finfo(np.float32).eps) if norm.eps is None else float(norm.eps)
        b = None if rms else owned_copy(norm.bias)
        return cls(as_float32(owned_copy(norm.weight)), as_float32(b), eps, rms)


def _joined(kernels: PlanKernels, layers: list[Any], activation: str | None = None) -> tuple[tuple[Any, ...], int]:
    """One plan linear over ``layers`` (their packs joined and adopted) or one each; and the bytes the
    plan holds beyond the layers' packs (-1: not joined)."""
    packs = [serving_pack(layer) for layer in layers]
    if len(layers) > 1 and all(layer.serving_residency() == "packed" for layer in layers) and kernels.fuses(packs):
        fused = kernels.linear(packs, activation)
        shared = [share_pack(layer, old, part) for layer, old, part in zip(layers, packs, fused.parts, strict=True)]
        views = sum(int(part.nbytes) for part in fused.parts) if all(shared) else 0
        return (fused,), int(fused.nbytes) - views
    return tuple(kernels.linear([p], activation) for p in packs), -1


def _into(parts: tuple[Any, ...], h: Any, width: int) -> Any:
    """The outputs of ``parts`` on ``h`` side by side, (rows, width)."""
    if len(parts) == 1:
        return parts[0].forward(h)
    out = np.empty((h.shape[0], width), np.float32)
    start = 0
    for part in parts:
        stop = start + part.out_features
        got = part.forward(h, out=out[:, start:stop])
        if got.base is not out:
            out[:, start:stop] = got
        start = stop
    return out


@dataclass(frozen=True)
class _Layer:
    norm1: _Norm
    qkv: tuple[Any, ...]
    o: Any
    norm2: _Norm
    up: tuple[Any, ...]  # gpt2: (up,) with its activation; rotary: gate and up (joined, or two)
    down: Any
    heads: int
    kv_heads: int
    dim: int
    window: int | None
    scale: float | None
    act: str  # rotary: the gate's activation (gpt2's is in the up projection's epilogue)
    rope_kind: str  # rotary: which of the model's tables the layer reads
    head_norms: tuple[_Norm, _Norm] | None  # rotary: the norms over each query head and each key head


class DecoderPlan:
    """One step of a decoder made of ``blocks`` as the fused steps of the module docstring."""

    nbytes: int
    fused: tuple[str, ...]

    def __init__(self, model: Any, kernels: PlanKernels, blocks: DecoderBlocks) -> None:
        for name, param in model.named_parameters():
            if param.dtype.is_floating_point and param.dtype.name not in _DTYPES:
                raise PlanUnavailableError(f"{name} is {param.dtype.name}: the plan serves float32, bfloat16, float16")
        if getattr(model, "embed_scale", None) is not None:
            raise PlanUnavailableError("the embedding is scaled (embed_scale), which the decoder's plan does not serve")
        self.kernels, self.blocks, self.model = kernels, blocks, model
        self.rotary = blocks.rotary
        self.embed = serving_pack(_exact(model.embed, nn.Embedding, "embed"))
        self.vocab = model.embed.num_embeddings
        self.positions = None
        if not self.rotary:
            self.positions = serving_pack(_exact(model.positions, nn.Embedding, "positions"))
        self.device = model.embed.weight.device
        self.dtype = model.embed.weight.dtype
        self.record = dispatch.kernels_for(self.device)
        self.nbytes = 0  # grown by each layer's joined weights beyond the layers' packs, then the norms
        joined, layers = [], []
        for i, layer in enumerate(model.layers):
            planned, both = self._layer(layer, f"layers.{i}")
            layers.append(planned)
            joined.append(both)
        self.layers = tuple(layers)
        self.norm = _Norm.of(model.norm, "norm", blocks.norm)
        self.nbytes += sum(a.nbytes for n in self._norms() for a in (n.w, n.b) if a is not None)
        what = "q, k, v" + (" and gate, up" if self.rotary else "")
        self.fused = (
            f"{len(layers)} layers; {what}: one GEMM each, the layers' packs views of its weight"
            if joined and all(joined)
            else f"{len(layers)} layers; projections as the layers' own GEMMs (weights not packed, or not joinable)",
            "residual add + the next norm in one pass; the activation in the up projection's epilogue"
            + (" (act(gate) * up in one pass)" if self.rotary else ""),
            "attention: the family's cached, grouped attention over the heads of the qkv buffer",
        )

    def _norms(self) -> list[_Norm]:
        return [self.norm, *(n for layer in self.layers for n in (layer.norm1, layer.norm2))]

    def _linears(self, module: Any, names: tuple[str, ...], path: str) -> list[Any]:
        return [_exact(getattr(module, n), _LINEARS, f"{path}.{n}") for n in names]

    def _layer(self, layer: Any, path: str) -> tuple[_Layer, bool]:
        k, blocks = self.kernels, self.blocks
        layer = exact(layer, blocks.layer, path, "decoder")
        attention = exact(layer.attention, blocks.attention, f"{path}.attention", "decoder")
        mlp = exact(layer.mlp, blocks.mlp, f"{path}.mlp", "decoder")
        act = _activation(mlp.act, f"{path}.mlp.act")
        head_norms: tuple[_Norm, _Norm] | None = None
        if self.rotary:
            if layer.post_norms:
                raise PlanUnavailableError(
                    f"{path} norms its attention's and MLP's outputs, which the plan does not serve"
                )
            if attention.normed:  # qwen3: an RMSNorm over each query head and each key head
                where = f"{path}.attention"
                q_norm = _Norm.of(attention.q_norm, f"{where}.q_norm", nn.RMSNorm)
                head_norms = (q_norm, _Norm.of(attention.k_norm, f"{where}.k_norm", nn.RMSNorm))
            fused_qkv = ("qkv_proj",) if attention.fused else ("q_proj", "k_proj", "v_proj")
            projections = self._linears(attention, fused_qkv, f"{path}.attention")
            o = _exact(attention.o_proj, _LINEARS, f"{path}.attention.o_proj")
            gate_up = self._linears(mlp, ("gate_up",) if mlp.fused else ("gate", "up"), f"{path}.mlp")
            up, up_extra = _joined(k, gate_up)
            heads, kv_heads = attention.heads, attention.kv_heads
            window, scale, rope_kind = attention.window, attention.scale, layer.rope_kind
        else:
            projections = self._linears(attention, ("qkv",), f"{path}.attention")
            o = _exact(attention.out, _LINEARS, f"{path}.attention.out")
            up, up_extra = _joined(k, self._linears(mlp, ("up",), f"{path}.mlp"), act)
            heads = kv_heads = attention.heads
            window, scale, rope_kind = None, attention.scale, ""
        qkv, qkv_extra = _joined(k, projections)
        planned = _Layer(
            norm1=_Norm.of(layer.attention_norm, f"{path}.attention_norm", blocks.norm),
            qkv=qkv,
            o=k.linear([serving_pack(o)]),
            norm2=_Norm.of(layer.mlp_norm, f"{path}.mlp_norm", blocks.norm),
            up=up,
            down=k.linear([serving_pack(_exact(mlp.down, _LINEARS, f"{path}.mlp.down"))]),
            heads=heads,
            kv_heads=kv_heads,
            dim=attention.head_dim,
            window=window,
            scale=scale,
            act=act,
            rope_kind=rope_kind,
            head_norms=head_norms,
        )
        self.nbytes += max(qkv_extra, 0) + max(up_extra, 0)
        # one projection needs no join (phi3's qkv_proj, gpt2's qkv)
        joined = (qkv_extra >= 0 or len(projections) == 1) and (up_extra >= 0 or len(up) == 1)
        return planned, joined

    def _embed(self, input_ids: Tensor, step: Step, positions: Tensor | None) -> Any | None:
        ids = array_of(input_ids)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab):
            return None  # the plain road names the id
        x = np.array(self.embed.forward(ids), dtype=np.float32)
        if self.positions is not None:
            where = (
                np.arange(step.offset, step.offset + step.length)[None, :] if positions is None else array_of(positions)
            )
            x += self.positions.forward(where)
        return x.reshape(-1, x.shape[-1])

    def hidden(
        self, input_ids: Tensor, step: Step, cache: KVCache | None, positions: Tensor | None
    ) -> packrt.Tensor | None:
        """The final hidden states (batch, length, hidden) of one step, or None for inputs the plain road
        must check (it raises its own error)."""
        if input_ids.device != self.device:
            return None
        x = self._embed(input_ids, step, positions)
        if x is None:
            return None
        batch, length = (int(s) for s in input_ids.shape)
        like = tensor_like(input_ids, x)
        tables = (
            {kind: rotary(step.offset, step.length, positions, like) for kind, rotary in self.model.rotaries.items()}
            if self.rotary
            else {}
        )
        h = self._norm(self.layers[0].norm1 if self.layers else self.norm, x, None)
        for i, layer in enumerate(self.layers):
            ctx = self._attend(i, layer, h, batch, length, step, cache, tables.get(layer.rope_kind), like)
            attended = layer.o.forward(ctx)
            h = self._norm(layer.norm2, x, attended)
            if self.rotary:
                both = _into(layer.up, h, _width(layer.up))
                up = self.kernels.gated(both, layer.act, np.empty((h.shape[0], both.shape[1] // 2), np.float32))
            else:
                up = _into(layer.up, h, _width(layer.up))
            down = layer.down.forward(up)
            following = self.layers[i + 1].norm1 if i + 1 < len(self.layers) else self.norm
            h = self._norm(following, x, down)
        out = h.reshape(batch, length, -1)
        if self.dtype is not float32:
            out = out.astype(self.dtype.numpy)
        return tensor_like(input_ids, out)

    def _norm(self, norm: _Norm, x: Any, add: Any | None) -> Any:
        """``norm(x + add)`` with ``x += add`` in place (``add`` None: ``norm(x)``, x unchanged)."""
        out = np.empty_like(x)
        if add is None:
            if norm.rms:
                return self.record.rms_norm(x, x.shape[-1], norm.w, norm.eps)
            return self.record.layer_norm(x, x.shape[-1], norm.w, norm.b, norm.eps)
        return self.kernels.residual_norm(add, x, norm.w, norm.b, norm.eps, out, norm.rms)

    def _attend(
        self,
        index: int,
        layer: _Layer,
        h: Any,
        batch: int,
        length: int,
        step: Step,
        cache: KVCache | None,
        rotary: tuple[Tensor, Tensor] | None,
        like: Tensor,
    ) -> Any:
        """The attention context (batch * length, heads * head_dim) of layer ``index``."""
        heads, kv_heads, dim = layer.heads, layer.kv_heads, layer.dim
        qkv = _into(layer.qkv, h, (heads + 2 * kv_heads) * dim)
        rows = qkv.reshape(batch, length, -1)
        q = rows[:, :, : heads * dim].reshape(batch, length, heads, dim).transpose(0, 2, 1, 3)
        k = (
            rows[:, :, heads * dim : (heads + kv_heads) * dim]
            .reshape(batch, length, kv_heads, dim)
            .transpose(0, 2, 1, 3)
        )
        v = rows[:, :, (heads + kv_heads) * dim :].reshape(batch, length, kv_heads, dim).transpose(0, 2, 1, 3)
        if layer.head_norms is not None:
            q_norm, k_norm = layer.head_norms
            q = self.record.rms_norm(q, dim, q_norm.w, q_norm.eps)
            k = self.record.rms_norm(k, dim, k_norm.w, k_norm.eps)
        qt, kt, vt = tensor_like(like, q), tensor_like(like, k), tensor_like(like, v)
        if rotary is not None:
            cos, sin = rotary
            qt = tensor_like(like, self.record.rotary_embedding(q, array_of(cos), array_of(sin)))
            kt = tensor_like(like, self.record.rotary_embedding(k, array_of(cos), array_of(sin)))
        out = attend(qt, kt, vt, step=step, cache=cache, layer=index, window=layer.window, scale=layer.scale)
        return array_of(out).transpose(0, 2, 1, 3).reshape(batch * length, heads * dim)


def _width(parts: tuple[Any, ...]) -> int:
    return sum(int(p.out_features) for p in parts)


__all__ = ["DecoderBlocks", "DecoderPlan"]
