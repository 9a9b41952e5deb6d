"""A Gemma 3 image-text checkpoint (``Gemma3ForConditionalGeneration``, the 4B-27B models) is served as its text
decoder: described as a causal LM, its ``text_config`` read as the model's config (messages name
``text_config.<field>``), its vision tower and projector left unused, and its headers checked as a load would
read them. Its logits and greedy tokens against transformers are in test_pretrained_matches_transformers (the
``gemma3-multimodal`` row of the family table)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from packrt.errors import CheckpointError
from packrt.models import ConfigError, Gemma3ForCausalLM, describe, from_pretrained
from packrt.models.pretrained import check_pretrained


@pytest.fixture
def multimodal(saved: Mapping[str, tuple[Path, Any]], tmp_path: Path) -> Path:
    """A copy of the tiny Gemma3ForConditionalGeneration directory (tests edit it)."""
    directory = tmp_path / "gemma3-multimodal"
    shutil.copytree(saved["gemma3-multimodal"][0], directory)
    return directory


def _edit(directory: Path, **changes: Any) -> None:
    config = json.loads((directory / "config.json").read_text())
    for key, value in changes.items():
        if key == "text_config":
            config["text_config"] = {**config["text_config"], **value}
        elif value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (directory / "config.json").write_text(json.dumps(config))


def test_the_checkpoint_is_described_as_a_causal_lm_of_the_gemma3_text_decoder(multimodal: Path) -> None:
    described = describe(multimodal)
    assert (described.kind, described.head) == ("causal-lm", "lm")
    assert (described.model_type, described.architecture) == ("gemma3", "Gemma3ForConditionalGeneration")
    model = from_pretrained(multimodal)
    assert isinstance(model, Gemma3ForCausalLM) and model.logit_softcap is None


def test_the_vision_tensors_are_left_unused_and_the_text_ones_all_load(multimodal: Path) -> None:
    report = check_pretrained(multimodal)
    assert not report.missing_keys and not report.unexpected_keys and not report.mismatched
    assert any(key.startswith("vision_tower.") for key in report.info.tensors)  # present in the file, unused


def test_a_config_without_text_config_is_refused_naming_the_field(multimodal: Path) -> None:
    config = json.loads((multimodal / "config.json").read_text())
    config["text_config"] = "none"
    (multimodal / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"field 'text_config' is 'none'; .*holds the text model's settings"):
        from_pretrained(multimodal)


def test_a_bad_text_setting_is_named_inside_text_config(multimodal: Path) -> None:
    _edit(multimodal, text_config={"sliding_window": 0})
    with pytest.raises(ConfigError, match=r"field 'text_config.sliding_window' is 0"):
        from_pretrained(multimodal)


def test_a_text_tensor_missing_from_the_file_is_named_as_stored(multimodal: Path) -> None:
    from safetensors.numpy import load_file, save_file

    path = multimodal / "model.safetensors"
    tensors = load_file(str(path))
    del tensors["language_model.model.norm.weight"]
    save_file(tensors, str(path), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"language_model\.model\.norm\.weight"):
        from_pretrained(multimodal)
