"""The ``gpt_oss`` family (gpt-oss-20b, gpt-oss-120b): a rotary decoder whose every MLP is a sparse mixture of
experts, with attention sinks.

Built on the one decoder stack (:mod:`packrt.models.decoder_blocks`), as transformers' ``GptOssForCausalLM``
computes it:

- attention: grouped-query rotary attention with biases on q, k, v and o (``attention_bias``), sliding and full
  layers as ``layer_types`` says (by default they alternate, the first sliding, over ``sliding_window``
  positions), and one learned **sink** logit per head that joins each softmax's denominator only
  (:class:`SinkAttention`): a head's weights over the keys sum to less than 1;
- rotary positions: YaRN by default (factor 32 over 4096 pretrained positions, ``rope_theta`` 150000, as
  ``GptOssConfig`` fills them in when ``rope_parameters`` is absent);
- MLP (:class:`GptOssMoE`): a router with a bias scores the ``num_local_experts`` experts; each token keeps its
  ``num_experts_per_tok`` best scores and a softmax over those gives their weights; only the experts some token
  picked run, on exactly its tokens. An expert is ``down(swiglu(gate_up(x)))`` with biases, where the gate and
  up halves are interleaved columns of ``gate_up`` (even: gate, odd: up) and the SwiGLU is clamped: the gate to
  at most ``swiglu_limit``, the up half to +-``swiglu_limit``, then ``(up + 1) * gate * sigmoid(alpha * gate)``.

The experts' weights stay as the checkpoint stacks them, (experts, in, out) per layer (:class:`StackedExperts`):
``borrowed`` serves them from the mapped file; they are not packed, nor quantized by ``quantize="int8"``.
Layers of these blocks keep the module road (the decoder's serving plan reproduces neither sinks nor experts).

gpt-oss's published checkpoints store the experts in MXFP4 (config.json's ``quantization_config``): they are
dequantized to floats at load (:mod:`packrt.models.mxfp4`). Refused, each by name: another ``quant_method``,
``num_experts_per_tok`` above ``num_local_experts``, and what the schema refuses for every decoder (rope types,
layer types). Parameter names: the decoder stack's, with ``layers.L.attention.sinks``, ``layers.L.mlp.router.
{weight,bias}`` and ``layers.L.mlp.experts.{gate_up_proj,gate_up_proj_bias,down_proj,down_proj_bias}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import packrt
from packrt import nn
from packrt.models.attention import KVCache, Step, attend
from packrt.models.config_schema import ConfigError, completed
from packrt.models.decoder_blocks import (
    ATTENTION_ROWS,
    PRE_NORM_ROWS,
    DecoderWidths,
    PreNormLayer,
    RotaryAttention,
    RotaryDecoderLM,
    decoder_family,
    layer_windows,
)
from packrt.models.devices import host
from packrt.models.hfconfig import HFConfig
from packrt.models.moe import dispatch
from packrt.models.mxfp4 import is_mxfp4

LAYER_ROWS: tuple[tuple[str, str], ...] = (
    *PRE_NORM_ROWS,
    *ATTENTION_ROWS,
    ("self_attn.sinks", "attention.sinks"),
    ("mlp.router.weight", "mlp.router.weight"),
    ("mlp.router.bias", "mlp.router.bias"),
    *(
        (f"mlp.experts.{name}", f"mlp.experts.{name}")
        for name in ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias")
    ),
)
# GptOssConfig's rotary settings when config.json gives none
DEFAULT_ROPE: dict[str, Any] = {
    "rope_type": "yarn",
    "factor": 32.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 4096,
}


class SinkAttention(RotaryAttention):
    """:class:`~packrt.models.decoder_blocks.RotaryAttention` with one learned sink logit per query head
    (``sinks``, (heads,)): the softmax over a query's keys also counts ``exp(sink)`` in its denominator."""

    def __init__(self, widths: DecoderWidths, index: int, **options: Any) -> None:
        super().__init__(widths, index, **options)
        self.sinks = nn.Parameter(packrt.zeros(widths.heads))

    def _attend(
        self, q: packrt.Tensor, k: packrt.Tensor, v: packrt.Tensor, step: Step, cache: KVCache | None
    ) -> packrt.Tensor:
        return attend(
            q, k, v, step=step, cache=cache, layer=self.index, window=self.window, scale=self.scale, sinks=self.sinks
        )


def _clamped(x: packrt.Tensor, low: float | None, high: float) -> packrt.Tensor:
    """A copy of ``x`` with each element above ``high`` set to it (and below ``low``, when given): exact, as
    torch's clamp is (no arithmetic on the kept values)."""
    out = x.clone()  # a view of the interleaved projection: written in a copy
    out[out > high] = high
    if low is not None:
        out[out < low] = low
    return out


class StackedExperts(nn.Module):
    """``experts`` clamped-SwiGLU experts, their weights stacked as transformers stores them:
    ``gate_up_proj`` (experts, hidden, 2 * intermediate), gate and up interleaved by column;
    ``down_proj`` (experts, intermediate, hidden); a bias row per expert for each.

    ``self(x, expert)`` runs expert ``expert`` alone on ``x`` (rows, hidden): one call per expert a token
    picked (a forward hook on this module sees each call and its expert's index).
    """

    def __init__(self, hidden: int, intermediate: int, experts: int, *, alpha: float, limit: float) -> None:
        super().__init__()
        self.alpha, self.limit = alpha, limit
        self.gate_up_proj = nn.Parameter(packrt.zeros(experts, hidden, 2 * intermediate))
        self.gate_up_proj_bias = nn.Parameter(packrt.zeros(experts, 2 * intermediate))
        self.down_proj = nn.Parameter(packrt.zeros(experts, intermediate, hidden))
        self.down_proj_bias = nn.Parameter(packrt.zeros(experts, hidden))

    def forward(self, x: packrt.Tensor, expert: int) -> packrt.Tensor:
        both = x @ self.gate_up_proj[expert] + self.gate_up_proj_bias[expert]
        gate = _clamped(both[..., ::2], None, self.limit)  # the gate is clamped from above only
        up = _clamped(both[..., 1::2], -self.limit, self.limit)
        glu = gate * nn.functional.sigmoid(gate * self.alpha)
        out: packrt.Tensor = ((up + 1.0) * glu) @ self.down_proj[expert] + self.down_proj_bias[expert]
        return out

    def extra_repr(self) -> str:
        experts, hidden, width = self.gate_up_proj.shape
        return f"experts={experts}, hidden={hidden}, intermediate={width // 2}, alpha={self.alpha}, limit={self.limit}"


