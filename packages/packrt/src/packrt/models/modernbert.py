"""The ``modernbert`` family: ModernBERT encoders (answerdotai/ModernBERT, gte-modernbert, the 2025-26 rerankers).

A bidirectional encoder built from the rotary decoder stack's blocks (:mod:`packrt.models.decoder_blocks`), each
as transformers computes it:

- the token embedding, then a LayerNorm (no position table: positions are rotary);
- pre-norm layers, ``x = x + attention(attention_norm(x)); x = x + mlp(mlp_norm(x))``, the first layer without
  an attention norm; LayerNorms without bias unless ``norm_bias``;
- attention from one fused ``Wqkv`` projection (queries, keys, values), every head rotated, no causal mask: a
  global layer (every ``global_attn_every_n_layers``-th, from the first, or as ``layer_types`` says) sees the
  whole sequence, a local one the keys at most ``local_attention // 2`` positions away on either side; each kind
  with its rotary frequencies (``global_rope_theta`` 160000, ``local_rope_theta`` 10000, or ``rope_parameters``
  per layer type);
- a gated MLP, ``Wo(act(a) * b)`` with ``a, b`` the halves of ``Wi(x)`` (GELU by default);
- a final LayerNorm: its output is the last hidden state (batch, seq, hidden).

``ModernBertForSequenceClassification`` (the rerankers) pools the first token (``classifier_pooling: cls``) or
the mean of the real ones, then ``norm(act(dense(pooled)))`` and the ``classifier`` Linear:
:class:`ModernBertClassifier`.

Parameter names (``L`` the layer): ``embed.weight``, ``embed_norm.weight``;
``layers.L.attention_norm.weight`` (not layer 0); ``layers.L.attention.qkv_proj.weight``,
``layers.L.attention.o_proj.weight``; ``layers.L.mlp_norm.weight``; ``layers.L.mlp.gate_up.weight``,
``layers.L.mlp.down.weight``; ``final_norm.weight``; a classifier's ``encoder.``-prefixed ones and
``head.dense.weight``, ``head.norm.weight``, ``classifier.{weight,bias}``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import packrt
from packrt import nn
from packrt.models.attention import Step
from packrt.models.classifier import is_classifier, num_labels
from packrt.models.config_schema import check_rope_params, completed
from packrt.models.decoder_blocks import DecoderWidths, GatedMLP, RotaryAttention
from packrt.models.devices import host, placed
from packrt.models.hfconfig import HFConfig
from packrt.models.keymap import Family, KeyMap, Rule
from packrt.models.layers import check_attention_mask, check_ids
from packrt.models.rotary import RotaryTables, tables_of

KINDS = ("full_attention", "sliding_attention")
THETAS = {"full_attention": ("global_rope_theta", 160_000.0), "sliding_attention": ("local_rope_theta", 10_000.0)}


@dataclass(frozen=True)
class ModernBertConfig:
    """What the encoder's callers read: its width and the longest sequence its positions serve."""

    hidden: int
    max_positions: int


