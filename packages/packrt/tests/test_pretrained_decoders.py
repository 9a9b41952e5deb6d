"""The qwen3, gemma3 (text) and phi3 families load from save_pretrained directories and compute what transformers does.

Tiny random models (hidden 32, two layers, every norm weight perturbed so that a norm read as ``w``
instead of ``1 + w``, or skipped, shows) are built with transformers 5.23, saved with
``safe_serialization=True`` and served by packrt under ``borrowed`` and ``packed``: logits of a padded
batch (one full row, one right-padded, one left-padded) within 1e-4 in fp32, 32 greedy tokens identical,
left-padded generation with an eos identical, and a bf16 checkpoint no farther from the fp32 logits than
transformers' own bf16 run is. Nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from peers import (
    RESIDENCIES,
    SMALL,
    VOCAB,
    assert_bf16_no_farther_than_transformers,
    assert_close_on_real_tokens,
    assert_eos_generation_matches,
    assert_greedy_matches,
    assert_served_borrowed,
    bf16_copies,
    logits,
    perturb_norms,
    save,
    tiny_model,
)

import packrt
from packrt import nn
from packrt.models import from_pretrained, supported
from packrt.models.gemma3 import Gemma3ForCausalLM
from packrt.models.phi3 import Phi3ForCausalLM
from packrt.models.qwen3 import Qwen3ForCausalLM

GEMMA = {
    **SMALL,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "sliding_window": 4,
    "query_pre_attn_scalar": 24,
    "final_logit_softcapping": 30.0,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 50_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
    },
}
# name -> (config class, model class, config fields, save_pretrained arguments, packrt class)
FAMILIES: dict[str, tuple[str, str, dict[str, Any], dict[str, Any], type]] = {
    "qwen3": (
        "Qwen3Config",
        "Qwen3ForCausalLM",
        {
            **SMALL,
            "num_key_value_heads": 2,
            "head_dim": 16,  # not hidden // heads: the explicit width is the one used
            "attention_bias": True,
            "use_sliding_window": True,
            "sliding_window": 4,
            "max_window_layers": 1,
        },
        {"max_shard_size": "20KB"},
        Qwen3ForCausalLM,
    ),
    "qwen3-tied": (
        "Qwen3Config",
        "Qwen3ForCausalLM",
        {**SMALL, "num_key_value_heads": 1, "tie_word_embeddings": True},
        {},
        Qwen3ForCausalLM,
    ),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {**GEMMA, "tie_word_embeddings": False, "attn_logit_softcapping": 20.0},
        {},
        Gemma3ForCausalLM,
    ),
    "gemma3-tied": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {**GEMMA, "initializer_range": 0.1, "attention_bias": True},
        {},
        Gemma3ForCausalLM,
    ),
    "phi3": (
        "Phi3Config",
        "Phi3ForCausalLM",
        {**SMALL, "num_key_value_heads": 2, "sliding_window": 5},
        {},
        Phi3ForCausalLM,
    ),
    "phi3-tied": ("Phi3Config", "Phi3ForCausalLM", {**SMALL, "tie_word_embeddings": True}, {}, Phi3ForCausalLM),
}


@pytest.fixture(scope="module")
def saved(transformers: ModuleType, torch: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """name -> (directory, the fp32 transformers model saved there)."""
    torch.manual_seed(0)
    out: dict[str, Any] = {}
    for name, (config_class, model_class, fields, save_args, _) in FAMILIES.items():
        model = tiny_model(transformers, config_class, model_class, vocab_size=VOCAB, **fields)
        perturb_norms(torch, model)
        out[name] = save(model, tmp_path_factory.mktemp(name), **save_args)
    return out


def _batch(seed: int = 0, length: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """ids and attention_mask: one full row, one padded on the right, one on the left."""
    ids = np.random.default_rng(seed).integers(1, VOCAB, (3, length)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, length - 3 :] = 0
    mask[2, :4] = 0
    return ids, mask


def _ours(model: Any, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    out: np.ndarray = model(packrt.from_numpy(ids), attention_mask=packrt.from_numpy(mask)).to(packrt.float32).numpy()
    return out


def test_qwen3_gemma3_and_phi3_are_listed_as_supported() -> None:
    table = supported()
    assert table["qwen3"] == ("Qwen3ForCausalLM",)
    assert table["gemma3_text"] == ("Gemma3ForCausalLM",)
    assert table["phi3"] == ("Phi3ForCausalLM",)


@pytest.mark.parametrize("residency", RESIDENCIES)
@pytest.mark.parametrize("name", list(FAMILIES))
def test_padded_batches_match_transformers_within_1e_4(
    saved: dict[str, Any], torch: ModuleType, name: str, residency: str
) -> None:
    directory, reference = saved[name]
    model = from_pretrained(directory, weight_residency=residency)
    assert isinstance(model, FAMILIES[name][4]) and not model.training
    ids, mask = _batch()
    out = _ours(model, ids, mask)
    assert out.shape == (3, 11, VOCAB)
    assert_close_on_real_tokens(out, logits(torch, reference, ids, mask), mask, f"{name} under {residency}")


@pytest.mark.parametrize("residency", RESIDENCIES)
@pytest.mark.parametrize("name", list(FAMILIES))
def test_32_greedy_tokens_equal_transformers_token_for_token(
    saved: dict[str, Any], torch: ModuleType, name: str, residency: str
) -> None:
    directory, reference = saved[name]
    model = from_pretrained(directory, weight_residency=residency)
    ids = np.random.default_rng(1).integers(1, VOCAB, (2, 6)).astype(np.int64)
    ours = assert_greedy_matches(torch, model, reference, ids, 32)
    assert ours.shape == (2, 38)
    assert len(set(ours[:, 6:].ravel().tolist())) > 2, "the generation is degenerate: the test would prove little"


@pytest.mark.parametrize("name", list(FAMILIES))
def test_left_padded_generation_with_an_eos_matches_transformers(
    saved: dict[str, Any], torch: ModuleType, name: str
) -> None:
    directory, reference = saved[name]
    model = from_pretrained(directory, weight_residency="borrowed")
    ids, mask = _batch(seed=2, length=7)
    ids, mask = ids[[0, 2]], mask[[0, 2]]
    ids[mask == 0] = 0
    assert_eos_generation_matches(torch, model, reference, ids, mask, eos_at=11)


# The bf16 distance from the fp32 logits is the mean absolute error over the real tokens of these padded
# batches, pooled. Measured on these models: qwen3 0.86x transformers', gemma3 0.80x, phi3 0.88x; one batch's
# ratio moves by about +-0.05 (over 8 batches: qwen3 0.81-0.95, gemma3 0.75-0.84, phi3 0.82-0.98), since both
# runtimes round every projection's output to bf16 and those roundings are independent draws.
BF16_BATCHES = (3, 4, 5, 6)


@pytest.mark.parametrize("name", ["qwen3", "gemma3", "phi3"])
def test_a_bf16_checkpoint_is_no_farther_from_fp32_than_transformers_bf16(
    saved: dict[str, Any], torch: ModuleType, name: str, tmp_path: Path
) -> None:
    directory, reference = saved[name]
    half, models = bf16_copies(torch, reference, directory, tmp_path)
    assert all(model.embed.weight.dtype is packrt.bfloat16 for model in models.values())
    assert_bf16_no_farther_than_transformers(
        name,
        [_batch(seed=seed, length=24) for seed in BF16_BATCHES],
        lambda model, ids, mask: logits(torch, model, ids, mask),
        _ours,
        models,
        reference,
        half,
    )


def test_a_bf16_decoder_sums_its_residual_stream_in_float32_and_returns_bf16_logits(
    saved: dict[str, Any], torch: ModuleType, tmp_path: Path
) -> None:
    _, reference = saved["gemma3"]
    type(reference).from_pretrained(saved["gemma3"][0], dtype=torch.bfloat16).save_pretrained(tmp_path)
    model = from_pretrained(tmp_path)
    seen: list[Any] = []
    model.layers[0].register_forward_hook(lambda _m, args, out: seen.append((args[0].dtype, out.dtype)))
    model.layers[0].attention.q_proj.register_forward_hook(lambda _m, args, out: seen.append((args[0].dtype,)))
    out = model(packrt.from_numpy(_batch()[0]))
    assert seen == [(packrt.bfloat16,), (packrt.float32, packrt.float32)]  # the projection reads bf16
    assert out.dtype is packrt.bfloat16


def test_fused_projections_are_served_borrowed_from_the_mapped_file_as_one_gemm_each(saved: dict[str, Any]) -> None:
    model = from_pretrained(saved["phi3"][0], weight_residency="borrowed")
    assert isinstance(model.layers[0].attention.qkv_proj, nn.Linear)
    assert tuple(model.layers[0].attention.qkv_proj.weight.shape) == (32 + 2 * 2 * 8, 32)
    assert tuple(model.layers[0].mlp.gate_up.weight.shape) == (2 * 64, 32)
    model(packrt.from_numpy(_batch()[0]))
    assert_served_borrowed(model)


def test_a_qwen3_config_without_head_dim_means_128_as_in_transformers(
    saved: dict[str, Any], transformers: ModuleType, torch: ModuleType
) -> None:
    directory, _ = saved["qwen3-tied"]
    config = json.loads((directory / "config.json").read_text())
    assert config["head_dim"] == 128  # transformers' default, written out by save_pretrained
    del config["head_dim"]
    (directory / "config.json").write_text(json.dumps(config))
    model = from_pretrained(directory)
    assert model.layers[0].attention.head_dim == 128
    reference = transformers.Qwen3ForCausalLM.from_pretrained(directory).eval()
    ids, mask = _batch(seed=4)
    assert_close_on_real_tokens(_ours(model, ids, mask), logits(torch, reference, ids, mask), mask, "qwen3")


def test_a_gemma3_config_in_the_older_keys_is_read_as_transformers_reads_it(
    saved: dict[str, Any], transformers: ModuleType, torch: ModuleType, tmp_path: Path
) -> None:
    _, original = saved["gemma3"]
    original.save_pretrained(tmp_path, safe_serialization=True)
    config = json.loads((tmp_path / "config.json").read_text())
    for key in ("rope_parameters", "layer_types", "_sliding_window_pattern"):
        config.pop(key, None)
    # rope_theta and rope_scaling for the global layers, rope_local_base_freq for the local ones, and one
    # global layer in every two: as the Gemma 3 checkpoints on the Hub still write them
    config.update(
        rope_theta=50_000.0,
        rope_local_base_freq=500.0,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
        sliding_window_pattern=2,
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    reference = transformers.Gemma3ForCausalLM.from_pretrained(tmp_path).eval()
    assert reference.config.layer_types == ["sliding_attention", "full_attention"]
    model = from_pretrained(tmp_path)
    ids, mask = _batch(seed=5)
    expected = logits(torch, reference, ids, mask)
    assert_close_on_real_tokens(_ours(model, ids, mask), expected, mask, "gemma3 in the older keys")
    assert float(np.abs(expected - logits(torch, original, ids, mask)).max()) <= 1e-4
