"""Family-specific rules of the qwen3, gemma3 (text) and phi3 families loaded from save_pretrained directories.

What every family must do against transformers (padded batches, greedy and eos generations, bf16) is checked
over all of them in test_pretrained_matches_transformers; here: the support table, a bf16 decoder's float32
residual stream, phi3's fused projections, and the config keys each family reads as transformers does.
Nothing is downloaded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from peers import assert_close_on_real_tokens, assert_served_borrowed, logits, served
from tiny_families import causal_batch

import packrt
from packrt import nn
from packrt.models import from_pretrained, supported


def _batch(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return causal_batch(seed, length=11)


def test_qwen3_gemma3_and_phi3_are_listed_as_supported() -> None:
    table = supported()
    assert table["qwen3"] == ("Qwen3ForCausalLM", "Qwen3ForSequenceClassification")
    assert table["gemma3_text"] == ("Gemma3ForCausalLM",)
    assert table["phi3"] == ("Phi3ForCausalLM",)


def test_a_bf16_decoder_sums_its_residual_stream_in_float32_and_returns_bf16_logits(
    saved: Any, torch: ModuleType, tmp_path: Path
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


def test_fused_projections_are_served_borrowed_from_the_mapped_file_as_one_gemm_each(saved: Any) -> None:
    model = from_pretrained(saved["phi3"][0], weight_residency="borrowed")
    assert isinstance(model.layers[0].attention.qkv_proj, nn.Linear)
    assert tuple(model.layers[0].attention.qkv_proj.weight.shape) == (32 + 2 * 2 * 8, 32)
    assert tuple(model.layers[0].mlp.gate_up.weight.shape) == (2 * 64, 32)
    model(packrt.from_numpy(_batch()[0]))
    assert_served_borrowed(model)


def test_a_qwen3_config_without_head_dim_means_128_as_in_transformers(
    saved: Any, transformers: ModuleType, torch: ModuleType, tmp_path: Path
) -> None:
    directory = shutil.copytree(saved["qwen3-tied"][0], tmp_path / "qwen3")
    config = json.loads((directory / "config.json").read_text())
    assert config["head_dim"] == 128  # transformers' default, written out by save_pretrained
    del config["head_dim"]
    (directory / "config.json").write_text(json.dumps(config))
    model = from_pretrained(directory)
    assert model.layers[0].attention.head_dim == 128
    reference = transformers.Qwen3ForCausalLM.from_pretrained(directory).eval()
    ids, mask = _batch(seed=4)
    assert_close_on_real_tokens(served(model, ids, mask), logits(torch, reference, ids, mask), mask, "qwen3")


def test_a_gemma3_config_in_the_older_keys_is_read_as_transformers_reads_it(
    saved: Any, transformers: ModuleType, torch: ModuleType, tmp_path: Path
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
    assert_close_on_real_tokens(served(model, ids, mask), expected, mask, "gemma3 in the older keys")
    assert float(np.abs(expected - logits(torch, original, ids, mask)).max()) <= 1e-4
