"""Qwen3, Gemma 3 and Phi-3 GGUF files load with one from_pretrained call and compute what transformers does.

Tiny random transformers models are written as GGUF files the way llama.cpp's converter writes them: tensor
names from the gguf package's own name map (not packrt's table), Gemma's norm weights stored as ``1 + w``,
Phi-3's fused qkv and gate/up kept fused, the metadata keys llama.cpp writes. Served by packrt, each file
must give what transformers' own GGUF loading gives (F32, F16 and Q8_0) and, in F32, the original
model's logits and greedy tokens (which fails if a norm is left shifted or a fused projection is split
wrongly). Features packrt lacks (Phi-3's long-context rope factors) are refused by name.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from gguf_files import assert_logits_match_transformers_gguf, gguf_writer, write_gguf
from peers import VOCAB, assert_greedy_matches, logits, max_logits_diff, perturb_norms, tiny_model

import packrt
from packrt import nn
from packrt.models import UnsupportedModelError, from_pretrained
from packrt.models.gguf import gguf_config

SMALL = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "max_position_embeddings": 64}
KINDS = ["F32", "F16", "Q8_0"]
# name -> (config class, model class, config fields besides SMALL), with the settings transformers' GGUF loading
# reads back the same: Qwen3 keeps transformers' head_dim default (128: its GGUF reading ignores key_length),
# Gemma 3 its query_pre_attn_scalar default (256, so head_dim 256: llama.cpp scales by the head width) and six
# layers (the sixth is global); Phi-3 slides nowhere (transformers' GGUF reading drops the window).
GROUPED = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", GROUPED),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {
            "num_hidden_layers": 6,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "sliding_window": 4,
            "tie_word_embeddings": False,
        },
    ),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", GROUPED),
}


@pytest.fixture(scope="module")
def models(transformers: ModuleType, torch: ModuleType) -> dict[str, Any]:
    """One tiny model per architecture (see :data:`FAMILIES`), every norm weight perturbed."""
    torch.manual_seed(0)
    built = {
        name: tiny_model(transformers, config_class, model_class, **SMALL, **fields)
        for name, (config_class, model_class, fields) in FAMILIES.items()
    }
    for model in built.values():
        perturb_norms(torch, model)
    return built


def _ids(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (2, 11)).astype(np.int64)


@pytest.mark.parametrize("residency", ["borrowed", "packed"])
@pytest.mark.parametrize("arch", ["qwen3", "gemma3", "phi3"])
def test_an_f32_gguf_gives_the_original_models_logits_and_greedy_tokens(
    gguf: ModuleType, torch: ModuleType, models: dict[str, Any], tmp_path: Path, arch: str, residency: str
) -> None:
    path = write_gguf(gguf, models[arch], tmp_path / f"{arch}.gguf")
    model = from_pretrained(path, weight_residency=residency)
    ids = _ids()
    diff = max_logits_diff(torch, model, models[arch], ids)
    assert diff <= 1e-4, f"{arch} GGUF under {residency}: max abs logits diff {diff:.2e} against the original"
    assert_greedy_matches(torch, model, models[arch], ids[:, :6], 16, eos_token_id=None)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arch", ["qwen3", "gemma3", "phi3"])
def test_every_new_architecture_gives_transformers_gguf_logits(
    gguf: ModuleType,
    torch: ModuleType,
    gguf_reference: Any,
    models: dict[str, Any],
    tmp_path: Path,
    arch: str,
    kind: str,
) -> None:
    # transformers' Phi3Config defaults pad_token_id to 32000, past this vocabulary: the file names one
    extra = {"pad_token_id": 0} if arch == "phi3" else {}
    path = write_gguf(gguf, models[arch], tmp_path / f"{arch}-{kind}.gguf", kind, **extra)
    reference = gguf_reference(path)
    assert type(reference).__name__ == type(models[arch]).__name__
    assert_logits_match_transformers_gguf(torch, path, reference, _ids(1), f"{arch} {kind}")


def test_gemma_norms_stored_as_one_plus_w_are_given_back_as_w_and_reported(
    gguf: ModuleType, models: dict[str, Any], tmp_path: Path
) -> None:
    original = models["gemma3"].state_dict()
    path = write_gguf(gguf, models["gemma3"], tmp_path / "g.gguf")
    model = from_pretrained(path, weight_residency="borrowed")
    np.testing.assert_allclose(
        model.layers[5].post_mlp_norm.weight.numpy(),
        original["model.layers.5.post_feedforward_layernorm.weight"].numpy(),
        atol=1e-7,
    )
    rows = {row.path: row for row in nn.memory_report(model)}
    assert "1 subtracted" in " ".join(rows["layers.0.attention.q_norm"].origins)
    assert rows["layers.0.attention.q_proj"].mapped > 0 and rows["layers.0.attention.q_proj"].converted == 0
    assert [layer.rope_kind for layer in model.layers] == ["sliding_attention"] * 5 + ["full_attention"]


def test_a_phi3_sliding_window_in_the_metadata_is_served_as_the_original_slides(
    gguf: ModuleType, transformers: ModuleType, torch: ModuleType, models: dict[str, Any], tmp_path: Path
) -> None:
    original = models["phi3"]
    sliding = transformers.Phi3ForCausalLM(
        transformers.Phi3Config(**{**original.config.to_dict(), "sliding_window": 3})
    )
    sliding.load_state_dict(original.state_dict())
    path = write_gguf(gguf, sliding.eval(), tmp_path / "s.gguf", sliding_window=3)
    model = from_pretrained(path)
    assert [layer.attention.window for layer in model.layers] == [3, 3]
    ids = _ids(2)
    expected = logits(torch, sliding, ids)
    assert float(np.abs(model(packrt.from_numpy(ids)).numpy() - expected).max()) <= 1e-4
    assert float(np.abs(expected - logits(torch, original, ids)).max()) > 1e-2, "the window changes the result"


def test_phi3_long_context_rope_factors_are_refused_as_not_implemented(
    gguf: ModuleType, models: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "long.gguf"
    with gguf_writer(gguf, path, "phi3") as writer:
        writer.add_uint32("phi3.embedding_length", 64)
        writer.add_tensor("rope_factors_long.weight", np.ones(8, np.float32))
        writer.add_tensor("token_embd.weight", np.zeros((4, 64), np.float32))
    with pytest.raises(
        UnsupportedModelError, match=r"tensor 'rope_factors_long.weight' carries longrope .* packrt does not implement"
    ):
        from_pretrained(path)


def _metadata_only(gguf: ModuleType, path: Path, arch: str, **values: Any) -> Path:
    with gguf_writer(gguf, path, arch) as writer:
        for key, value in values.items():
            getattr(writer, f"add_{key}")(value)
        writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    return path


def test_gemma3_settings_the_metadata_leaves_out_follow_llama_cpps_loader(gguf: ModuleType, tmp_path: Path) -> None:
    import packrt_io

    shape = {"embedding_length": 5376, "head_count": 32, "key_length": 128, "rope_freq_base": 1e6}
    wide = gguf_config(
        packrt_io.open_gguf(_metadata_only(gguf, tmp_path / "27b.gguf", "gemma3", block_count=62, **shape))
    )
    assert wide["query_pre_attn_scalar"] == 5376 // 32  # Gemma 3 27B: hidden_size / heads
    small = _metadata_only(
        gguf,
        tmp_path / "1b.gguf",
        "gemma3",
        block_count=26,
        rope_scaling_type=gguf.RopeScalingType.LINEAR,
        rope_scaling_factor=8.0,
        **shape,
    )
    config = gguf_config(packrt_io.open_gguf(small))
    assert config["query_pre_attn_scalar"] == 128 and config["sliding_window_pattern"] == 6
    assert config["rope_parameters"] == {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    }
    flags = [True, False, True, False]
    listed = _metadata_only(
        gguf, tmp_path / "p.gguf", "gemma3", block_count=4, sliding_window_pattern=flags, rope_freq_base_swa=500.0
    )
    config = gguf_config(packrt_io.open_gguf(listed))
    assert config["layer_types"] == ["sliding_attention", "full_attention"] * 2
    assert config["rope_parameters"]["sliding_attention"]["rope_theta"] == 500.0


def test_generate_stops_at_the_files_eos_id_as_transformers_gguf_loading_does(
    gguf: ModuleType, torch: ModuleType, gguf_reference: Any, models: dict[str, Any], tmp_path: Path
) -> None:
    ids = _ids(3)[:, :6]
    with torch.no_grad():
        free = models["qwen3"].generate(torch.from_numpy(ids), max_new_tokens=8, do_sample=False).numpy()
    eos = int(free[0, 8])
    path = write_gguf(gguf, models["qwen3"], tmp_path / "eos.gguf", eos_token_id=eos)
    model = from_pretrained(path)
    assert model.generation_defaults.eos_token_ids == (eos,)
    with torch.no_grad():
        theirs = gguf_reference(path).generate(torch.from_numpy(ids), do_sample=False).numpy()
    ours = model.generate(packrt.from_numpy(ids)).numpy()
    np.testing.assert_array_equal(ours, theirs)
    assert ours[0, 8] == eos and (ours[0, 9:] == eos).all(), "the first row ends at the eos and is padded with it"


def test_q8_0_is_dequantised_for_a_dtype_and_quantize_int8_requantises_it_per_channel(
    gguf: ModuleType, models: dict[str, Any], tmp_path: Path
) -> None:
    # packrt's int8 road keeps one scale per output channel; Q8_0 keeps one per 32 weights, so asked for a dtype
    # its blocks are dequantised at load (named in the memory report) and, with quantize="int8", quantised again
    # per channel.
    path = write_gguf(gguf, models["qwen3"], tmp_path / "q8.gguf", "Q8_0")
    exact = from_pretrained(path, weight_residency="borrowed", dtype=packrt.float32)
    assert "Q8_0 dequantised to float32 from q8.gguf" in nn.memory_report(exact).origins()
    int8 = from_pretrained(path, quantize="int8")
    linears = {p: m for p, m in int8.named_modules() if isinstance(m, nn.Linear | nn.QuantizedLinear)}
    assert linears and all(isinstance(m, nn.QuantizedLinear) for m in linears.values())
    converted = {row.path for row in nn.memory_report(int8) if row.converted}
    assert converted == {"embed"}, "only the embedding (a lookup, kept float) holds a dequantised copy"
    for path_name, layer in linears.items():
        assert isinstance(layer, nn.QuantizedLinear)
        scale = layer.scale.numpy()[:, None]
        restored = layer.weight.numpy().astype(np.float32) * scale
        dequantised = exact.get_submodule(path_name).weight.numpy()
        assert (np.abs(restored - dequantised) <= scale / 2 * (1 + 1e-5) + 1e-7).all(), path_name
    ids = packrt.from_numpy(_ids(4))
    reference, served = exact(ids).numpy(), int8(ids).numpy()
    assert float(np.abs(served - reference).max()) <= 0.1 * float(np.abs(reference).max())