def layer_kinds(config: HFConfig, layers: int) -> list[str]:
    """``layer_types``, else global every ``global_attn_every_n_layers``-th layer from the first, local between."""
    types = config.get("layer_types")
    if types is None:
        every = config.integer("global_attn_every_n_layers")
        types = ["sliding_attention" if i % every else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or any(kind not in KINDS for kind in types):
        raise config.error("layer_types", f"is {types!r}, expected one of {KINDS} per layer ({layers})")
    return list(types)


def rope_by_kind(config: HFConfig) -> dict[str, dict[str, object]]:
    """Each attention kind's rope dict: ``rope_parameters[kind]``, else the default type at the kind's theta
    (``global_rope_theta`` / ``local_rope_theta``), each checked as a rope dict."""
    given = config.get("rope_parameters") or {}
    if not isinstance(given, dict):
        raise config.error("rope_parameters", f"is {given!r}, expected one rope dict per attention type")
    out: dict[str, dict[str, object]] = {}
    for kind, (theta_key, theta) in THETAS.items():
        params = dict(given.get(kind) or {"rope_type": "default"})
        params.setdefault("rope_theta", config.get(theta_key, theta))
        check_rope_params(config, f"rope_parameters.{kind}", params, "modernbert")
        out[kind] = params
    return out


class ModernBertLayer(nn.Module):
    """One pre-norm layer (see the module docstring): ``attention_norm`` is absent in the first layer."""

    def __init__(self, widths: DecoderWidths, index: int, config: HFConfig, kind: str, window: int | None) -> None:
        super().__init__()
        eps, bias = config.number("norm_eps"), config.flag("norm_bias")
        self.kind = kind
        self.attention_norm = nn.Identity() if index == 0 else nn.LayerNorm(widths.hidden, eps=eps, bias=bias)
        self.attention = RotaryAttention(widths, index, fused=True, bias=config.flag("attention_bias"), window=window)
        self.mlp_norm = nn.LayerNorm(widths.hidden, eps=eps, bias=bias)
        self.mlp = GatedMLP(widths.hidden, widths.intermediate, nn.GELU(), bias=config.flag("mlp_bias"), fused=True)

    def forward(self, x: packrt.Tensor, rotary: tuple[packrt.Tensor, packrt.Tensor], step: Step) -> packrt.Tensor:
        x = x + self.attention(self.attention_norm(x), rotary, step, None)
        out: packrt.Tensor = x + self.mlp(self.mlp_norm(x))
        return out


class ModernBertEncoder(nn.Module):
    """ModernBERT's encoder: ``forward(input_ids, attention_mask=None, token_type_ids=None)`` gives the last hidden
    state (batch, seq, hidden), as ``ModernBertModel(...).last_hidden_state``; no token attends to padding
    (``token_type_ids`` is taken and ignored: ModernBERT has none)."""

    def __init__(self, config: HFConfig) -> None:
        super().__init__()
        config = completed(config)
        hidden, heads = config.integer("hidden_size"), config.integer("num_attention_heads")
        eps, bias = config.number("norm_eps"), config.flag("norm_bias")
        widths = DecoderWidths(
            hidden, heads, heads, hidden // heads, config.integer("num_hidden_layers"),
            config.integer("intermediate_size"), eps,
        )  # fmt: skip
        self.config = ModernBertConfig(hidden, config.integer("max_position_embeddings"))
        kinds = layer_kinds(config, widths.layers)
        local = config.integer("local_attention") // 2 + 1  # the keys at most local_attention // 2 away
        self.embed = nn.Embedding(config.integer("vocab_size"), hidden)
        self.embed_norm = nn.LayerNorm(hidden, eps=eps, bias=bias)
        self.layers = nn.ModuleList(
            [
                ModernBertLayer(widths, i, config, kind, local if kind == "sliding_attention" else None)
                for i, kind in enumerate(kinds)
            ]
        )
        self.final_norm = nn.LayerNorm(hidden, eps=eps, bias=bias)
        ropes = rope_by_kind(config)
        limit = config.get("max_position_embeddings")
        self.rotaries: dict[str, RotaryTables] = {
            kind: tables_of(HFConfig({"rope_parameters": ropes[kind], "max_position_embeddings": limit}, config.path),
                            widths.head_dim)
            for kind in sorted(set(kinds))
        }  # fmt: skip

    def forward(
        self,
        input_ids: packrt.Tensor,
        attention_mask: packrt.Tensor | None = None,
        token_type_ids: packrt.Tensor | None = None,
    ) -> packrt.Tensor:
        batch, seq = check_ids("ModernBertEncoder", input_ids, self.config.max_positions)
        key_mask = None
        if attention_mask is not None:
            check_attention_mask("ModernBertEncoder", attention_mask, batch, seq)
            keep = np.asarray(host(attention_mask)) != 0
            key_mask = None if keep.all() else placed(keep, input_ids.device)
        x: packrt.Tensor = self.embed_norm(self.embed(input_ids))
        step = Step(0, seq, key_mask, input_ids.device, bidirectional=True)
        tables = {kind: rotary(0, seq, None, x) for kind, rotary in self.rotaries.items()}
        for layer in self.layers:
            x = layer(x, tables[layer.kind], step)
        out: packrt.Tensor = self.final_norm(x)
        return out


class ModernBertClassifier(nn.Module):
    """``ModernBertForSequenceClassification``: the encoder, the first token's (``cls``) or the real tokens' mean
    (``mean``) hidden state, ``norm(act(dense(.)))``, then ``classifier``: (batch, labels) logits."""

    def __init__(self, config: HFConfig) -> None:
        super().__init__()
        config = completed(config)
        self.encoder = ModernBertEncoder(config)
        hidden = self.encoder.config.hidden
        self.config, self.labels = self.encoder.config, num_labels(config)
        self.pooling = str(config.get("classifier_pooling"))
        self.dense = nn.Linear(hidden, hidden, bias=config.flag("classifier_bias"))
        self.act = nn.GELU()
        self.norm = nn.LayerNorm(hidden, eps=config.number("norm_eps"), bias=config.flag("norm_bias"))
        self.classifier = nn.Linear(hidden, self.labels)

    def forward(
        self,
        input_ids: packrt.Tensor,
        attention_mask: packrt.Tensor | None = None,
        token_type_ids: packrt.Tensor | None = None,
    ) -> packrt.Tensor:
        states = self.encoder(input_ids, attention_mask)
        if self.pooling == "cls":
            pooled = states[:, 0]
        else:
            keep = np.ones(states.shape[:2], np.float32) if attention_mask is None else host(attention_mask)
            weights = placed(np.asarray(keep, np.float32)[:, :, None], states.device).to(states.dtype)
            pooled = (states * weights).sum(1) / weights.sum(1)
        out: packrt.Tensor = self.classifier(self.norm(self.act(self.dense(pooled))))
        return out

    def extra_repr(self) -> str:
        return f"labels={self.labels}, pooling={self.pooling}"


_ROWS = (  # transformers' name after ``layers.{i}.`` -> packrt's
    ("attn_norm.weight", "attention_norm.weight"),
    ("attn_norm.bias", "attention_norm.bias"),
    ("attn.Wqkv.weight", "attention.qkv_proj.weight"),
    ("attn.Wqkv.bias", "attention.qkv_proj.bias"),
    ("attn.Wo.weight", "attention.o_proj.weight"),
    ("attn.Wo.bias", "attention.o_proj.bias"),
    ("mlp_norm.weight", "mlp_norm.weight"),
    ("mlp_norm.bias", "mlp_norm.bias"),
    ("mlp.Wi.weight", "mlp.gate_up.weight"),
    ("mlp.Wi.bias", "mlp.gate_up.bias"),
    ("mlp.Wo.weight", "mlp.down.weight"),
    ("mlp.Wo.bias", "mlp.down.bias"),
)


def modernbert_keymap(config: HFConfig) -> KeyMap:
    """transformers' names (``layers.0.attn.Wqkv.weight``, under ``model.`` in a classifier or masked-LM file)
    onto packrt's; a classifier's encoder under ``encoder.`` and its head."""
    prefix = "encoder." if is_classifier(config) else ""
    rules = [
        Rule("embeddings.tok_embeddings.weight", f"{prefix}embed.weight"),
        *(Rule(f"embeddings.norm.{kind}", f"{prefix}embed_norm.{kind}") for kind in ("weight", "bias")),
        *(Rule(f"final_norm.{kind}", f"{prefix}final_norm.{kind}") for kind in ("weight", "bias")),
        *(Rule(f"layers.{{i}}.{theirs}", f"{prefix}layers.{{i}}.{ours}") for theirs, ours in _ROWS),
    ]
    if is_classifier(config):
        rules += [
            Rule(f"{theirs}.{kind}", f"{ours}.{kind}", prefixed=False)
            for theirs, ours in (("head.dense", "dense"), ("head.norm", "norm"), ("classifier", "classifier"))
            for kind in ("weight", "bias")
        ]
    return KeyMap(tuple(rules), frozenset(), prefixes=("model.",))


def _build(config: HFConfig) -> nn.Module:
    return ModernBertClassifier(config) if is_classifier(config) else ModernBertEncoder(config)


FAMILY = Family(
    name="modernbert",
    model_types=("modernbert",),
    architectures=("ModernBertModel", "ModernBertForSequenceClassification"),
    build=_build,
    keymap=modernbert_keymap,
    kind="encoder",
)

__all__ = [
    "FAMILY",
    "ModernBertClassifier",
    "ModernBertConfig",
    "ModernBertEncoder",
    "ModernBertLayer",
    "layer_kinds",
    "modernbert_keymap",
    "rope_by_kind",
]
