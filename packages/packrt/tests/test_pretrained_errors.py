"""from_pretrained's refusals name what is wrong, where, and the fix; keys ignored by design load quietly.

The directories here are written without transformers: a llama-shaped config.json and the
transformers key names the family's key map gives, so these tests need no torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoints import LLAMA, random_weights, write_checkpoint

import packrt
from packrt import nn
from packrt.errors import CheckpointError, DTypeError, PackrtError, ResidencyError
from packrt.models import UnsupportedModelError, from_pretrained, pretrained, supported
from packrt.models.keymap import KeyMap, Rule, template_of

CONFIG: dict[str, Any] = {**LLAMA, "tie_word_embeddings": False}


def _write(
    directory: Path, config: dict[str, Any], *, drop: str = "", extra: dict[str, np.ndarray] | None = None
) -> Path:
    """A llama directory in transformers' naming, random weights, one tensor dropped or extra ones added."""
    tensors = random_weights(CONFIG)
    tensors.pop(drop, None)
    tensors.update(extra or {})
    return write_checkpoint(directory, config, tensors)


def test_a_checkpoint_in_transformers_naming_loads(tmp_path: Path) -> None:
    model = from_pretrained(_write(tmp_path, CONFIG))
    assert model(packrt.zeros(1, 3, dtype=packrt.int64)).shape == (1, 3, 50)


def test_an_unknown_model_type_is_named_with_the_supported_ones(tmp_path: Path) -> None:
    directory = _write(tmp_path, {**CONFIG, "model_type": "t5", "architectures": ["T5Model"]})
    with pytest.raises(UnsupportedModelError, match=r"model_type 't5' is not one packrt can build.*llama") as info:
        from_pretrained(directory)
    assert isinstance(info.value, CheckpointError) and isinstance(info.value, ValueError)
    assert isinstance(info.value, PackrtError)
    assert set(supported()) == {
        "modernbert",
        "gemma3",
        "qwen3_moe",
        "gpt_oss",
        "ministral",
        "smollm3",
        "granite",
        "gemma2",
        "olmo2",
        "bert",
        "roberta",
        "xlm-roberta",
        "gpt2",
        "llama",
        "qwen2",
        "mistral",
        "qwen3",
        "gemma3_text",
        "phi3",
    }


def test_an_unknown_architecture_is_named_with_what_the_family_builds(tmp_path: Path) -> None:
    directory = _write(tmp_path, {**CONFIG, "architectures": ["LlamaForSequenceClassification"]})
    with pytest.raises(UnsupportedModelError, match=r"'LlamaForSequenceClassification'.*builds LlamaForCausalLM"):
        from_pretrained(directory)


def test_a_missing_tensor_names_the_checkpoint_file_and_key(tmp_path: Path) -> None:
    directory = _write(tmp_path, CONFIG, drop="model.layers.1.mlp.up_proj.weight")
    with pytest.raises(
        CheckpointError, match=r"(?s)1 tensors missing .*model\.safetensors.*'model\.layers\.1\.mlp\.up_proj\.weight'"
    ):
        from_pretrained(directory)


def test_an_unexpected_tensor_names_its_file_and_key(tmp_path: Path) -> None:
    extra = {"model.layers.0.adapter.weight": np.zeros((2, 2), np.float32)}
    directory = _write(tmp_path, CONFIG, extra=extra)
    with pytest.raises(CheckpointError, match=r"'model\.layers\.0\.adapter\.weight' in 'model\.safetensors'"):
        from_pretrained(directory)


def test_strict_false_skips_unknown_tensors_and_leaves_missing_ones_unloaded(tmp_path: Path) -> None:
    extra = {"model.layers.0.adapter.weight": np.zeros((2, 2), np.float32)}
    directory = _write(tmp_path, CONFIG, drop="model.norm.weight", extra=extra)
    model = from_pretrained(directory, strict=False)
    assert not model.norm.weight.has_storage and model.embed.weight.has_storage


def test_tensors_ignored_by_design_are_expected_not_unexpected(tmp_path: Path) -> None:
    extra = {"model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(4, np.float32)}
    model = from_pretrained(_write(tmp_path, CONFIG, extra=extra))
    assert "layers.0.self_attn.rotary_emb.inv_freq" not in model.state_dict()


def test_a_shape_that_disagrees_with_config_json_names_both_shapes(tmp_path: Path) -> None:
    directory = _write(tmp_path, CONFIG)
    (directory / "config.json").write_text(json.dumps({**CONFIG, "intermediate_size": 40}))
    with pytest.raises(
        CheckpointError,
        match=r"'model\.layers\.0\.mlp\.down_proj\.weight' in 'model\.safetensors' has shape \(16, 32\).*\(16, 40\)",
    ):
        from_pretrained(directory)


def test_a_directory_without_config_json_says_what_it_needs(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"has no config\.json"):
        from_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="is not a directory"):
        from_pretrained(tmp_path / "nowhere")


