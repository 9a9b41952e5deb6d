"""The fused form of a decoder layer: what :class:`~packrt.models.decoder_blocks.PreNormLayer` (llama, qwen2,
mistral, qwen3, phi3, ministral) and gpt2's layer run when nothing observes their inner modules. The model keeps
one forward (its embedding, its layer loop, its final norm); each layer asks :func:`packrt_core.nn.plan.serve`
for its fused form at the start of its own forward, so a hook on one layer's MLP sends that layer (only) down
its module-by-module road.

Per layer, on 2-D (batch * length, width) arrays, with no module call between the steps::

    h = norm(x)                       the layer's first norm, over a float32 copy of the residual stream
    qkv = [Wq | Wk | Wv] h + b        one GEMM (the three layers' packs become views of its weight)
    q, k = norm(q), norm(k)           qwen3: an RMSNorm over each head
    q, k = rotary(q), rotary(k)       rotary decoders: the heads read in place from the qkv buffer
    ctx = attend(q, k, v, cache)      the family's own cached, grouped, windowed attention (a one-token step:
                                      the device's decode kernel over the cache, no tensor per head)
    x  += Wo ctx;  h = norm'(x)       the residual add and the MLP's norm in one pass
    u   = act(W1 h + b1)              gpt2: the activation in the GEMM's epilogue
    u   = act(Wg h) * (Wu h)          rotary decoders: gate and up as one GEMM, then one gated pass
    x  += W2 u                        the layer's output: the residual stream, in the dtype it came in

Which modules it reproduces is the layer's to say (:class:`DecoderBlocks`): the fused form refuses any child
whose class is not exactly one of them (a subclass may compute anything), so such a layer keeps its module
road. Gemma's sandwich norms (each branch normed before it joins the stream) and granite's residual scale are
applied to the branch before its residual add.

The key/value cache is the model's own :class:`~packrt.models.attention.KVCache`, written through its API,
so a generation may switch roads between steps (a hook registered halfway) and both read the same cache. Where
the device runs a whole layer's one-token step in one call (:class:`~packrt_base.plan.DecodeLayer`: the CPU's
for layers of quantized blocks), that call writes the step's keys and values into the buffers the cache's API
allocated at the prompt's step, and gives the bits of the steps above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from packrt import nn
from packrt.models.attention import KVCache, Step, attend
from packrt.models.plan_parts import as_float32, exact, require_served_dtypes, require_storage
from packrt_base.plan import DecodeLayer, DecodeStep, PlanKernels
from packrt_core import dispatch
from packrt_core.nn.plan import PlanUnavailableError, array_of, owned_copy, serving_pack, share_pack, tensor_like
from packrt_core.tensor import Tensor

_LINEARS = (nn.Linear, nn.QuantizedLinear, nn.BlockQuantizedLinear)
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
    positions. ``norm``: the norm classes the layers use besides ``nn.LayerNorm`` / ``nn.RMSNorm`` (an RMSNorm
    whose class says ``weight_offset`` multiplies by ``offset + weight``: Gemma's ``1 + weight``).
    """

    layer: type
    attention: type
    mlp: type
    norm: tuple[type, ...]
    rotary: bool


@dataclass(frozen=True)
class _Norm:
    w: Any
    b: Any
    eps: float
    rms: bool

    @classmethod
    def of(cls, norm: Any, path: str, kinds: tuple[type, ...]) -> _Norm:
        norm = _exact(norm, (nn.LayerNorm, nn.RMSNorm, *kinds), path)
        if type(norm) in (nn.LayerNorm, nn.RMSNorm) and (len(norm.normalized_shape) != 1 or norm.weight is None):
            raise PlanUnavailableError(f"{path}: the plan serves norms over one trailing dim with a weight")
        rms = type(norm) is not nn.LayerNorm
        eps = float(np.finfo(np.float32).eps) if norm.eps is None else float(norm.eps)
        b = None if rms else owned_copy(norm.bias)
        w = as_float32(owned_copy(norm.weight))
        offset = getattr(type(norm), "weight_offset", 0.0)  # Gemma's 1 + weight, folded into the copy
        return cls(w + np.float32(offset) if offset else w, as_float32(b), eps, rms)


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


