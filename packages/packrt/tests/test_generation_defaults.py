"""generate reads its defaults from generation_config.json (else config.json) as transformers does; arguments win.

A tiny random llama is saved with save_pretrained, then its generation_config.json is rewritten with the
eos ids, pad id and lengths under test; transformers 5.23 loads the same directory, and both generate with
no arguments (or the same arguments) from the same left-padded batch: the tokens must be identical. A
file holding a value generate cannot use is refused at load, naming the file and the field, before
anything is built.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from peers import SMALL, save, tiny_model

import packrt
from packrt.models import CausalLM, from_pretrained
from packrt.models.generation_defaults import GenerationConfigError

VOCAB, POSITIONS = 97, 40


@pytest.fixture(scope="module")
def saved(transformers: ModuleType, torch: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama directory (no eos/pad in config.json), saved once; tests copy what they change."""
    torch.manual_seed(0)
    fields = {**SMALL, "vocab_size": VOCAB, "max_position_embeddings": POSITIONS}
    directory, _ = save(
        tiny_model(transformers, "LlamaConfig", "LlamaForCausalLM", **fields), tmp_path_factory.mktemp("llama")
    )
    return directory


def _variant(saved: Path, where: Path, generation: dict[str, Any] | None, **config: Any) -> Path:
    """A copy of ``saved`` with ``generation`` as generation_config.json (None: no such file) and ``config`` set."""
    where.mkdir()
    (where / "model.safetensors").symlink_to(saved / "model.safetensors")
    values = json.loads((saved / "config.json").read_text())
    (where / "config.json").write_text(json.dumps({**values, **config}))
    if generation is not None:
        (where / "generation_config.json").write_text(json.dumps(generation))
    return where


def _batch(length: int = 6) -> tuple[np.ndarray, np.ndarray]:
    ids = np.random.default_rng(1).integers(1, VOCAB, (2, length)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, :2], ids[1, :2] = 0, 0
    return ids, mask


def _both(transformers: ModuleType, torch: ModuleType, directory: Path, **kwargs: Any) -> tuple[np.ndarray, Any]:
    """packrt's and transformers' generate of the same batch from ``directory`` with ``kwargs`` (ours, theirs)."""
    ids, mask = _batch(kwargs.pop("length", 6))
    model = from_pretrained(directory)
    assert isinstance(model, CausalLM)
    ours = model.generate(packrt.from_numpy(ids), attention_mask=packrt.from_numpy(mask), **kwargs).numpy()
    reference = transformers.LlamaForCausalLM.from_pretrained(directory).eval()
    with torch.no_grad():
        theirs = reference.generate(
            torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), do_sample=False, **kwargs
        ).numpy()
    return ours, theirs


def _emitted(saved: Path) -> tuple[int, int]:
    """Two tokens the first row emits early without any eos (its 3rd and 5th new tokens)."""
    ids, mask = _batch()
    model = from_pretrained(saved)
    free = model.generate(packrt.from_numpy(ids), 8, attention_mask=packrt.from_numpy(mask), eos_token_id=None).numpy()
    return int(free[0, 8]), int(free[0, 10])


def test_eos_pad_and_max_new_tokens_come_from_generation_config_json_as_in_transformers(
    saved: Path, transformers: ModuleType, torch: ModuleType, tmp_path: Path
) -> None:
    eos = list(_emitted(saved))
    directory = _variant(saved, tmp_path / "m", {"eos_token_id": eos, "pad_token_id": 3, "max_new_tokens": 12})
    ours, theirs = _both(transformers, torch, directory)
    np.testing.assert_array_equal(ours, theirs)
    assert ours.shape == (2, 6 + 12), "the second row never meets an eos: the file's 12 tokens are made"
    assert np.isin(ours[0, 6:9], eos).any(), "the first row stops at an eos id from the file"
    assert 3 in ours[0, 6:].tolist(), "the ended row is continued with the file's pad id"


def test_max_length_counts_the_prompt_and_max_new_tokens_wins_over_it(
    saved: Path, transformers: ModuleType, torch: ModuleType, tmp_path: Path
) -> None:
    directory = _variant(saved, tmp_path / "length", {"max_length": 9})
    ours, theirs = _both(transformers, torch, directory)
    assert ours.shape == (2, 9)
    np.testing.assert_array_equal(ours, theirs)
    both = _variant(saved, tmp_path / "both", {"max_length": 30, "max_new_tokens": 4})
    ours, theirs = _both(transformers, torch, both)
    assert ours.shape == (2, 10)
    np.testing.assert_array_equal(ours, theirs)


def test_without_a_length_20_tokens_are_made_no_further_than_the_models_positions(
    saved: Path, transformers: ModuleType, torch: ModuleType, tmp_path: Path
) -> None:
    directory = _variant(saved, tmp_path / "none", {})
    ours, theirs = _both(transformers, torch, directory)
    assert ours.shape == (2, 6 + 20)
    np.testing.assert_array_equal(ours, theirs)
    ours, theirs = _both(transformers, torch, directory, length=30)
    assert ours.shape == (2, POSITIONS)
    np.testing.assert_array_equal(ours, theirs)