def test_a_config_field_of_the_wrong_type_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"field 'hidden_size' is 'big', expected a positive integer"):
        from_pretrained(_write(tmp_path, {**CONFIG, "hidden_size": "big"}))


def test_an_unimplemented_rope_type_is_refused_by_name(tmp_path: Path) -> None:
    directory = _write(tmp_path, {**CONFIG, "rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4}})
    with pytest.raises(CheckpointError, match=r"rope_type' is 'dynamic'.*supported: default, linear, llama3, yarn"):
        from_pretrained(directory)


def test_a_dtype_that_is_not_floating_is_refused_listing_the_accepted_names(tmp_path: Path) -> None:
    directory = _write(tmp_path, CONFIG)
    accepted = r"float16 \(half, fp16\), bfloat16 \(bf16\), float32 \(float, fp32\), float64 \(double\)"
    with pytest.raises(ValueError, match=f"dtype 'int8' is int8, not a floating packrt dtype.*{accepted}"):
        from_pretrained(directory, dtype="int8")
    with pytest.raises(DTypeError, match=f"dtype 'fp8' is not a floating packrt dtype; accepted: {accepted}"):
        from_pretrained(directory, dtype="fp8")


@pytest.mark.parametrize(("name", "expected"), [("fp16", "float16"), ("bf16", "bfloat16"), ("fp32", "float32")])
def test_the_short_dtype_names_cast_as_their_long_names_do(tmp_path: Path, name: str, expected: str) -> None:
    model = from_pretrained(_write(tmp_path, CONFIG), dtype=name)
    assert {value.dtype for value in model.state_dict().values()} == {getattr(packrt, expected)}


def test_key_map_templates_stand_for_layer_numbers() -> None:
    assert template_of("model.layers.12.mlp.up_proj.weight") == ("model.layers.{i}.mlp.up_proj.weight", ("12",))
    keymap = KeyMap((Rule("h.{i}.w", "layers.{i}.w", "transpose"),), frozenset({"h.{i}.bias"}), ("transformer.",))
    found = keymap.lookup("transformer.h.3.w")
    assert found != "ignored" and found is not None
    assert (found.model, found.transform) == ("layers.3.w", "transpose")
    assert keymap.lookup("h.3.bias") == "ignored" and keymap.lookup("h.3.other") is None
    assert keymap.checkpoint_name("layers.3.w", "transformer.") == "transformer.h.3.w"


def test_a_key_map_refuses_two_rows_for_one_name() -> None:
    with pytest.raises(ValueError, match="repeats a checkpoint or packrt name"):
        KeyMap((Rule("a", "x"), Rule("a", "y")))


def test_the_progress_bar_waits_a_second_and_stays_off_when_stderr_is_no_terminal() -> None:
    from packrt.models.pretrained import _progress_bar

    assert _progress_bar(None, 100, "loading") is None  # pytest's stderr is not a terminal
    assert _progress_bar(False, 100, "loading") is None
    pytest.importorskip("tqdm", reason="the progress extra (tqdm) is not installed")
    bar = _progress_bar(True, 100, "loading")
    try:
        assert bar is not None and bar.delay == pytest.approx(1.0)
    finally:
        bar.close()


def test_an_unknown_residency_is_refused_before_any_file_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = _write(tmp_path, CONFIG)
    monkeypatch.setattr(pretrained, "read_config", lambda *_: pytest.fail("config.json was read"))
    with pytest.raises(
        ResidencyError,
        match=r"from_pretrained: unknown weight_residency 'pinned': expected one of packed, borrowed, auto, per_call",
    ) as info:
        from_pretrained(directory, weight_residency="pinned")
    assert isinstance(info.value, ValueError) and isinstance(info.value, PackrtError)


@pytest.mark.parametrize("residency", ["packed", "borrowed"])
def test_the_loads_residency_reaches_every_packing_layer_of_a_model_declared_without_one(
    tmp_path: Path, residency: str
) -> None:
    model = from_pretrained(_write(tmp_path, CONFIG), weight_residency=residency)
    layers = [m for m in model.modules() if isinstance(m, nn.PackedLayer)]
    assert layers and {layer.weight_residency for layer in layers} == {residency}