class GptOssMoE(nn.Module):
    """gpt-oss's MLP (see the module docstring): a biased router, top-``top_k`` experts per token weighted by a
    softmax over their scores, only the picked experts run. (..., hidden) in, (..., hidden) out."""

    def __init__(self, hidden: int, intermediate: int, experts: int, top_k: int, *, alpha: float, limit: float) -> None:
        super().__init__()
        if not 0 < top_k <= experts:
            raise ValueError(f"GptOssMoE: top_k must be in [1, experts={experts}], got {top_k}")
        self.top_k = top_k
        self.router = nn.Linear(hidden, experts, bias=True)
        self.experts = StackedExperts(hidden, intermediate, experts, alpha=alpha, limit=limit)

    def route(self, flat: packrt.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(chosen experts, their weights), each (tokens, top_k), best first, for (tokens, hidden) ``flat``: the
        top scores' softmax (transformers' order: pick, then normalize), rounded to the router's dtype."""
        logits = self.router(flat)
        scores = np.asarray(host(logits), dtype=np.float32)
        chosen = np.argsort(-scores, axis=-1, kind="stable")[:, : self.top_k]
        top = np.take_along_axis(scores, chosen, axis=-1)
        top = np.exp(top - top[:, :1])  # the first is the largest
        weights = top / top.sum(axis=-1, keepdims=True)
        return chosen, weights.astype(logits.dtype.numpy)

    def forward(self, x: packrt.Tensor) -> packrt.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        chosen, weights = self.route(flat)
        out = dispatch(flat, chosen, weights, lambda expert, rows: self.experts(rows, expert))
        result: packrt.Tensor = out.reshape(*shape)
        return result

    def extra_repr(self) -> str:
        return f"top_k={self.top_k}"


def refuse_quantized(config: HFConfig) -> None:
    """ConfigError for a config.json whose ``quantization_config`` is not MXFP4 (gpt-oss's published experts,
    dequantized at load: :mod:`packrt.models.mxfp4`): packrt reads no other quantized safetensors."""
    quantization = config.get("quantization_config")
    if quantization is None or is_mxfp4(config):
        return
    method = quantization.get("quant_method") if isinstance(quantization, dict) else quantization
    raise ConfigError(
        config.describe(
            "quantization_config.quant_method",
            f"is {method!r}: packrt reads gpt-oss's floating weights and its MXFP4 experts ('mxfp4') only",
            "dequantize the checkpoint with transformers (from_pretrained, then save_pretrained without the "
            "quantization) and serve that copy",
        )
    )


def gpt_oss_config(config: HFConfig) -> HFConfig:
    """``config`` completed with the schema's defaults and the two GptOssConfig derives: the YaRN rope dict when
    none is given, and ``layer_types`` alternating sliding (even layers) and full (odd) when absent."""
    config = completed(config)
    values: dict[str, Any] = {}
    if config.get("rope_parameters") is None and config.get("rope_scaling") is None:
        values["rope_parameters"] = {**DEFAULT_ROPE, "rope_theta": config.number("rope_theta")}
    if config.get("layer_types") is None:
        layers = config.integer("num_hidden_layers")
        values["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    return config.with_values(values) if values else config


class GptOssForCausalLM(RotaryDecoderLM):
    """gpt-oss's causal LM (see the module docstring)."""

    model_type = "gpt_oss"

    def __init__(self, config: HFConfig) -> None:
        refuse_quantized(config)
        config = gpt_oss_config(config)
        super().__init__(config)
        w = DecoderWidths.read(config)
        experts, top_k = config.integer("num_local_experts"), config.integer("num_experts_per_tok")
        if top_k > experts:
            raise ConfigError(
                config.describe(
                    "num_experts_per_tok",
                    f"is {top_k}, more than the {experts} experts (num_local_experts)",
                    "set num_experts_per_tok to at most num_local_experts",
                )
            )
        windows = layer_windows(config, w.layers, config.optional_int("sliding_window"))
        alpha, limit = config.number("swiglu_alpha"), config.number("swiglu_limit")
        bias = config.flag("attention_bias")
        blocks: list[nn.Module] = []
        for index in range(w.layers):
            attention = SinkAttention(w, index, bias=bias, window=windows[index])
            mlp = GptOssMoE(w.hidden, w.intermediate, experts, top_k, alpha=alpha, limit=limit)
            blocks.append(PreNormLayer(attention, mlp, w.hidden, w.eps))
        self._declare(config, w, blocks)


FAMILY = decoder_family("gpt_oss", GptOssForCausalLM, LAYER_ROWS)

__all__ = [
    "DEFAULT_ROPE",
    "FAMILY",
    "LAYER_ROWS",
    "GptOssForCausalLM",
    "GptOssMoE",
    "SinkAttention",
    "StackedExperts",
    "gpt_oss_config",
    "refuse_quantized",
]
