"""The ``gpt2`` family: learned positions, pre-LN layers, fused qkv, the head tied to the embedding.

Each layer is ``x = x + attention(ln_1(x)); x = x + mlp(ln_2(x))`` with ``mlp(x) =
down(act(up(x)))`` (``activation_function``, ``gelu_new`` being GELU's tanh form). Queries, keys and
values come from one fused projection (``c_attn``) and are split after it. GPT-2 checkpoints store
their projections as Conv1D weights, (in, out): the key map transposes them on load, which is a
view of the mapped file, not a copy (``borrowed`` serves from it in place).

Parameter names (``L`` the layer): ``embed.weight``, ``positions.weight``,
``layers.L.attention_norm.{weight,bias}``, ``layers.L.attention.qkv.{weight,bias}``,
``layers.L.attention.out.{weight,bias}``, ``layers.L.mlp_norm.{weight,bias}``,
``layers.L.mlp.{up,down}.{weight,bias}``, ``norm.{weight,bias}``, and ``lm_head.weight`` only when
``tie_word_embeddings`` is false.
"""

from __future__ import annotations

import math
from functools import partial
from typing import ClassVar, cast

import packrt
from packrt import nn
from packrt.models.attention import KVCache, Step, attend
from packrt.models.config_schema import completed
from packrt.models.decoder_plan import DecoderBlocks, DecoderLayerPlan
from packrt.models.generation import CausalLM
from packrt.models.hfconfig import HFConfig
from packrt.models.keymap import Family, KeyMap, Rule
from packrt_core.nn.plan import serve

ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu", "relu", "silu")


def _activation(name: str) -> nn.Module:
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return nn.GELU(approximate="tanh")
    if name == "gelu":
        return nn.GELU()
    if name == "relu":
        return nn.ReLU()
    return nn.SiLU()


class GPT2Attention(nn.Module):
    """Causal multi-head attention from one fused qkv projection."""

    def __init__(self, config: HFConfig, index: int) -> None:
        super().__init__()
        hidden, heads = config.integer("n_embd"), config.integer("n_head")
        self.index, self.heads, self.head_dim, self.hidden = index, heads, hidden // heads, hidden
        scale = 1.0 / math.sqrt(self.head_dim) if config.flag("scale_attn_weights") else 1.0
        if config.flag("scale_attn_by_inverse_layer_idx"):
            scale /= index + 1
        self.scale = scale
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: packrt.Tensor, step: Step, cache: KVCache | None) -> packrt.Tensor:
        batch, seq, _ = x.shape
        fused = self.qkv(x).reshape(batch, seq, 3, self.heads, self.head_dim)
        q, k, v = (fused[:, :, i].transpose(1, 2) for i in range(3))
        out = attend(q, k, v, step=step, cache=cache, layer=self.index, scale=self.scale)
        merged: packrt.Tensor = self.out(out.transpose(1, 2).reshape(batch, seq, self.hidden))
        return merged


class GPT2MLP(nn.Module):
    """``down(act(up(x)))``."""

    def __init__(self, config: HFConfig) -> None:
        super().__init__()
        hidden = config.integer("n_embd")
        inner = config.optional_int("n_inner") or 4 * hidden
        self.up = nn.Linear(hidden, inner)
        self.act = _activation(config.choice("activation_function", ACTIVATIONS))
        self.down = nn.Linear(inner, hidden)

    def forward(self, x: packrt.Tensor) -> packrt.Tensor:
        out: packrt.Tensor = self.down(self.act(self.up(x)))
        return out


class GPT2Layer(nn.Module):
    """One pre-LN layer."""

    def __init__(self, config: HFConfig, index: int) -> None:
        super().__init__()
        hidden, eps = config.integer("n_embd"), config.number("layer_norm_epsilon")
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.attention = GPT2Attention(config, index)
        self.mlp_norm = nn.LayerNorm(hidden, eps=eps)
        self.mlp = GPT2MLP(config)

    serves_plans: ClassVar[bool] = True  # its fused form: packrt.models.decoder_plan

    def forward(self, x: packrt.Tensor, step: Step, cache: KVCache | None) -> packrt.Tensor:
        fused = serve(self, self.attention_norm.weight.device, _fused_layer)
        if fused is not None:
            planned: packrt.Tensor | None = fused.run(x, None, step, cache)
            if planned is not None:
                return planned
        x = x + self.attention(self.attention_norm(x), step, cache)
        out: packrt.Tensor = x + self.mlp(self.mlp_norm(x))
        return out


