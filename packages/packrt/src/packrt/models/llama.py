"""The ``llama`` family, which also serves ``qwen2`` and ``mistral``: one decoder, three configs.

Each layer is pre-norm: ``x = x + attention(rms_norm(x)); x = x + mlp(rms_norm(x))`` with
``mlp(x) = down(silu(gate(x)) * up(x))`` (SwiGLU). Attention is grouped-query (``num_key_value_heads``
key/value heads shared by ``num_attention_heads`` query heads), with rotary positions (rotate-half
layout, ``rope_theta``, and the ``linear`` and ``llama3`` frequency scalings). What differs between
the three model types is read from config.json:

- qkv bias: ``attention_bias`` (llama: on q, k, v and o) or always on q, k, v (qwen2);
- sliding window: ``sliding_window`` on every layer (mistral), or on the layers ``layer_types``
  marks ``sliding_attention`` (qwen2 with ``use_sliding_window``); a query then sees the last
  ``sliding_window`` positions only, itself included;
- the head: tied to the embedding when ``tie_word_embeddings`` is true.

Parameter names (``L`` the layer): ``embed.weight``; ``layers.L.attention_norm.weight``;
``layers.L.attention.{q,k,v,o}_proj.{weight,bias}``; ``layers.L.mlp_norm.weight``;
``layers.L.mlp.{gate,up,down}.{weight,bias}``; ``norm.weight``; ``lm_head.weight``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

import packrt
from packrt import nn
from packrt.models.attention import KVCache, Step, attend
from packrt.models.decoder_plan import DecoderPlan
from packrt.models.generation import CausalLM
from packrt.models.hfconfig import HFConfig
from packrt.models.keymap import Family, KeyMap, Rule
from packrt.models.rotary import RotaryTables
from packrt_base.plan import PlanKernels

_functional = nn.functional

ROPE_TYPES = ("default", "linear", "llama3")


def rope_frequencies(config: HFConfig, head_dim: int) -> np.ndarray:
    """The rotary inverse frequencies (head_dim // 2,) float32, as transformers computes them.

    ``rope_parameters`` (transformers 5) or ``rope_scaling`` plus ``rope_theta`` (older files) give
    the type: ``default`` (``theta ** (-2i / head_dim)``), ``linear`` (divided by ``factor``) or
    ``llama3`` (long wavelengths divided by ``factor``, short ones kept, the band between blended).
    """
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    theta = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise config.error(
            "rope_parameters.rope_type",
            f"is {kind!r}, which packrt does not implement (supported: {', '.join(ROPE_TYPES)})",
        )
    exponents = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / (np.float32(theta) ** exponents)).astype(np.float32)
    if kind == "linear":
        return (inv_freq / np.float32(params["factor"])).astype(np.float32)
    if kind == "llama3":
        factor = float(params["factor"])
        low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
        context = float(params.get("original_max_position_embeddings", config.get("max_position_embeddings", 8192)))
        wavelength = np.float32(2 * math.pi) / inv_freq
        scaled = np.where(wavelength > context / low, inv_freq / np.float32(factor), inv_freq).astype(np.float32)
        smooth = ((np.float32(context) / wavelength - np.float32(low)) / np.float32(high - low)).astype(np.float32)
        blended = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
        middle = ~(wavelength < context / high) & ~(wavelength > context / low)
        return np.where(middle, blended, scaled).astype(np.float32)
    return inv_freq


def layer_windows(config: HFConfig, layers: int, window: int | None) -> tuple[int | None, ...]:
    """Each layer's sliding window: ``window`` on the layers ``layer_types`` marks ``sliding_attention``.

    Without ``layer_types`` the qwen rule applies: the layers from ``max_window_layers`` on slide
    when ``use_sliding_window`` is true and a window is set (what transformers' Qwen2/Qwen3 configs
    derive ``layer_types`` from).
    """
    types = config.get("layer_types")
    if types is None:
        limit = config.integer("max_window_layers", 28)
        sliding = config.flag("use_sliding_window", False) and window is not None
        types = ["sliding_attention" if sliding and i >= limit else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers:
        raise config.error("layer_types", f"is {types!r}, expected one entry per layer ({layers})")
    return tuple(window if kind == "sliding_attention" else None for kind in types)


@dataclass(frozen=True)
class LlamaGeometry:
    """What config.json says about a llama / qwen2 / mistral model, checked."""

    model_type: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    tied: bool
    windows: tuple[int | None, ...]
    pad_token_id: int | None

    @classmethod
    def from_config(cls, config: HFConfig) -> LlamaGeometry:
        model_type = config.text("model_type")
        hidden, heads = config.integer("hidden_size"), config.integer("num_attention_heads")
        layers = config.integer("num_hidden_layers")
        kv_heads = config.integer("num_key_value_heads", heads)
        head_dim = config.optional_int("head_dim") or hidden // heads
        if heads % kv_heads:
            raise config.error("num_key_value_heads", f"is {kv_heads}, which does not divide {heads} attention heads")
        config.choice("hidden_act", ("silu",), "silu")
        bias = config.flag("attention_bias", False)
        window = config.optional_int("sliding_window")
        if model_type == "qwen2":
            windows = layer_windows(config, layers, window)
        else:
            windows = (window if model_type == "mistral" else None,) * layers
        return cls(
            model_type=model_type,
            vocab=config.integer("vocab_size"),
            hidden=hidden,
            layers=layers,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate=config.integer("intermediate_size"),
            eps=config.number("rms_norm_eps", 1e-6),
            qkv_bias=bias or model_type == "qwen2",
            o_bias=bias and model_type == "llama",
            mlp_bias=config.flag("mlp_bias", False),
            tied=config.flag("tie_word_embeddings", False),
            windows=windows,
            pad_token_id=(config.token_ids("pad_token_id") or (None,))[0],
        )


class GroupedQueryAttention(nn.Module):
    """Rotary grouped-query attention over a key/value cache (see :func:`packrt.models.attention.attend`)."""

    def __init__(self, g: LlamaGeometry, index: int) -> None:
        super().__init__()
        self.index, self.heads, self.kv_heads, self.head_dim = index, g.heads, g.kv_heads, g.head_dim
        self.window = g.windows[index]
        self.q_proj = nn.Linear(g.hidden, g.heads * g.head_dim, bias=g.qkv_bias)
        self.k_proj = nn.Linear(g.hidden, g.kv_heads * g.head_dim, bias=g.qkv_bias)
        self.v_proj = nn.Linear(g.hidden, g.kv_heads * g.head_dim, bias=g.qkv_bias)
        self.o_proj = nn.Linear(g.heads * g.head_dim, g.hidden, bias=g.o_bias)

    def forward(
        self,
        x: packrt.Tensor,
        rotary: tuple[packrt.Tensor, packrt.Tensor],
        step: Step,
        cache: KVCache | None,
    ) -> packrt.Tensor:
        batch, seq, _ = x.shape
        q = self.q_proj(x).reshape(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).reshape(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).reshape(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rotary
        q, k = _functional.rotary_embedding(q, cos, sin), _functional.rotary_embedding(k, cos, sin)
        out = attend(q, k, v, step=step, cache=cache, layer=self.index, window=self.window)
        merged: packrt.Tensor = self.o_proj(out.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim))
        return merged


class SwiGLU(nn.Module):
    """``down(silu(gate(x)) * up(x))``."""

    def __init__(self, g: LlamaGeometry) -> None:
        super().__init__()
        b = g.mlp_bias
        self.gate = nn.Linear(g.hidden, g.intermediate, bias=b)
        self.up = nn.Linear(g.hidden, g.intermediate, bias=b)
        self.down = nn.Linear(g.intermediate, g.hidden, bias=b)
        self.act = nn.SiLU()

    def forward(self, x: packrt.Tensor) -> packrt.Tensor:
        out: packrt.Tensor = self.down(self.act(self.gate(x)) * self.up(x))
        return out


class LlamaLayer(nn.Module):
    """One pre-norm decoder layer."""

    def __init__(self, g: LlamaGeometry, index: int) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(g.hidden, eps=g.eps)
        self.attention = GroupedQueryAttention(g, index)
        self.mlp_norm = nn.RMSNorm(g.hidden, eps=g.eps)
        self.mlp = SwiGLU(g)

    def forward(
        self, x: packrt.Tensor, rotary: tuple[packrt.Tensor, packrt.Tensor], step: Step, cache: KVCache | None
    ) -> packrt.Tensor:
        x = x + self.attention(self.attention_norm(x), rotary, step, cache)
        out: packrt.Tensor = x + self.mlp(self.mlp_norm(x))
        return out


def declare_decoder_stack(
    model: nn.Module, vocab: int, hidden: int, layers: list[nn.Module], norm: nn.Module, tied: bool
) -> None:
    """``model.embed``, ``.layers``, ``.norm`` and ``.lm_head`` (bias-free) of a decoder LM, declared in
    that order (the order its state_dict lists them); a ``tied`` head is the embedding's Parameter itself."""
    model.embed = nn.Embedding(vocab, hidden)
    model.layers = nn.ModuleList(layers)
    model.norm = norm
    model.lm_head = nn.Linear(hidden, vocab, bias=False)
    if tied:
        model.lm_head.weight = model.embed.weight


class LlamaForCausalLM(CausalLM):
    """A llama / qwen2 / mistral causal LM: ``model(input_ids)`` gives logits (batch, seq, vocab).

    Built by :func:`packrt.models.from_pretrained` from config.json; see :class:`CausalLM` for
    ``attention_mask`` and ``generate``.
    """

    serves_plans = True

    def __init__(self, config: HFConfig) -> None:
        super().__init__()
        g = LlamaGeometry.from_config(config)
        self.geometry = g
        self.num_layers = g.layers
        self.vocab = g.vocab
        self.pad_token_id = g.pad_token_id
        self.model_type = g.model_type
        self.rotary = RotaryTables(rope_frequencies(config, g.head_dim))
        layers: list[nn.Module] = [LlamaLayer(g, i) for i in range(g.layers)]
        declare_decoder_stack(self, g.vocab, g.hidden, layers, nn.RMSNorm(g.hidden, eps=g.eps), g.tied)

    def _hidden(
        self, input_ids: packrt.Tensor, step: Step, cache: KVCache | None, positions: packrt.Tensor | None
    ) -> packrt.Tensor:
        x = self.embed(input_ids)
        rotary = self.rotary(step.offset, step.length, positions, x)
        for layer in self.layers:
            x = layer(x, rotary, step, cache)
        out: packrt.Tensor = self.norm(x)
        return out

    def _build_plan(self, model: Any, kernels: PlanKernels) -> DecoderPlan:
        return DecoderPlan(model, kernels, "llama")

    def _logits(self, hidden: packrt.Tensor) -> packrt.Tensor:
        out: packrt.Tensor = self.lm_head(hidden)
        return out

    def extra_repr(self) -> str:
        g = self.geometry
        return (
            f"{g.model_type}: vocab={g.vocab}, hidden={g.hidden}, layers={g.layers}, heads={g.heads}, "
            f"kv_heads={g.kv_heads}, tied={g.tied}"
        )


def llama_keymap(config: HFConfig) -> KeyMap:
    """The table from transformers' names (``model.layers.0.self_attn.q_proj.weight``) to packrt's."""
    rules = [
        Rule("embed_tokens.weight", "embed.weight"),
        Rule("norm.weight", "norm.weight"),
        Rule("lm_head.weight", "lm_head.weight", prefixed=False),
        Rule("layers.{i}.input_layernorm.weight", "layers.{i}.attention_norm.weight"),
        Rule("layers.{i}.post_attention_layernorm.weight", "layers.{i}.mlp_norm.weight"),
    ]
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        for kind in ("weight", "bias"):
            rules.append(Rule(f"layers.{{i}}.self_attn.{proj}.{kind}", f"layers.{{i}}.attention.{proj}.{kind}"))
    for theirs, ours in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
        for kind in ("weight", "bias"):
            rules.append(Rule(f"layers.{{i}}.mlp.{theirs}.{kind}", f"layers.{{i}}.mlp.{ours}.{kind}"))
    ignored = {"rotary_emb.inv_freq", "layers.{i}.self_attn.rotary_emb.inv_freq"}
    if config.flag("tie_word_embeddings", False):
        ignored.add("lm_head.weight")  # a tied head stored twice: the embedding is the one used
        rules = [rule for rule in rules if rule.checkpoint != "lm_head.weight"]
    return KeyMap(tuple(rules), frozenset(ignored), prefixes=("model.",))


def _build(config: HFConfig) -> nn.Module:
    return LlamaForCausalLM(config)


FAMILY = Family(
    name="llama",
    model_types=("llama", "qwen2", "mistral"),
    architectures=("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"),
    build=_build,
    keymap=llama_keymap,
)

__all__ = [
    "FAMILY",
    "GroupedQueryAttention",
    "LlamaForCausalLM",
    "LlamaGeometry",
    "LlamaLayer",
    "RotaryTables",
    "SwiGLU",
    "declare_decoder_stack",
    "layer_windows",
    "llama_keymap",
    "rope_frequencies",
]
