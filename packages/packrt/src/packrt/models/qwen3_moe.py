"""The ``qwen3_moe`` family (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's decoder with sparse mixture-of-experts MLPs.

The attention and the norms are Qwen3's (:mod:`packrt.models.qwen3`). A layer's MLP is a
:class:`~packrt.models.moe.SparseMoE` of ``num_experts`` gated experts of width ``moe_intermediate_size``, each
token routed to ``num_experts_per_tok`` of them (``norm_topk_prob``: their weights renormalized to sum to 1),
unless the layer is in ``mlp_only_layers`` or is not a ``decoder_sparse_step``-th layer, which keep a dense
gated MLP of width ``intermediate_size``, as transformers builds them. Only the experts a token picks run.

Parameter names (``L`` the layer, ``E`` the expert): Qwen3's, with a sparse layer's MLP as
``layers.L.mlp.router.weight`` and ``layers.L.mlp.experts.E.{gate,up,down}.weight``.
"""

from __future__ import annotations

from functools import partial

from packrt import nn
from packrt.models.config_schema import completed
from packrt.models.decoder_blocks import (
    DecoderWidths,
    GatedMLP,
    PreNormLayer,
    RotaryAttention,
    RotaryDecoderLM,
    decoder_family,
    layer_windows,
)
from packrt.models.hfconfig import HFConfig
from packrt.models.moe import SparseMoE
from packrt.models.qwen3 import LAYER_ROWS as QWEN3_ROWS

# a sparse layer's rows beside a dense layer's (Qwen3's gated MLP rows stay for the dense layers)
LAYER_ROWS: tuple[tuple[str, str], ...] = (
    *QWEN3_ROWS,
    ("mlp.gate.weight", "mlp.router.weight"),
    ("mlp.experts.{i}.gate_proj.weight", "mlp.experts.{i}.gate.weight"),
    ("mlp.experts.{i}.up_proj.weight", "mlp.experts.{i}.up.weight"),
    ("mlp.experts.{i}.down_proj.weight", "mlp.experts.{i}.down.weight"),
)
DEFAULT_EXPERTS = 128  # Qwen3MoeConfig's num_experts


def num_experts(config: HFConfig) -> int:
    """``num_experts`` (``num_local_experts`` where transformers 5 saved it under that name), 128 when absent."""
    name = "num_experts" if "num_experts" in config else "num_local_experts"
    value = config.get(name, DEFAULT_EXPERTS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise config.error(name, f"is {value!r}, expected an integer >= 0 (the experts of each sparse layer)")
    return value


def sparse_layers(config: HFConfig, layers: int) -> list[bool]:
    """Which layers have a sparse MLP: not in ``mlp_only_layers``, every ``decoder_sparse_step``-th, and only when
    there are experts."""
    dense = config.get("mlp_only_layers") or []
    if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
        raise config.error("mlp_only_layers", f"is {dense!r}, expected a list of layer indices")
    step = config.integer("decoder_sparse_step")
    experts = num_experts(config)
    return [experts > 0 and i not in dense and (i + 1) % step == 0 for i in range(layers)]


class Qwen3MoeForCausalLM(RotaryDecoderLM):
    """Qwen3-MoE's causal LM: Qwen3's with sparse mixture-of-experts MLPs (see the module docstring)."""

    model_type = "qwen3_moe"

    def __init__(self, config: HFConfig) -> None:
        config = completed(config)
        super().__init__(config)
        w = DecoderWidths.read(config)
        bias = config.flag("attention_bias")
        window = config.optional_int("sliding_window") if config.flag("use_sliding_window") else None
        windows = layer_windows(config, w.layers, window)
        experts, top_k = num_experts(config), config.integer("num_experts_per_tok")
        if any(sparse_layers(config, w.layers)) and top_k > experts:
            raise config.error("num_experts_per_tok", f"is {top_k}, more than the {experts} experts (num_experts)")
        blocks: list[nn.Module] = []
        for index, sparse in enumerate(sparse_layers(config, w.layers)):
            attention = RotaryAttention(
                w, index, bias=bias, window=windows[index], head_norm=partial(nn.RMSNorm, eps=w.eps)
            )
            mlp: nn.Module
            if sparse:
                width = config.integer("moe_intermediate_size")
                mlp = SparseMoE(w.hidden, width, experts, top_k, normalize=config.flag("norm_topk_prob"))
            else:
                mlp = GatedMLP(w.hidden, w.intermediate, nn.SiLU())
            blocks.append(PreNormLayer(attention, mlp, w.hidden, w.eps))
        self._declare(config, w, blocks)


FAMILY = decoder_family("qwen3_moe", Qwen3MoeForCausalLM, LAYER_ROWS)

__all__ = ["FAMILY", "LAYER_ROWS", "Qwen3MoeForCausalLM", "num_experts", "sparse_layers"]