def test_without_generation_config_json_the_ids_of_config_json_are_the_defaults(
    saved: Path, transformers: ModuleType, torch: ModuleType, tmp_path: Path
) -> None:
    first, _ = _emitted(saved)
    directory = _variant(saved, tmp_path / "bare", None, eos_token_id=first, pad_token_id=5)
    ours, theirs = _both(transformers, torch, directory, max_new_tokens=8)
    np.testing.assert_array_equal(ours, theirs)
    assert ours[0, 8] == first and ours[0, 9] == 5


def test_a_generation_config_json_takes_the_place_of_config_json_ids(
    saved: Path, transformers: ModuleType, torch: ModuleType, tmp_path: Path
) -> None:
    first, second = _emitted(saved)
    # config.json's pad id is not used once the file exists: the ended row gets the file's first eos
    directory = _variant(saved, tmp_path / "m", {"eos_token_id": [second, first]}, eos_token_id=1, pad_token_id=5)
    ours, theirs = _both(transformers, torch, directory, max_new_tokens=8)
    np.testing.assert_array_equal(ours, theirs)
    assert ours[0, 9] == second


def test_an_argument_given_wins_over_the_file_none_included(
    saved: Path, transformers: ModuleType, torch: ModuleType, tmp_path: Path
) -> None:
    first, second = _emitted(saved)
    directory = _variant(saved, tmp_path / "m", {"eos_token_id": first, "pad_token_id": 3, "max_new_tokens": 12})
    ours, theirs = _both(transformers, torch, directory, eos_token_id=None, max_new_tokens=7)
    assert ours.shape == (2, 13)  # no eos stops it, and 7 tokens, not the file's 12
    np.testing.assert_array_equal(ours, theirs)
    ours, theirs = _both(transformers, torch, directory, eos_token_id=second, pad_token_id=4, max_new_tokens=8)
    np.testing.assert_array_equal(ours, theirs)
    assert ours[0, 10] == second and ours[0, 11] == 4


def test_a_prompt_that_fills_max_length_is_refused_as_transformers_refuses_it(saved: Path, tmp_path: Path) -> None:
    model = from_pretrained(_variant(saved, tmp_path / "m", {"max_length": 5}))
    ids, _ = _batch()
    with pytest.raises(ValueError, match=r"a prompt of 6 tokens leaves no room under max_length = 5 .*pass max_new"):
        model.generate(packrt.from_numpy(ids))
    assert model.generate(packrt.from_numpy(ids), 2).shape == (2, 8)


BAD = [
    ({"eos_token_id": "2"}, "eos_token_id", "'2'"),
    ({"eos_token_id": [1, -2]}, "eos_token_id", "[1, -2]"),
    ({"pad_token_id": VOCAB}, "pad_token_id", f"{VOCAB}"),
    ({"eos_token_id": [1, True]}, "eos_token_id", "[1, True]"),
    ({"pad_token_id": [1, 2]}, "pad_token_id", "[1, 2]"),
    ({"pad_token_id": -1}, "pad_token_id", "-1"),
    ({"max_new_tokens": 0}, "max_new_tokens", "0"),
    ({"max_length": 2.5}, "max_length", "2.5"),
]


@pytest.mark.parametrize(("generation", "field", "shown"), BAD)
def test_a_field_generate_cannot_use_is_refused_at_load_naming_file_and_field_before_building(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, generation: dict[str, Any], field: str, shown: str
) -> None:
    directory = _variant(saved, tmp_path / "m", generation)
    monkeypatch.setattr(packrt, "meta_init", lambda: pytest.fail("a model was declared before the check"))
    with pytest.raises(GenerationConfigError, match=rf"generation_config\.json': field '{field}' is ") as info:
        from_pretrained(directory)
    assert shown in str(info.value) and "fix generation_config.json" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_generation_config_json_that_is_not_an_object_is_refused(saved: Path, tmp_path: Path) -> None:
    directory = _variant(saved, tmp_path / "m", None)
    (directory / "generation_config.json").write_text("[1, 2]")
    with pytest.raises(GenerationConfigError, match=r"generation_config\.json' holds a list, expected a JSON object"):
        from_pretrained(directory)


def test_an_eos_id_past_the_vocabulary_is_left_out_as_it_can_never_be_produced(
    saved: Path, transformers: ModuleType, torch: ModuleType, tmp_path: Path
) -> None:
    first, _ = _emitted(saved)
    # GPT-2's 50256 kept in a small model's files: transformers warns and generates on; so does packrt
    directory = _variant(saved, tmp_path / "m", {"eos_token_id": [50256, first], "pad_token_id": 0})
    model = from_pretrained(directory)
    assert model.generation_defaults is not None and model.generation_defaults.eos_token_ids == (first,)
    ours, theirs = _both(transformers, torch, directory, max_new_tokens=8)
    np.testing.assert_array_equal(ours, theirs)
