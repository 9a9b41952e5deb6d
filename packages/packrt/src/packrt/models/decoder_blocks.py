"""The one rotary decoder stack: attention, gated MLP, pre-norm layer, the LM; every rotary family is options.

``llama`` (with ``qwen2`` and ``mistral``), ``qwen3``, ``gemma3``, ``phi3`` and ``ministral`` build their
models from these blocks; each family module is its config reading (a config its schema completed with
the family's defaults, :func:`~packrt.models.config_schema.completed`) and its key map:

- :class:`RotaryAttention`: grouped-query attention with rotary positions over a key/value cache.
  Its options: ``head_norm`` adds a norm over each head of the queries and of the keys before the
  rotation (``q_norm`` / ``k_norm``: qwen3, gemma3); the projections are three Linears (``q_proj``,
  ``k_proj``, ``v_proj``), or with ``fused`` one ``qkv_proj`` whose output rows are the queries, then
  the keys, then the values (phi3); ``bias`` puts a bias on all four projections (the configs'
  ``attention_bias``) and ``o_bias`` overrides it for ``o_proj`` (qwen2: q, k, v only); ``scale``
  replaces ``1/sqrt(head_dim)`` (gemma3's ``query_pre_attn_scalar``); ``window`` makes the layer see only
  the last ``window`` positions; ``rotates=False`` makes a layer without positions (NoPE: smollm3's every
  fourth), its queries and keys not rotated; ``softcap`` soft-caps the scores (gemma2's
  ``attn_logit_softcapping``); ``full_norms`` makes ``head_norm``'s norms span all the queries and all the keys
  before they are split into heads (olmo2).
- :class:`GatedMLP`: ``down(act(gate(x)) * up(x))``, with ``gate`` and ``up`` one fused
  ``gate_up`` Linear (gate rows first) when ``fused`` (phi3).
- :class:`PreNormLayer`: ``x + attention(norm(x))`` then ``x + mlp(norm(x))``; the norm's class, norms
  after the attention and the MLP (gemma3's sandwich) and the rotary table it reads are options.
- :class:`DecoderWidths`: the sizes every one of these configs gives, read once.
- :class:`RotaryDecoderLM`: embedding (times ``embed_scale`` when set), the layers, a final norm and
  the LM head, logits divided by ``logit_scale`` when set, then soft-capped as ``cap * tanh(logits / cap)``
  when ``logit_softcap`` is set. Each
  layer names the rotary table it uses (``rope_kind``), so layers of two kinds (gemma3's local and
  global attention) each read their own frequencies. With bfloat16 or float16 weights the residual
  stream between the layers is summed in float32 (:func:`residual_dtype`): each projection still reads
  its input rounded to the weights' dtype and the logits come back in it, but a hook on a layer sees
  float32 hidden states. With no hook on an inner module, a call whose layers are exactly these blocks
  runs as the decoder's serving plan (:data:`BLOCKS`, :mod:`packrt.models.decoder_plan`).
- :func:`decoder_family`: the :class:`~packrt.models.keymap.Family` a decoder class is served as.

Every block is declared from the public ``nn`` API and takes no residency: ``from_pretrained``
applies the one asked for when it binds the weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import ClassVar

import numpy as np

import packrt
from packrt import nn
from packrt.models.attention import KVCache, Step, attend
from packrt.models.classifier import DecoderClassifier, is_classifier, num_labels
from packrt.models.config_schema import completed
from packrt.models.decoder_plan import DecoderBlocks, DecoderLayerPlan
from packrt.models.generation import CausalLM
from packrt.models.hfconfig import HFConfig
from packrt.models.keymap import Family, KeyMap, Rule
from packrt.models.rotary import RotaryTables, rotate_heads, tables_of
from packrt_core.nn.plan import serve

Rotary = tuple[packrt.Tensor, packrt.Tensor]


@dataclass(frozen=True)
class DecoderWidths:
    """The sizes of a rotary decoder's config.json (checked by its schema before this is read)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    intermediate: int
    eps: float

    @classmethod
    def read(cls, config: HFConfig) -> DecoderWidths:
        """The sizes of a config its schema completed (:func:`~packrt.models.config_schema.completed`: the family's
        defaults filled in); a ``head_dim`` or ``num_key_value_heads`` still null means ``hidden_size //
        num_attention_heads`` and one key/value head per head."""
        hidden, heads = config.integer("hidden_size"), config.integer("num_attention_heads")
        return cls(
            hidden=hidden,
            heads=heads,
            kv_heads=config.optional_int("num_key_value_heads") or heads,
            head_dim=config.optional_int("head_dim") or hidden // heads,
            layers=config.integer("num_hidden_layers"),
            intermediate=config.integer("intermediate_size"),
            eps=config.number("rms_norm_eps"),
        )


