"""RoBERTa and XLM-RoBERTa rules: positions numbered from the pad id, their limits, and sentence embeddings.

What every family must do against transformers (padded batches, bf16) is checked over all of them in
test_pretrained_matches_transformers; here: roberta's positions, a row alone and padded in a batch, the
offset table's limit, the config values refused, and a sentence-transformers directory over an XLM-RoBERTa
model giving transformers' masked-mean embeddings.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from peers import VOCAB, outputs, padded_batch, served
from tiny_families import ROBERTA_PAD as PAD

import packrt
from packrt.errors import CheckpointError, ShapeError
from packrt.models import SentenceEncoder, from_pretrained, supported
from packrt.models.roberta import roberta_positions

POSITIONS = 40  # the tiny encoders' max_position_embeddings (peers.encoder_fields)


def _batch(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return padded_batch(seed, PAD)


def test_roberta_and_xlm_roberta_are_listed_as_supported() -> None:
    table = supported()
    assert table["roberta"] == ("RobertaModel", "RobertaForSequenceClassification")
    assert table["xlm-roberta"] == ("XLMRobertaModel", "XLMRobertaForSequenceClassification")


def test_positions_start_after_the_pad_id_and_skip_pads(transformers: ModuleType, torch: ModuleType) -> None:
    ids, _, _ = _batch()
    ours = roberta_positions(packrt.from_numpy(ids), PAD).numpy()
    theirs = transformers.models.roberta.modeling_roberta.RobertaEmbeddings.create_position_ids_from_input_ids(
        torch.from_numpy(ids), PAD
    ).numpy()
    np.testing.assert_array_equal(ours, theirs)
    assert ours[2, 4] == PAD + 1 and ours[2, 0] == PAD  # a left-padded row starts counting at its first token


@pytest.mark.parametrize("name", ["roberta", "xlm-roberta"])
def test_a_row_gives_the_same_states_alone_and_padded_in_a_batch(saved: Any, name: str) -> None:
    model = from_pretrained(saved[name][0], weight_residency="borrowed")
    ids, mask, _ = _batch(seed=1)
    batched = served(model, ids, mask)
    alone = served(model, ids[2:, 4:], mask[2:, 4:])
    np.testing.assert_allclose(batched[2, 4:], alone[0], atol=1e-5)


def test_a_sequence_past_the_offset_table_is_refused_naming_the_limit(saved: Any) -> None:
    model = from_pretrained(saved["roberta"][0])
    longest = POSITIONS - PAD - 1
    model(packrt.from_numpy(np.full((1, longest), 5, dtype=np.int64)))
    with pytest.raises(ShapeError, match=f"longer than the {longest} positions"):
        model(packrt.from_numpy(np.full((1, longest + 1), 5, dtype=np.int64)))


def test_a_pad_id_that_leaves_no_position_rows_is_refused(saved: Any, tmp_path: Path) -> None:
    directory, _ = saved["roberta"]
    config = json.loads((directory / "config.json").read_text())
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((directory / name).read_bytes())
    (tmp_path / "config.json").write_text(json.dumps({**config, "pad_token_id": POSITIONS - 1}))
    with pytest.raises(CheckpointError, match="'pad_token_id' is 39, but RoBERTa positions start at"):
        from_pretrained(tmp_path)


def test_a_masked_lm_architecture_is_refused_naming_what_is_built(saved: Any, tmp_path: Path) -> None:
    directory, _ = saved["xlm-roberta"]
    config = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "architectures": ["XLMRobertaForMaskedLM"]}))
    with pytest.raises(CheckpointError, match=r"'XLMRobertaForMaskedLM'.*builds XLMRobertaModel"):
        from_pretrained(tmp_path)


def _sentence_dir(directory: Path, source: Path) -> Path:
    """A sentence-transformers layout (Transformer, mean Pooling, Normalize) over the model at ``source``."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<s>", "<pad>", "</s>"] + [f"w{i}" for i in range(3, VOCAB)]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w3"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    for name in ("config.json", "model.safetensors"):
        (directory / name).write_bytes((source / name).read_bytes())
    tokenizer.save(str(directory / "tokenizer.json"))
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    return directory


def test_sentence_encoder_over_xlm_roberta_pads_with_the_model_pad_id_and_matches_mean_pooling(
    saved: Any, torch: ModuleType, tmp_path: Path
) -> None:
    directory, reference = saved["xlm-roberta"]
    encoder = SentenceEncoder.from_pretrained(_sentence_dir(tmp_path, directory), weight_residency="borrowed")
    texts = ["w5 w9 w12 w40 w7", "w8 w3", "w60 w61 w62"]
    batch = encoder.tokenize(texts)
    ids, mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
    assert (ids[mask == 0] == PAD).all(), "padding must use the model's pad id, around which positions are numbered"
    hidden = outputs(torch, reference, ids, mask)
    pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    expected = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    diff = float(np.abs(encoder.encode(texts) - expected).max())
    assert diff <= 1e-5, f"sentence embeddings differ from transformers' masked mean by {diff:.2e}"
