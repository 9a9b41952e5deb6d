"""``packrt.models.describe`` is the one answer to "what is this path": every family of the tiny table, a
sentence-transformers directory and a GGUF file are described as what from_pretrained builds from them, serve's
endpoint follows the description, and a path packrt cannot serve is refused naming what it found."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from tiny_families import FAMILIES

from packrt.errors import CheckpointError
from packrt.models import CausalLM, UnsupportedModelError, describe, from_pretrained


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_family_is_described_as_what_from_pretrained_builds(
    saved: Mapping[str, tuple[Path, Any]], name: str
) -> None:
    directory = saved[name][0]
    described = describe(directory)
    family = FAMILIES[name]
    assert described.kind == ("causal-lm" if family.causal else "encoder")
    assert described.head == ("lm" if family.causal else "hidden-state")
    assert described.architecture == family.model_class
    assert described.format == "huggingface" and described.weights == directory
    model = from_pretrained(directory)
    assert type(model) is family.served_as
    assert isinstance(model, CausalLM) == (described.kind == "causal-lm")


def test_serve_gives_an_encoder_embeddings_and_a_causal_lm_completions(saved: Mapping[str, tuple[Path, Any]]) -> None:
    pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'packrt[serve]')")
    from packrt.serve.served import endpoint

    for name, family in FAMILIES.items():
        expected = "completions" if family.causal else "embeddings"
        assert endpoint(describe(saved[name][0])) == expected, name


def test_a_sentence_transformers_directory_is_an_encoder_pooled_by_its_pipeline(minilm_dir: Path) -> None:
    described = describe(minilm_dir)
    assert (described.kind, described.head, described.family.name) == ("encoder", "sentence-embedding", "bert")
    assert described.sentence_transformers
    assert described.pipeline().pooling == ("mean_tokens",) and described.pipeline().normalize


def test_a_gguf_file_is_the_causal_lm_of_its_architecture(smollm2_gguf: Path) -> None:
    pytest.importorskip("gguf", reason="the gguf extra is not installed (pip install 'packrt[gguf]')")
    described = describe(smollm2_gguf)
    assert (described.format, described.kind, described.head) == ("gguf", "causal-lm", "lm")
    assert (described.family.name, described.model_type) == ("llama", "llama")


def test_an_unknown_model_type_is_refused_listing_the_supported_ones(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "t5", "architectures": ["T5Model"]}')
    with pytest.raises(
        UnsupportedModelError, match=r"model_type 't5' is not one packrt can build; supported .*roberta"
    ):
        describe(tmp_path)


def test_a_directory_without_config_json_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"has no config\.json; a Hugging Face model directory"):
        describe(tmp_path)


def test_a_causal_lm_has_no_sentence_pipeline(saved: Mapping[str, tuple[Path, Any]]) -> None:
    described = describe(saved["gpt2"][0])
    with pytest.raises(UnsupportedModelError, match=r"is a gpt2 causal LM; sentence embeddings need an encoder"):
        described.pipeline()


def test_a_sentence_transformers_pipeline_over_a_causal_lm_pools_its_hidden_states(
    saved: Mapping[str, tuple[Path, Any]], minilm_dir: Path, tmp_path: Path
) -> None:
    # as sentence-transformers runs a decoder (Qwen3-Embedding): the Transformer step's last hidden states, pooled
    directory = tmp_path / "pipeline"
    shutil.copytree(saved["gpt2"][0], directory)
    shutil.copy(minilm_dir / "modules.json", directory / "modules.json")
    shutil.copytree(minilm_dir / "1_Pooling", directory / "1_Pooling")
    described = describe(directory)
    assert (described.kind, described.head, described.family.name) == ("causal-lm", "sentence-embedding", "gpt2")
    assert described.pipeline().pooling == ("mean_tokens",)