# What the layer's fused form reproduces (learned positions, no rotary tables)
BLOCKS = DecoderBlocks(layer=GPT2Layer, attention=GPT2Attention, mlp=GPT2MLP, norm=(nn.LayerNorm,), rotary=False)
_fused_layer = partial(DecoderLayerPlan, blocks=BLOCKS)


class GPT2LMHeadModel(CausalLM):
    """GPT-2: ``model(input_ids)`` gives logits (batch, seq, vocab), for up to ``n_positions`` tokens.

    Built by :func:`packrt.models.from_pretrained`; see :class:`CausalLM` for ``attention_mask``
    and ``generate``.
    """

    def __init__(self, config: HFConfig) -> None:
        super().__init__()
        config = completed(config)  # the schema's defaults, read here without restating them
        hidden, layers = config.integer("n_embd"), config.integer("n_layer")
        self.vocab = config.integer("vocab_size")
        self.num_layers = layers
        self.max_positions = config.integer("n_positions")
        self.pad_token_id = (config.token_ids("pad_token_id") or (None,))[0]
        self.tied = config.flag("tie_word_embeddings")
        self.embed = nn.Embedding(self.vocab, hidden)
        self.positions = nn.Embedding(self.max_positions, hidden)
        self.layers = nn.ModuleList([GPT2Layer(config, i) for i in range(layers)])
        self.norm = nn.LayerNorm(hidden, eps=config.number("layer_norm_epsilon"))
        self.lm_head = nn.Linear(hidden, self.vocab, bias=False)
        if self.tied:
            self.lm_head.weight = self.embed.weight

    def _hidden(
        self, input_ids: packrt.Tensor, step: Step, cache: KVCache | None, positions: packrt.Tensor | None
    ) -> packrt.Tensor:
        if positions is None:
            positions = packrt.arange(step.offset, step.offset + step.length, device=input_ids.device).unsqueeze(0)
        x = self.embed(input_ids) + self.positions(positions)
        for layer in self.layers:
            x = layer(x, step, cache)
        return cast(packrt.Tensor, self.norm(x))

    def _logits(self, hidden: packrt.Tensor) -> packrt.Tensor:
        return cast(packrt.Tensor, self.lm_head(hidden))

    def extra_repr(self) -> str:
        return f"vocab={self.vocab}, layers={self.num_layers}, positions={self.max_positions}, tied={self.tied}"


def gpt2_keymap(config: HFConfig) -> KeyMap:
    """The table from transformers' names (``transformer.h.0.attn.c_attn.weight``) to packrt's."""
    rules = [
        Rule("wte.weight", "embed.weight"),
        Rule("wpe.weight", "positions.weight"),
        Rule("ln_f.weight", "norm.weight"),
        Rule("ln_f.bias", "norm.bias"),
    ]
    layer = {
        "ln_1": "attention_norm",
        "ln_2": "mlp_norm",
        "attn.c_attn": "attention.qkv",
        "attn.c_proj": "attention.out",
        "mlp.c_fc": "mlp.up",
        "mlp.c_proj": "mlp.down",
    }
    for theirs, ours in layer.items():
        conv1d = not theirs.startswith("ln_")  # Conv1D stores (in, out): transposed on load
        rules.append(Rule(f"h.{{i}}.{theirs}.weight", f"layers.{{i}}.{ours}.weight", "transpose" if conv1d else "none"))
        rules.append(Rule(f"h.{{i}}.{theirs}.bias", f"layers.{{i}}.{ours}.bias"))
    ignored = {"h.{i}.attn.bias", "h.{i}.attn.masked_bias"}  # causal-mask buffers older files carry
    if completed(config).flag("tie_word_embeddings"):
        ignored.add("lm_head.weight")
    else:
        rules.append(Rule("lm_head.weight", "lm_head.weight", prefixed=False))
    return KeyMap(tuple(rules), frozenset(ignored), prefixes=("transformer.",))


def _build(config: HFConfig) -> nn.Module:
    return GPT2LMHeadModel(config)


FAMILY = Family(
    name="gpt2", model_types=("gpt2",), architectures=("GPT2LMHeadModel",), build=_build, keymap=gpt2_keymap
)

__all__ = ["FAMILY", "GPT2Attention", "GPT2LMHeadModel", "GPT2Layer", "GPT2MLP", "gpt2_keymap"]
