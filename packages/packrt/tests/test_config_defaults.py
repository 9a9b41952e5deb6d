"""A config.json that leaves a field out means what it means to transformers, and the default is stated once.

Each model type's schema (``packrt.models.config_schema.SCHEMAS``) holds its defaults; ``completed`` fills them
in, and the families read the completed config without restating any. So the schema's defaults must be the
transformers config class's own, and a model built from a config that omits a field must carry that default.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from packrt.models import from_pretrained
from packrt.models.config_schema import REQUIRED, SCHEMAS, completed
from packrt.models.hfconfig import HFConfig

CONFIG_CLASSES = {
    "bert": "BertConfig",
    "roberta": "RobertaConfig",
    "xlm-roberta": "XLMRobertaConfig",
    "gpt2": "GPT2Config",
    "llama": "LlamaConfig",
    "mistral": "MistralConfig",
    "qwen2": "Qwen2Config",
    "qwen3": "Qwen3Config",
    "gemma3_text": "Gemma3TextConfig",
    "phi3": "Phi3Config",
    "ministral": "MinistralConfig",
    "smollm3": "SmolLM3Config",
    "granite": "GraniteConfig",
    "gemma2": "Gemma2Config",
    "olmo2": "Olmo2Config",
    "qwen3_moe": "Qwen3MoeConfig",
    "modernbert": "ModernBertConfig",
    "gpt_oss": "GptOssConfig",
}
# Where transformers' class holds no plain default to compare with: token ids (config.json's own, or none:
# generation reads them with generation_config.json), and the widths and layer lists it derives from other
# fields when left out (the schema's None means the same derivation).
NOT_PLAIN = {"pad_token_id", "bos_token_id", "eos_token_id", "num_key_value_heads", "layer_types", "no_rope_layers"}


def _plain_defaults(transformers: ModuleType, model_type: str) -> list[tuple[str, Any, Any]]:
    """(field, schema default, transformers' default) for each field both give a plain default for."""
    theirs = getattr(transformers, CONFIG_CLASSES[model_type])()
    out = []
    for field in SCHEMAS[model_type].fields:
        if field.default is REQUIRED or field.name in NOT_PLAIN or not hasattr(theirs, field.name):
            continue
        if field.name == "head_dim" and field.default is None:
            continue  # derived: hidden_size // num_attention_heads, in both
        out.append((field.name, field.default, getattr(theirs, field.name)))
    return out


def test_every_model_type_has_a_transformers_config_to_compare_with() -> None:
    assert set(CONFIG_CLASSES) == set(SCHEMAS)


@pytest.mark.parametrize("model_type", sorted(SCHEMAS))
def test_each_schema_default_is_the_transformers_config_classs_default(
    transformers: ModuleType, model_type: str
) -> None:
    compared = _plain_defaults(transformers, model_type)
    assert compared, f"{model_type}: no default compared"
    disagree = [(name, ours, theirs) for name, ours, theirs in compared if ours != theirs]
    assert disagree == [], f"{model_type}: (field, schema default, transformers default) {disagree}"


@pytest.mark.parametrize("model_type", sorted(SCHEMAS))
def test_completing_a_config_fills_each_default_it_leaves_out_and_keeps_what_it_gives(model_type: str) -> None:
    given = HFConfig({"model_type": model_type, "vocab_size": 7}, "x/config.json")
    filled = completed(given)
    for field in SCHEMAS[model_type].fields:
        if field.default is REQUIRED:
            assert (field.name in filled) == (field.name in given), field.name
        elif field.name != "vocab_size":
            assert filled[field.name] == field.default, field.name
    assert filled["vocab_size"] == 7 and filled.path == given.path
    assert completed(filled) == filled  # twice is once


def _without(directory: Path, tmp_path: Path, *fields: str) -> Path:
    """A copy of the saved ``directory`` whose config.json leaves ``fields`` out."""
    copy = Path(shutil.copytree(directory, tmp_path / directory.name))
    config = json.loads((copy / "config.json").read_text())
    for name in fields:
        config.pop(name, None)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def test_a_phi3_config_without_rms_norm_eps_builds_norms_with_phi3s_default(
    saved: Mapping[str, tuple[Path, Any]], transformers: ModuleType, tmp_path: Path
) -> None:
    model = from_pretrained(_without(saved["phi3"][0], tmp_path, "rms_norm_eps"))
    norms = [model.norm, *(n for layer in model.layers for n in (layer.attention_norm, layer.mlp_norm))]
    assert {n.eps for n in norms} == {transformers.Phi3Config().rms_norm_eps} == {1e-5}


def test_a_mistral_config_without_sliding_window_slides_as_transformers_default_does(
    saved: Mapping[str, tuple[Path, Any]], transformers: ModuleType, tmp_path: Path
) -> None:
    model = from_pretrained(_without(saved["mistral"][0], tmp_path, "sliding_window"))
    expected = transformers.MistralConfig().sliding_window
    assert [layer.attention.window for layer in model.layers] == [expected] * len(model.layers)
    assert expected == 4096