def layer_windows(config: HFConfig, layers: int, window: int | None) -> tuple[int | None, ...]:
    """Each layer's sliding window: ``window`` on the layers ``layer_types`` marks ``sliding_attention``.

    Without ``layer_types`` the qwen rule applies: the layers from ``max_window_layers`` on slide
    when ``use_sliding_window`` is true and a window is set (what transformers' Qwen2/Qwen3 configs
    derive ``layer_types`` from).
    """
    types = config.get("layer_types")
    if types is None:
        limit = config.integer("max_window_layers")
        sliding = config.flag("use_sliding_window") and window is not None
        types = ["sliding_attention" if sliding and i >= limit else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers:
        raise config.error("layer_types", f"is {types!r}, expected one entry per layer ({layers})")
    return tuple(window if kind == "sliding_attention" else None for kind in types)


class RotaryAttention(nn.Module):
    """Rotary grouped-query attention of layer ``index``, sized by ``widths`` (see the module docstring for
    the options)."""

    def __init__(
        self,
        widths: DecoderWidths,
        index: int,
        *,
        head_norm: Callable[[int], nn.Module] | None = None,
        fused: bool = False,
        bias: bool = False,
        o_bias: bool | None = None,
        scale: float | None = None,
        window: int | None = None,
        rotates: bool = True,
        softcap: float | None = None,
        full_norms: bool = False,
    ) -> None:
        super().__init__()
        hidden, head_dim = widths.hidden, widths.head_dim
        self.index, self.heads, self.kv_heads, self.head_dim = index, widths.heads, widths.kv_heads, head_dim
        self.window, self.scale, self.fused, self.rotates, self.softcap = window, scale, fused, rotates, softcap
        q_width, kv_width = widths.heads * head_dim, widths.kv_heads * head_dim
        if fused:
            self.qkv_proj = nn.Linear(hidden, q_width + 2 * kv_width, bias=bias)
        else:
            self.q_proj = nn.Linear(hidden, q_width, bias=bias)
            self.k_proj = nn.Linear(hidden, kv_width, bias=bias)
            self.v_proj = nn.Linear(hidden, kv_width, bias=bias)
        self.o_proj = nn.Linear(q_width, hidden, bias=bias if o_bias is None else o_bias)
        self.normed, self.full_norms = head_norm is not None, full_norms and head_norm is not None
        if head_norm is not None:  # over each head, or (full_norms) over all the queries' and the keys' widths
            self.q_norm = head_norm(q_width if full_norms else head_dim)
            self.k_norm = head_norm(kv_width if full_norms else head_dim)

    def _project(self, x: packrt.Tensor) -> tuple[packrt.Tensor, packrt.Tensor, packrt.Tensor]:
        """Queries, keys and values as (batch, seq, heads, head_dim)."""
        batch, seq, _ = x.shape
        if self.fused:
            qkv = self.qkv_proj(x)
            q_end = self.heads * self.head_dim
            k_end = q_end + self.kv_heads * self.head_dim
            q, k, v = qkv[..., :q_end], qkv[..., q_end:k_end], qkv[..., k_end:]
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.full_norms:
            q, k = self.q_norm(q), self.k_norm(k)
        return (
            q.reshape(batch, seq, self.heads, self.head_dim),
            k.reshape(batch, seq, self.kv_heads, self.head_dim),
            v.reshape(batch, seq, self.kv_heads, self.head_dim),
        )

    def forward(self, x: packrt.Tensor, rotary: Rotary, step: Step, cache: KVCache | None) -> packrt.Tensor:
        batch, seq, _ = x.shape
        q, k, v = self._project(x)
        if self.normed and not self.full_norms:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.rotates:
            cos, sin = rotary
            q, k = rotate_heads(q, cos, sin), rotate_heads(k, cos, sin)
        out = self._attend(q, k, v, step, cache)
        merged: packrt.Tensor = self.o_proj(out.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim))
        return merged

    def _attend(
        self, q: packrt.Tensor, k: packrt.Tensor, v: packrt.Tensor, step: Step, cache: KVCache | None
    ) -> packrt.Tensor:
        """The attention of the rotated heads (batch, heads, seq, head_dim); a subclass adds its own terms
        (gpt-oss's sinks: :class:`~packrt.models.gpt_oss.SinkAttention`)."""
        return attend(
            q,
            k,
            v,
            step=step,
            cache=cache,
            layer=self.index,
            window=self.window,
            scale=self.scale,
            softcap=self.softcap,
        )


