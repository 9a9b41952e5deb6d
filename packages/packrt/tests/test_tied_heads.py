"""An LM head is tied to the embedding as transformers 5 ties it: only when the checkpoint stores no head.

A config.json that says ``tie_word_embeddings: true`` beside a file holding ``lm_head.weight`` is served with
the file's head (transformers serves it, warning that it does not tie), and ``check_pretrained`` reads the
file the same way; a file without a head keeps the embedding as its head.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from peers import assert_close_on_real_tokens
from tiny_families import causal_batch

import packrt
from packrt.models import from_pretrained
from packrt.models.pretrained import check_pretrained

# the untied rows of tiny_families: their files hold lm_head.weight with values of its own
UNTIED = ("llama", "qwen2", "mistral", "qwen3", "gemma3", "phi3", "ministral", "smollm3", "granite", "gemma2", "olmo2")
TIED = ("llama-tied", "qwen3-tied", "phi3-tied", "smollm3-tied")  # saved tied: no lm_head.weight in the file


def _saying_tied(directory: Path, tmp_path: Path) -> Path:
    copy = Path(shutil.copytree(directory, tmp_path / directory.name))
    config = json.loads((copy / "config.json").read_text())
    config["tie_word_embeddings"] = True
    (copy / "config.json").write_text(json.dumps(config))
    return copy


@pytest.mark.parametrize("name", UNTIED)
def test_a_config_saying_tied_beside_a_stored_head_serves_the_files_head_as_transformers_does(
    saved: Mapping[str, tuple[Path, Any]], transformers: ModuleType, torch: ModuleType, tmp_path: Path, name: str
) -> None:
    directory = _saying_tied(saved[name][0], tmp_path)
    ours = from_pretrained(directory)
    assert ours.lm_head.weight is not ours.embed.weight
    reference = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    ids, mask = causal_batch(3)
    with torch.no_grad():
        theirs = reference(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    got = ours(packrt.from_numpy(ids), packrt.from_numpy(mask)).numpy()
    assert_close_on_real_tokens(got, theirs, mask, f"{name} tied by config, head in the file")
    report = check_pretrained(directory)
    assert report.matches, (report.missing_keys, report.unexpected_keys, report.mismatched)


@pytest.mark.parametrize("name", TIED)
def test_a_file_without_a_head_is_served_with_the_embedding_as_its_head(
    saved: Mapping[str, tuple[Path, Any]], name: str
) -> None:
    model = from_pretrained(saved[name][0])
    assert model.lm_head.weight is model.embed.weight
    assert check_pretrained(saved[name][0]).matches