class DecoderLayerPlan:
    """One decoder layer (of ``blocks``) as the fused steps of the module docstring; ``run`` is its forward."""

    nbytes: int
    fused: tuple[str, ...]

    def __init__(self, layer: Any, kernels: PlanKernels, blocks: DecoderBlocks) -> None:
        exact(layer, blocks.layer, "the block", "decoder")
        require_served_dtypes(layer)
        self.kernels, self.blocks, self.rotary = kernels, blocks, blocks.rotary
        self.device = next(iter(layer.parameters())).device
        self.record = dispatch.kernels_for(self.device)
        self.nbytes = 0
        joined = self._plan(layer)
        self.nbytes += sum(a.nbytes for n in self._norms() if n is not None for a in (n.w, n.b) if a is not None)
        what = "q, k, v" + (" and gate, up" if self.rotary else "")
        self.fused = (
            f"{what}: one GEMM each, the layers' packs views of its weight"
            if joined
            else "projections as the layers' own GEMMs (weights not packed, or not joinable)",
            "residual add + the MLP's norm in one pass; the activation in the up projection's epilogue"
            + (" (act(gate) * up in one pass)" if self.rotary else ""),
            "attention: the family's cached, grouped attention over the heads of the qkv buffer",
        )
        if self.stepper is not None:
            self.fused += (
                "a one-token step: the whole layer in one compiled call, the same kernels in the same order",
            )

    def _linears(self, module: Any, names: tuple[str, ...], path: str) -> list[Any]:
        return [_exact(getattr(module, n), _LINEARS, f"{path}.{n}") for n in names]

    def _plan(self, layer: Any) -> bool:
        """Read ``layer``'s children into this plan; whether its projections were joined."""
        k, blocks = self.kernels, self.blocks
        attention = exact(layer.attention, blocks.attention, "attention", "decoder")
        mlp = exact(layer.mlp, blocks.mlp, "mlp", "decoder")
        self.act = _activation(mlp.act, "mlp.act")
        self.head_norms: tuple[_Norm, _Norm] | None = None
        self.post_norms: tuple[_Norm, _Norm] | None = None
        if self.rotary:
            if layer.post_norms:  # gemma's sandwich: each branch normed before it joins the stream
                self.post_norms = (
                    _Norm.of(layer.post_attention_norm, "post_attention_norm", blocks.norm),
                    _Norm.of(layer.post_mlp_norm, "post_mlp_norm", blocks.norm),
                )
            if attention.normed:  # qwen3, gemma3: an RMSNorm over each query head and each key head
                q_norm = _Norm.of(attention.q_norm, "attention.q_norm", blocks.norm)
                self.head_norms = (q_norm, _Norm.of(attention.k_norm, "attention.k_norm", blocks.norm))
            fused_qkv = ("qkv_proj",) if attention.fused else ("q_proj", "k_proj", "v_proj")
            projections = self._linears(attention, fused_qkv, "attention")
            o = _exact(attention.o_proj, _LINEARS, "attention.o_proj")
            gate_up = self._linears(mlp, ("gate_up",) if mlp.fused else ("gate", "up"), "mlp")
            self.up, up_extra = _joined(k, gate_up)
            self.heads, self.kv_heads = attention.heads, attention.kv_heads
            self.window, self.scale = attention.window, attention.scale
        else:
            projections = self._linears(attention, ("qkv",), "attention")
            o = _exact(attention.out, _LINEARS, "attention.out")
            self.up, up_extra = _joined(k, self._linears(mlp, ("up",), "mlp"), self.act)
            self.heads = self.kv_heads = attention.heads
            self.window, self.scale = None, attention.scale
        self.index, self.dim = attention.index, attention.head_dim
        self.decode_scale = 1.0 / float(np.sqrt(self.dim)) if self.scale is None else float(self.scale)
        self.residual_scale = getattr(layer, "residual_scale", None)  # granite: what joins the stream, scaled
        self.rotates = self.rotary and attention.rotates  # a NoPE layer (smollm3) reads no table
        self.softcap = getattr(attention, "softcap", None)  # gemma2: the scores soft-capped
        self.full_norms = bool(getattr(attention, "full_norms", False))  # olmo2: q/k norms over the full width
        self.qkv, qkv_extra = _joined(k, projections)
        self.o = k.linear([serving_pack(o)])
        self.down = k.linear([serving_pack(_exact(mlp.down, _LINEARS, "mlp.down"))])
        pre = getattr(layer, "pre_norms", True)  # olmo2: no norm before the attention and the MLP
        self.norm1 = _Norm.of(layer.attention_norm, "attention_norm", blocks.norm) if pre else None
        self.norm2 = _Norm.of(layer.mlp_norm, "mlp_norm", blocks.norm) if pre else None
        self.nbytes += max(qkv_extra, 0) + max(up_extra, 0)
        self.stepper = self._stepper()
        # one projection needs no join (phi3's qkv_proj, gpt2's qkv)
        return (qkv_extra >= 0 or len(projections) == 1) and (up_extra >= 0 or len(self.up) == 1)

    def _norms(self) -> tuple[_Norm | None, ...]:
        """Every norm the layer applies: before each branch (None: olmo2 has none), per head, after each branch."""
        return (self.norm1, self.norm2, *(self.head_norms or ()), *(self.post_norms or ()))

    def _stepper(self) -> DecodeStep | None:
        """The device's one-call decode step for this layer (:class:`~packrt_base.plan.DecodeLayer`), where it has
        one and the layer is a rotary one with RMS norms throughout."""
        make = self.kernels.decode_layer
        norms = self._norms()
        if (
            make is None
            or not self.rotary
            or self.full_norms
            or not all(n is not None and n.rms for n in norms)
            or (self.head_norms is not None and self.head_norms[0].eps != self.head_norms[1].eps)
        ):
            return None
        assert self.norm1 is not None and self.norm2 is not None  # pre-norms: checked above
        heads, posts = self.head_norms, self.post_norms
        return make(
            DecodeLayer(
                qkv=self.qkv,
                o=self.o,
                gate_up=self.up,
                down=self.down,
                norms=(self.norm1.w, self.norm2.w),
                eps=(self.norm1.eps, self.norm2.eps),
                heads=self.heads,
                kv_heads=self.kv_heads,
                head_dim=self.dim,
                activation=self.act,
                scale=self.decode_scale,
                softcap=self.softcap,
                head_norms=None if heads is None else (heads[0].w, heads[1].w, heads[0].eps),
                post_norms=None if posts is None else ((posts[0].w, posts[0].eps), (posts[1].w, posts[1].eps)),
                residual_scale=self.residual_scale,
            )
        )

    def run(self, x: Tensor, rotary: tuple[Tensor, Tensor] | None, step: Step, cache: KVCache | None) -> Tensor | None:
        """The layer's output (the residual stream after it, ``x``'s shape and dtype), or None for an input the
        module road must take (on another device)."""
        if x.device != self.device:
            return None
        stream = array_of(x)
        batch, length, width = (int(s) for s in stream.shape)
        if length == 1 and self.stepper is not None and cache is not None and not step.bidirectional:
            stepped = self._step(self.stepper, stream.reshape(batch, width), rotary, step, cache)
            if stepped is not None:
                return tensor_like(x, stepped.reshape(batch, 1, width))
        # the layer's own float32 copy of the stream (summed into in place) and its first norm, in one pass
        res = np.zeros((batch * length, width), np.float32)
        h = self._norm(self.norm1, res, stream.reshape(-1, width))
        ctx = self._attend(h, batch, length, step, cache, rotary if self.rotates else None, x)
        h = self._norm(self.norm2, res, self._branch(self.o.forward(ctx), 0))
        both = _into(self.up, h, _width(self.up))
        up = both
        if self.rotary:
            up = self.kernels.gated(both, self.act, np.empty((h.shape[0], both.shape[1] // 2), np.float32))
        res += self._branch(self.down.forward(up), 1)
        out = res.reshape(batch, length, width)
        return tensor_like(x, out if out.dtype == stream.dtype else out.astype(stream.dtype))

    def _step(
        self, stepper: DecodeStep, rows: Any, rotary: tuple[Tensor, Tensor] | None, step: Step, cache: KVCache
    ) -> Any:
        """A one-token step in one call, or None where the stepper does not take these inputs (the keys and values
        go straight into the buffers the cache's API allocated at the prompt; before them, the road below)."""
        keys, values = cache.keys[self.index], cache.values[self.index]
        if keys is None or values is None or rows.dtype != np.float32:
            return None
        tables = None
        if self.rotates and rotary is not None:
            tables = (array_of(rotary[0]), array_of(rotary[1]))
        first = step.mask(self.window)[0]
        mask = None if step.key_mask is None else array_of(step.key_mask)
        return stepper.run(rows, tables, array_of(keys), array_of(values), step.offset, first, mask)

    def _branch(self, y: Any, which: int) -> Any:
        """What of the attention's (``which`` 0) or the MLP's (1) output ``y`` joins the stream: normed by its post
        norm (gemma), scaled by the residual scale (granite), or ``y`` itself."""
        if self.post_norms is not None:
            post = self.post_norms[which]
            y = self.record.rms_norm(y, y.shape[-1], post.w, post.eps)
        if self.residual_scale is not None:
            y *= np.float32(self.residual_scale)
        return y

    def _norm(self, norm: _Norm | None, x: Any, add: Any) -> Any:
        """``norm(x + add)`` with ``x += add`` in place; no norm (olmo2): ``x`` itself, after the add."""
        if norm is None:
            x += add
            return x
        return self.kernels.residual_norm(add, x, norm.w, norm.b, norm.eps, np.empty_like(x), norm.rms)

    def _rotate(self, x: Any, cos: Any, sin: Any) -> Any:
        """``x`` (batch, heads, length, head_dim) rotated by tables of ``cos.shape[-1]`` features: all of the
        head, or with a partial rotary factor its first features, the rest passed through
        (:func:`packrt.models.rotary.rotate_heads` on the module road)."""
        width = cos.shape[-1]
        if width == x.shape[-1]:
            return self.record.rotary_embedding(x, cos, sin)
        out = x.copy()
        out[..., :width] = self.record.rotary_embedding(x[..., :width], cos, sin)
        return out

    def _attend(
        self,
        h: Any,
        batch: int,
        length: int,
        step: Step,
        cache: KVCache | None,
        rotary: tuple[Tensor, Tensor] | None,
        like: Tensor,
    ) -> Any:
        """The attention context (batch * length, heads * head_dim) of ``h``."""
        heads, kv_heads, dim = self.heads, self.kv_heads, self.dim
        qkv = _into(self.qkv, h, (heads + 2 * kv_heads) * dim)
        rows = qkv.reshape(batch, length, -1)
        q_rows, k_rows = rows[:, :, : heads * dim], rows[:, :, heads * dim : (heads + kv_heads) * dim]
        if self.full_norms and self.head_norms is not None:  # olmo2: over all the queries, all the keys
            q_norm, k_norm = self.head_norms
            q_rows = self.record.rms_norm(np.ascontiguousarray(q_rows), heads * dim, q_norm.w, q_norm.eps)
            k_rows = self.record.rms_norm(np.ascontiguousarray(k_rows), kv_heads * dim, k_norm.w, k_norm.eps)
        q = q_rows.reshape(batch, length, heads, dim).transpose(0, 2, 1, 3)
        k = k_rows.reshape(batch, length, kv_heads, dim).transpose(0, 2, 1, 3)
        v = rows[:, :, (heads + kv_heads) * dim :].reshape(batch, length, kv_heads, dim).transpose(0, 2, 1, 3)
        if self.head_norms is not None and not self.full_norms:
            # contiguous heads take the compiled norm at every batch size: one sequence's bits do not depend on
            # the batch it decodes in (a view of several rows' heads would take numpy's road, its own rounding)
            q_norm, k_norm = self.head_norms
            q = self.record.rms_norm(np.ascontiguousarray(q), dim, q_norm.w, q_norm.eps)
            k = self.record.rms_norm(np.ascontiguousarray(k), dim, k_norm.w, k_norm.eps)
        if rotary is not None:
            cos, sin = array_of(rotary[0]), array_of(rotary[1])
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        kt, vt = tensor_like(like, k), tensor_like(like, v)
        decode = self.kernels.decode_attention
        if decode is not None and cache is not None and length == 1 and not step.bidirectional:
            return self._decode(decode, q, kt, vt, step, cache)
        qt = tensor_like(like, q)
        out = attend(
            qt,
            kt,
            vt,
            step=step,
            cache=cache,
            layer=self.index,
            window=self.window,
            scale=self.scale,
            softcap=self.softcap,
        )
        return array_of(out).transpose(0, 2, 1, 3).reshape(batch * length, heads * dim)

    def _decode(self, decode: Any, q: Any, kt: Tensor, vt: Tensor, step: Step, cache: KVCache) -> Any:
        """A one-token step's attention context (batch, heads * head_dim): the keys and values stored in the
        cache through its API (as :func:`attend` writes them), then the device's decode kernel over the
        cached positions the layer's window takes, with no tensor made per head."""
        batch, heads, _, dim = (int(s) for s in q.shape)
        stop = cache.store(self.index, kt, vt, step.offset)
        keys, values = cache.keys[self.index], cache.values[self.index]
        assert keys is not None and values is not None, "KVCache.store allocates a layer's buffers"
        first = step.mask(self.window)[0]
        mask = None if step.key_mask is None else array_of(step.key_mask)
        out = np.empty((batch, heads * dim), np.float32)
        rows = np.ascontiguousarray(q.reshape(batch, heads, dim))
        ctx = decode(rows, array_of(keys), array_of(values), first, stop, mask, self.decode_scale, self.softcap, out)
        return ctx if q.dtype == np.float32 else ctx.astype(q.dtype)


def _width(parts: tuple[Any, ...]) -> int:
    return sum(int(p.out_features) for p in parts)


__all__ = ["DecoderBlocks", "DecoderLayerPlan"]
