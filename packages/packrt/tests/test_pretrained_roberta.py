"""RoBERTa and XLM-RoBERTa directories load and compute what transformers computes.

Tiny random models saved with transformers' save_pretrained are served under ``borrowed`` and
``packed``; padded batches (left and right, pads written with the pad id as a tokenizer writes them)
must give transformers' last hidden state within 1e-4 in fp32, and bf16 checkpoints must stay as
close to the fp32 result as transformers' own bf16 run is. A sentence-transformers directory over
an XLM-RoBERTa model gives transformers' masked-mean embeddings.
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
    assert_bf16_no_farther_than_transformers,
    assert_close_on_real_tokens,
    bf16_copies,
    encoder_fields,
    padded_batch,
    save,
)

import packrt
from packrt.errors import CheckpointError, ShapeError
from packrt.models import RobertaEncoder, SentenceEncoder, from_pretrained, supported
from packrt.models.roberta import roberta_positions

VOCAB, PAD, POSITIONS = 97, 1, 40
SMALL = encoder_fields(PAD, max_position_embeddings=POSITIONS)
# model_type -> (config class, model class, extra fields): roberta with two token types exercises them
FAMILIES = {
    "roberta": ("RobertaConfig", "RobertaModel", {"type_vocab_size": 2}),
    "xlm-roberta": ("XLMRobertaConfig", "XLMRobertaModel", {"type_vocab_size": 1}),
}


@pytest.fixture(scope="module")
def saved(transformers: ModuleType, torch: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """model_type -> (directory, the fp32 transformers model saved there)."""
    torch.manual_seed(0)
    out: dict[str, Any] = {}
    for name, (config_class, model_class, extra) in FAMILIES.items():
        config = getattr(transformers, config_class)(**SMALL, **extra)
        out[name] = save(getattr(transformers, model_class)(config).eval(), tmp_path_factory.mktemp(name))
    return out


def _batch(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return padded_batch(seed, PAD)


def _reference(torch: ModuleType, model: Any, ids: np.ndarray, mask: np.ndarray, types: np.ndarray | None) -> Any:
    with torch.no_grad():
        kwargs = {"attention_mask": torch.from_numpy(mask)}
        if types is not None:
            kwargs["token_type_ids"] = torch.from_numpy(types)
        return model(torch.from_numpy(ids), **kwargs).last_hidden_state.float().numpy()


def _ours(model: Any, ids: np.ndarray, mask: np.ndarray, types: np.ndarray | None) -> np.ndarray:
    typed = None if types is None else packrt.from_numpy(types)
    out: np.ndarray = model(packrt.from_numpy(ids), packrt.from_numpy(mask), typed).to(packrt.float32).numpy()
    return out


def test_roberta_and_xlm_roberta_are_listed_as_supported() -> None:
    table = supported()
    assert table["roberta"] == ("RobertaModel",)
    assert table["xlm-roberta"] == ("XLMRobertaModel",)


def test_positions_start_after_the_pad_id_and_skip_pads(transformers: ModuleType, torch: ModuleType) -> None:
    ids, _, _ = _batch()
    ours = roberta_positions(packrt.from_numpy(ids), PAD).numpy()
    theirs = transformers.models.roberta.modeling_roberta.RobertaEmbeddings.create_position_ids_from_input_ids(
        torch.from_numpy(ids), PAD
    ).numpy()
    np.testing.assert_array_equal(ours, theirs)
    assert ours[2, 4] == PAD + 1 and ours[2, 0] == PAD  # a left-padded row starts counting at its first token


@pytest.mark.parametrize("residency", RESIDENCIES)
@pytest.mark.parametrize("name", list(FAMILIES))
def test_padded_batches_match_transformers_within_1e_4(
    saved: dict[str, Any], torch: ModuleType, name: str, residency: str
) -> None:
    directory, reference = saved[name]
    model = from_pretrained(directory, weight_residency=residency)
    assert isinstance(model, RobertaEncoder) and not model.training
    ids, mask, types = _batch()
    types = types if name == "roberta" else None  # xlm-roberta has one token type
    out = _ours(model, ids, mask, types)
    assert out.shape == (3, 12, 32)
    assert_close_on_real_tokens(out, _reference(torch, reference, ids, mask, types), mask, f"{name} under {residency}")


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_row_gives_the_same_states_alone_and_padded_in_a_batch(saved: dict[str, Any], name: str) -> None:
    model = from_pretrained(saved[name][0], weight_residency="borrowed")
    ids, mask, _ = _batch(seed=1)
    batched = _ours(model, ids, mask, None)
    alone = _ours(model, ids[2:, 4:], mask[2:, 4:], None)
    np.testing.assert_allclose(batched[2, 4:], alone[0], atol=1e-5)


# The bf16 distance from the fp32 result is the mean absolute error over the real tokens of these padded
# batches, pooled: one batch's ratio to transformers' moves by up to 0.1 from batch to batch (measured over 8).
BF16_BATCHES = (0, 1, 2, 3)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_bf16_checkpoint_is_no_farther_from_fp32_than_transformers_bf16(
    saved: dict[str, Any], torch: ModuleType, name: str, tmp_path: Path
) -> None:
    directory, reference = saved[name]
    half, models = bf16_copies(torch, reference, directory, tmp_path)
    assert all(model.embeddings.word.weight.dtype is packrt.bfloat16 for model in models.values())
    assert_bf16_no_farther_than_transformers(
        name,
        [_batch(seed)[:2] for seed in BF16_BATCHES],
        lambda model, ids, mask: _reference(torch, model, ids, mask, None),
        lambda model, ids, mask: _ours(model, ids, mask, None),
        models,
        reference,
        half,
    )


def test_a_sequence_past_the_offset_table_is_refused_naming_the_limit(saved: dict[str, Any]) -> None:
    model = from_pretrained(saved["roberta"][0])
    longest = POSITIONS - PAD - 1
    model(packrt.from_numpy(np.full((1, longest), 5, dtype=np.int64)))
    with pytest.raises(ShapeError, match=f"longer than the {longest} positions"):
        model(packrt.from_numpy(np.full((1, longest + 1), 5, dtype=np.int64)))


def test_a_pad_id_that_leaves_no_position_rows_is_refused(saved: dict[str, Any], tmp_path: Path) -> None:
    directory, _ = saved["roberta"]
    config = json.loads((directory / "config.json").read_text())
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((directory / name).read_bytes())
    (tmp_path / "config.json").write_text(json.dumps({**config, "pad_token_id": POSITIONS - 1}))
    with pytest.raises(CheckpointError, match="'pad_token_id' is 39, but RoBERTa positions start at"):
        from_pretrained(tmp_path)


def test_a_masked_lm_architecture_is_refused_naming_what_is_built(saved: dict[str, Any], tmp_path: Path) -> None:
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
    saved: dict[str, Any], torch: ModuleType, tmp_path: Path
) -> None:
    directory, reference = saved["xlm-roberta"]
    encoder = SentenceEncoder.from_pretrained(_sentence_dir(tmp_path, directory), weight_residency="borrowed")
    texts = ["w5 w9 w12 w40 w7", "w8 w3", "w60 w61 w62"]
    batch = encoder.tokenize(texts)
    ids, mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
    assert (ids[mask == 0] == PAD).all(), "padding must use the model's pad id, around which positions are numbered"
    hidden = _reference(torch, reference, ids, mask, None)
    pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    expected = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    diff = float(np.abs(encoder.encode(texts) - expected).max())
    assert diff <= 1e-5, f"sentence embeddings differ from transformers' masked mean by {diff:.2e}"
