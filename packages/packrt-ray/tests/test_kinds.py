"""Ray and ``packrt serve`` treat a directory as the same kind of model: both ask ``packrt.models.describe``.

Every family of packrt's tiny family table (packages/packrt/tests/tiny_families.py, roberta and xlm-roberta
included) is saved once and resolved the way a Ray job resolves it in the driver: no cluster is started.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

from packrt.models import describe
from packrt_ray.model import ModelSource, kind_of

# packrt's own test folder holds the family table (and the helpers it imports): one table for both packages.
_PACKRT_TESTS = Path(__file__).resolve().parents[2] / "packrt" / "tests"
if str(_PACKRT_TESTS) not in sys.path:
    sys.path.insert(0, str(_PACKRT_TESTS))

from tiny_families import FAMILIES, SavedFamilies  # noqa: E402

RAY_FOR_SERVE = {"embeddings": ("encoder", "sentence-encoder"), "completions": ("causal-lm",)}


@pytest.fixture(scope="module")
def saved(transformers: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> SavedFamilies:
    import torch

    return SavedFamilies(transformers, torch, tmp_path_factory)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_ray_and_serve_give_every_family_the_same_kind(saved: SavedFamilies, name: str) -> None:
    pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'packrt[serve]')")
    from packrt.serve.served import endpoint

    directory = saved[name][0]
    described = describe(directory)
    ray_kind = ModelSource.resolve(directory).kind
    assert ray_kind == kind_of(directory) == described.kind
    assert ray_kind in RAY_FOR_SERVE[endpoint(described)]
    assert (ray_kind == "causal-lm") == FAMILIES[name].causal  # the table's own answer, by the class it builds


def test_a_sentence_transformers_directory_is_a_sentence_encoder_for_ray_and_embeddings_for_serve(
    minilm_dir: Path,
) -> None:
    pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'packrt[serve]')")
    from packrt.serve.served import endpoint

    assert ModelSource.resolve(minilm_dir).kind == "sentence-encoder"
    assert endpoint(describe(minilm_dir)) == "embeddings"


def test_a_cross_encoder_is_refused_in_the_driver_naming_where_it_is_served(
    transformers: ModuleType, tmp_path: Path
) -> None:
    from packrt.models import UnsupportedModelError

    config = transformers.BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, num_labels=1
    )
    transformers.BertForSequenceClassification(config).save_pretrained(str(tmp_path))
    with pytest.raises(UnsupportedModelError, match=r"a cross-encoder reranker\); packrt-ray serves embeddings"):
        ModelSource.resolve(tmp_path)