class GatedMLP(nn.Module):
    """``down(act(gate(x)) * up(x))``; one ``gate_up`` Linear (gate rows first) when ``fused``."""

    def __init__(self, hidden: int, intermediate: int, act: nn.Module, *, bias: bool = False, fused: bool = False):
        super().__init__()
        self.intermediate, self.fused = intermediate, fused
        if fused:
            self.gate_up = nn.Linear(hidden, 2 * intermediate, bias=bias)
        else:
            self.gate = nn.Linear(hidden, intermediate, bias=bias)
            self.up = nn.Linear(hidden, intermediate, bias=bias)
        self.down = nn.Linear(intermediate, hidden, bias=bias)
        self.act = act

    def forward(self, x: packrt.Tensor) -> packrt.Tensor:
        if self.fused:
            both = self.gate_up(x)
            gate, up = both[..., : self.intermediate], both[..., self.intermediate :]
        else:
            gate, up = self.gate(x), self.up(x)
        out: packrt.Tensor = self.down(self.act(gate) * up)
        return out


class FloatRMSNorm(nn.Module):
    """RMSNorm over the last dim, ``x / sqrt(mean(x**2) + eps) * weight``, computed in float32 whatever the
    input's dtype and rounded once to the weight's: it reads a decoder's float32 residual stream as it is and
    gives the projections after it their weights' dtype (``nn.RMSNorm`` takes only its weight's dtype)."""

    computes_in_float32: ClassVar[bool] = True

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(packrt.ones(dim))

    def forward(self, x: packrt.Tensor) -> packrt.Tensor:
        weight = self.weight
        if x.dtype is weight.dtype and residual_dtype(weight.dtype) is weight.dtype:  # float32, float64
            same: packrt.Tensor = nn.functional.rms_norm(x, (self.dim,), weight, self.eps)
            return same
        f32 = packrt.float32
        return nn.functional.rms_norm(x.to(f32), (self.dim,), weight.to(f32), self.eps).to(weight.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class OffsetRMSNorm(nn.Module):
    """Gemma's RMSNorm over the last dim: ``x / sqrt(mean(x**2) + eps) * (1 + weight)``.

    Computed in float32 whatever the input's dtype and rounded once to it, as transformers does; the
    stored ``weight`` is the checkpoint's (zeros: the identity).
    """

    computes_in_float32: ClassVar[bool] = True  # reads any float dtype: a float32 residual stream as it is
    weight_offset: ClassVar[float] = 1.0  # what multiplies is 1 + weight (the fused form folds it in)

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(packrt.zeros(dim))

    def forward(self, x: packrt.Tensor) -> packrt.Tensor:
        wide = x if x.dtype is packrt.float32 else x.to(packrt.float32)
        weight = self.weight if self.weight.dtype is packrt.float32 else self.weight.to(packrt.float32)
        out = nn.functional.rms_norm(wide, (self.dim,), None, self.eps) * (weight + 1.0)
        return out if x.dtype is packrt.float32 else out.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


def residual_dtype(dtype: packrt.dtype) -> packrt.dtype:
    """The dtype a decoder's residual stream is summed in: float32 for half-precision weights, whose every
    sum rounded to half would add an error transformers' own half run has (bf16 logits then measured 0.8-0.9x
    its distance from float32), else the weights' own."""
    return packrt.float32 if dtype in (packrt.bfloat16, packrt.float16) else dtype


class PreNormLayer(nn.Module):
    """``x + attention(attention_norm(x))``, then ``x + mlp(mlp_norm(x))``.

    Options: ``norm`` makes each norm (``norm(hidden, eps)``; default :class:`FloatRMSNorm`); ``post_norms``
    adds a norm after the attention and after the MLP, each applied to the block's output before it joins the
    residual stream (``post_attention_norm``, ``post_mlp_norm``: gemma3's sandwich); ``pre_norms=False`` drops
    the norms before them (olmo2: post-norms only); ``rope_kind`` names the
    rotary table the layer's attention reads (:class:`RotaryDecoderLM`'s ``rotaries``); ``residual_scale``
    multiplies what the attention and the MLP add to the stream (granite's ``residual_multiplier``).
    """

    def __init__(
        self,
        attention: RotaryAttention,
        mlp: nn.Module,  # a GatedMLP, or any module of (..., hidden) -> (..., hidden): a SparseMoE
        hidden: int,
        eps: float,
        *,
        norm: Callable[[int, float], nn.Module] = FloatRMSNorm,
        post_norms: bool = False,
        rope_kind: str = "default",
        residual_scale: float | None = None,
        pre_norms: bool = True,
    ) -> None:
        super().__init__()
        if not (pre_norms or post_norms):
            raise ValueError("PreNormLayer: a layer needs its norms before the branches, after them, or both")
        self.rope_kind, self.post_norms, self.residual_scale = rope_kind, post_norms, residual_scale
        self.pre_norms = pre_norms
        # registered in the order a checkpoint lists them (state_dict order)
        if pre_norms:
            self.attention_norm = norm(hidden, eps)
        self.attention = attention
        if post_norms:
            self.post_attention_norm = norm(hidden, eps)
        if pre_norms:
            self.mlp_norm = norm(hidden, eps)
        self.mlp = mlp
        if post_norms:
            self.post_mlp_norm = norm(hidden, eps)

    serves_plans: ClassVar[bool] = True  # its fused form: packrt.models.decoder_plan

    def forward(self, x: packrt.Tensor, rotary: Rotary, step: Step, cache: KVCache | None) -> packrt.Tensor:
        weight = (self.attention_norm if self.pre_norms else self.post_attention_norm).weight
        fused = serve(self, weight.device, _fused_layer)
        if fused is not None:
            planned: packrt.Tensor | None = fused.run(x, rotary, step, cache)
            if planned is not None:
                return planned
        # x may be the wider residual stream (RotaryDecoderLM): the projections read the weights' dtype, and
        # what joins the stream is widened back to it
        half = weight.dtype
        first = self.attention_norm(x) if self.pre_norms else x
        attended = self.attention(first.to(half), rotary, step, cache).to(x.dtype)
        x = x + self._joining(self.post_attention_norm(attended) if self.post_norms else attended)
        second = self.mlp_norm(x) if self.pre_norms else x
        mixed = self.mlp(second.to(half)).to(x.dtype)
        out: packrt.Tensor = x + self._joining(self.post_mlp_norm(mixed) if self.post_norms else mixed)
        return out

    def _joining(self, branch: packrt.Tensor) -> packrt.Tensor:
        """What of ``branch`` joins the residual stream: itself, or scaled by ``residual_scale`` (granite)."""
        return branch if self.residual_scale is None else branch * self.residual_scale


class RotaryDecoderLM(CausalLM):
    """A rotary decoder LM over ``embed``, ``layers``, ``norm`` and ``lm_head`` (see the module docstring):
    ``model(input_ids)`` gives logits (batch, seq, vocab); see :class:`CausalLM` for ``attention_mask`` and
    ``generate``.

    Built by :func:`packrt.models.from_pretrained` from a config.json its schema has checked: this
    constructor reads the vocabulary, the pad id and whether the head is tied (then it is the embedding's
    Parameter itself); a family's constructor completes the config with its schema's defaults
    (:func:`~packrt.models.config_schema.completed`), passes it here, then builds
    its layers and calls :meth:`_declare` with them.
    """

    model_type = ""
    embed_scale: float | None = None
    logit_softcap: float | None = None
    logit_scale: float | None = None  # the logits divided by it (granite's logits_scaling)

    def __init__(self, config: HFConfig) -> None:
        super().__init__()
        self.vocab, self.tied = config.integer("vocab_size"), config.flag("tie_word_embeddings") or headless(config)
        self.position_limit = config.optional_int("max_position_embeddings")
        self.pad_token_id = (config.token_ids("pad_token_id") or (None,))[0]

    def _declare(
        self,
        config: HFConfig,
        widths: DecoderWidths,
        layers: list[nn.Module],
        *,
        norm: nn.Module | None = None,
        rotaries: Mapping[str, RotaryTables] | None = None,
    ) -> None:
        """The embedding, ``layers``, the final ``norm`` (default: a :class:`FloatRMSNorm`) and the head;
        ``rotaries``: the frequencies per ``rope_kind`` (default: one ``"default"`` table from the config's rope
        settings)."""
        hidden = widths.hidden
        self.num_layers, self.hidden = len(layers), hidden
        if rotaries is None:
            rotaries = {"default": tables_of(config, widths.head_dim)}
        self.rotaries = dict(rotaries)
        # declared in the order state_dict lists them; a tied head is the embedding's Parameter itself
        self.embed = nn.Embedding(self.vocab, hidden)
        self.layers = nn.ModuleList(layers)
        self.norm = FloatRMSNorm(hidden, widths.eps) if norm is None else norm
        self.lm_head = nn.Linear(hidden, self.vocab, bias=False)
        if self.tied:
            self.lm_head.weight = self.embed.weight

    def _hidden(
        self, input_ids: packrt.Tensor, step: Step, cache: KVCache | None, positions: packrt.Tensor | None
    ) -> packrt.Tensor:
        embedded = self.embed(input_ids)
        half = embedded.dtype
        x = embedded.to(residual_dtype(half))
        if self.embed_scale is not None:
            # the scale is rounded to the embedding's dtype first, as transformers rounds it
            x = x * float(np.asarray(self.embed_scale, dtype=np.float32).astype(half.numpy))
        tables = {kind: rotary(step.offset, step.length, positions, embedded) for kind, rotary in self.rotaries.items()}
        for layer in self.layers:
            x = layer(x, tables[getattr(layer, "rope_kind", "default")], step, cache)
        # a norm that computes in float32 whatever it reads (gemma3's) takes the stream as it is
        wide = getattr(self.norm, "computes_in_float32", False) or x.dtype is half
        out: packrt.Tensor = self.norm(x if wide else x.to(half)).to(half)
        return out

    def _rope_switch(self) -> int | None:
        switches = [table.switch for table in self.rotaries.values() if table.switch is not None]
        return min(switches, default=None)

    def _logits(self, hidden: packrt.Tensor) -> packrt.Tensor:
        logits: packrt.Tensor = self.lm_head(hidden)
        if self.logit_scale is not None:
            logits = logits / self.logit_scale
        if self.logit_softcap is not None:
            logits = (logits / self.logit_softcap).tanh() * self.logit_softcap
        return logits

    def extra_repr(self) -> str:
        return (
            f"{self.model_type}: vocab={self.vocab}, hidden={self.hidden}, layers={self.num_layers}, tied={self.tied}"
        )


# What the decoder's serving plan reproduces; a family whose layers are other classes keeps the module road.
BLOCKS = DecoderBlocks(
    layer=PreNormLayer, attention=RotaryAttention, mlp=GatedMLP, norm=(FloatRMSNorm, OffsetRMSNorm), rotary=True
)
_fused_layer = partial(DecoderLayerPlan, blocks=BLOCKS)

# Per-layer checkpoint rows the families share (transformers' name after ``model.layers.{i}.``, packrt's after
# ``layers.{i}.``): a PreNormLayer's two norms, the four attention projections (weight and bias), the per-head
# q/k norms, the gated MLP.
PRE_NORM_ROWS: tuple[tuple[str, str], ...] = (
    ("input_layernorm.weight", "attention_norm.weight"),
    ("post_attention_layernorm.weight", "mlp_norm.weight"),
)
ATTENTION_ROWS: tuple[tuple[str, str], ...] = tuple(
    (f"self_attn.{p}.{kind}", f"attention.{p}.{kind}")
    for p in ("q_proj", "k_proj", "v_proj", "o_proj")
    for kind in ("weight", "bias")
)
HEAD_NORM_ROWS: tuple[tuple[str, str], ...] = (
    ("self_attn.q_norm.weight", "attention.q_norm.weight"),
    ("self_attn.k_norm.weight", "attention.k_norm.weight"),
)
GATED_MLP_ROWS: tuple[tuple[str, str], ...] = (
    ("mlp.gate_proj.weight", "mlp.gate.weight"),
    ("mlp.up_proj.weight", "mlp.up.weight"),
    ("mlp.down_proj.weight", "mlp.down.weight"),
)


def headless(config: HFConfig) -> bool:
    """Whether config.json names the family's base model (``Qwen3Model``, ``LlamaModel``: what
    sentence-transformers saves under a decoder embedding model), which has no LM head. packrt then ties the
    head to the embedding so the same class serves it; only its hidden states mean anything."""
    names = config.get("architectures") or []
    return isinstance(names, list) and any(base_architecture(str(name)) for name in names)


def base_architecture(name: str) -> bool:
    """Whether ``name`` is a transformers base-model class (``Qwen3Model``, ``Gemma3TextModel``), not a model
    with a head (``Qwen3ForCausalLM``, ``GPT2LMHeadModel``)."""
    return name.endswith("Model") and "For" not in name and "Head" not in name


def decoder_keymap(config: HFConfig, layer_rows: Iterable[tuple[str, str]]) -> KeyMap:
    """A rotary decoder's key map: its per-layer rows (transformers' name after ``layers.{i}.``, packrt's)
    plus what every such checkpoint holds (``model.embed_tokens``, ``model.norm``, ``lm_head``).

    A tied head stored twice is left unused (the embedding is the one used); rotary ``inv_freq``
    buffers some checkpoints carry are ignored.
    """
    # the schema says whether a head is tied by default; a base model's file has no head to load
    tied = completed(config).flag("tie_word_embeddings") or headless(config)
    rules = [Rule("embed_tokens.weight", "embed.weight"), Rule("norm.weight", "norm.weight")]
    if not tied:
        rules.append(Rule("lm_head.weight", "lm_head.weight", prefixed=False))
    rules += [Rule(f"layers.{{i}}.{theirs}", f"layers.{{i}}.{ours}") for theirs, ours in layer_rows]
    ignored = {"rotary_emb.inv_freq", "layers.{i}.self_attn.rotary_emb.inv_freq"}
    if tied:
        ignored.add("lm_head.weight")
    return KeyMap(tuple(rules), frozenset(ignored), prefixes=("model.",))


def decoder_family(
    name: str, model: type[RotaryDecoderLM], layer_rows: Iterable[tuple[str, str]], *, classifier: bool = False
) -> Family:
    """The :class:`Family` of a rotary decoder class: it answers to the class's ``model_type`` and is named
    by the class's name as an architecture; its checkpoints load through :func:`decoder_keymap` with
    ``layer_rows``. With ``classifier`` it also builds the ``...ForSequenceClassification`` architecture (a
    reranker over the decoder) as a :class:`~packrt.models.classifier.DecoderClassifier`."""
    rows = tuple(layer_rows)
    architectures: tuple[str, ...] = (model.__name__,)
    if classifier:
        architectures += (model.__name__.removesuffix("ForCausalLM") + "ForSequenceClassification",)
    return Family(
        name=name,
        model_types=(model.model_type,),
        architectures=architectures,
        build=partial(_build_decoder, model),
        keymap=partial(_decoder_or_classifier_keymap, layer_rows=rows),
    )


def _build_decoder(model: type[RotaryDecoderLM], config: HFConfig) -> nn.Module:
    if not is_classifier(config):
        return model(config)
    decoder = model(config.with_values({"tie_word_embeddings": True}))  # its head is never read: no lm_head to load
    pad = (config.token_ids("pad_token_id") or (None,))[0]
    return DecoderClassifier(decoder, decoder.hidden, num_labels(config), pad)


def _decoder_or_classifier_keymap(config: HFConfig, layer_rows: tuple[tuple[str, str], ...]) -> KeyMap:
    if not is_classifier(config):
        return decoder_keymap(config, layer_rows)
    table = decoder_keymap(config.with_values({"tie_word_embeddings": True}), layer_rows)
    rules = tuple(replace(rule, model=f"decoder.{rule.model}") for rule in table.rules)
    return KeyMap((*rules, Rule("score.weight", "score.weight", prefixed=False)), table.ignored, table.prefixes)


__all__ = [
    "ATTENTION_ROWS",
    "GATED_MLP_ROWS",
    "HEAD_NORM_ROWS",
    "PRE_NORM_ROWS",
    "DecoderWidths",
    "FloatRMSNorm",
    "GatedMLP",
    "OffsetRMSNorm",
    "PreNormLayer",
    "RotaryAttention",
    "RotaryDecoderLM",
    "decoder_family",
    "base_architecture",
    "decoder_keymap",
    "headless",
    "layer_windows",
    "residual_dtype",
]
