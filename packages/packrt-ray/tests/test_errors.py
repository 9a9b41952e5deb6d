"""Each bad input raises a specific packrt error that names the thing, what was expected, and the fix."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from packrt.errors import CheckpointError, DTypeError, PackrtError, ResidencyError
from packrt_ray import BatchColumnError, ModelDirectoryError, ModelKindError, RequestError
from packrt_ray.data import ModelBatchMapper, map_model
from packrt_ray.model import ModelSource
from packrt_ray.serve import PackrtServer, build_app


def test_a_missing_directory_raises_model_directory_error_in_the_driver(
    ray_cluster: ModuleType, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-model"
    dataset = ray_cluster.data.from_items([{"text": "a"}])
    pattern = r"model directory '.*no-such-model' does not exist .* every Ray node can read"
    with pytest.raises(ModelDirectoryError, match=pattern):
        map_model(dataset, missing)
    with pytest.raises(ModelDirectoryError, match=pattern):
        build_app(missing)
    with pytest.raises(FileNotFoundError, match=pattern):  # the builtin a Python user would catch
        ModelBatchMapper(missing)


def test_a_relative_directory_is_made_absolute_for_the_workers(tiny_bert_dir: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tiny_bert_dir.parent)
    source = ModelSource.resolve(tiny_bert_dir.name)
    assert source.path == str(tiny_bert_dir)
    assert source.kind == "encoder"


def test_a_directory_that_holds_no_model_raises_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"has neither modules.json .* nor config.json"):
        ModelSource.resolve(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "t5"}')
    with pytest.raises(CheckpointError, match=r"model_type 't5' is not one packrt serves; expected one of .*bert"):
        ModelSource.resolve(tmp_path)


def test_an_unknown_residency_raises_residency_error_naming_the_known_ones(tiny_bert_dir: Path) -> None:
    with pytest.raises(ResidencyError, match=r"weight_residency 'shared' .* expected one of packed, borrowed"):
        build_app(tiny_bert_dir, weight_residency="shared")


def test_a_batch_without_the_input_column_raises_batch_column_error_naming_its_columns(tiny_bert_dir: Path) -> None:
    mapper = ModelBatchMapper(tiny_bert_dir)
    with pytest.raises(
        BatchColumnError, match=r"no column 'input_ids' \(its columns: \['ids', 'label'\]\).*input_column="
    ):
        mapper({"ids": np.array([[1, 2]]), "label": np.array(["x"])})
    with pytest.raises(KeyError):
        mapper({"ids": np.array([[1, 2]])})


def test_a_dataset_whose_schema_lacks_the_column_fails_before_it_runs(
    ray_cluster: ModuleType, minilm_dir: Path
) -> None:
    dataset = ray_cluster.data.from_items([{"sentence": "a"}, {"sentence": "b"}])
    materialized = dataset.materialize()  # its schema is known without running anything more
    with pytest.raises(BatchColumnError, match=r"no column 'text' \(its columns: \['sentence'\]\)"):
        map_model(materialized, minilm_dir)


def test_a_column_of_the_wrong_kind_of_values_raises_dtype_error(tiny_bert_dir: Path, minilm_dir: Path) -> None:
    with pytest.raises(DTypeError, match=r"column 'input_ids' row 0 holds float64 .* expected a 1-D list of integer"):
        ModelBatchMapper(tiny_bert_dir)({"input_ids": np.array([[0.5, 1.5]])})
    with pytest.raises(DTypeError, match=r"column 'input_ids' holds one int64 value per row"):
        ModelBatchMapper(tiny_bert_dir)({"input_ids": np.array([1, 2, 3])})
    with pytest.raises(DTypeError, match=r"column 'text' holds a int \(3\), expected a string per row"):
        ModelBatchMapper(minilm_dir)({"text": np.array(["a", 3], dtype=object)})


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_a_route_the_model_kind_cannot_serve_raises_model_kind_error(
    ray_cluster: ModuleType, minilm_dir: Path, tiny_llama_dir: Path
) -> None:
    encoder = PackrtServer(ModelSource.resolve(minilm_dir))
    with pytest.raises(ModelKindError, match=r"the generate route needs a causal-lm model, but .* sentence-encoder"):
        _run(encoder.generate([[1, 2]], 2))
    llama = PackrtServer(ModelSource.resolve(tiny_llama_dir))
    with pytest.raises(ModelKindError, match=r"the embed route needs a sentence-encoder model, .* modules.json"):
        _run(llama.embed(["a text"]))
    with pytest.raises(TypeError):  # the builtin a Python user would catch
        _run(llama.embed(["a text"]))


@pytest.mark.parametrize(
    ("input_ids", "max_new_tokens", "pattern"),
    [
        ([[1, 2]], 999, r"max_new_tokens must be an int from 0 to 256 .* deploy with a larger max_new_tokens"),
        ([[1, 2]], "3", r"max_new_tokens must be an int from 0 to 256 .* got '3'"),
        ([], 3, r"input_ids must be a list of prompts .* send \{\"input_ids\": \[\[1, 2, 3\]\]"),
        ([[1, -2]], 3, r"input_ids\[0\] must hold token ids \(ints >= 0\)"),
        ([[1, 2], [500]], 3, r"input_ids\[1\] holds id 500, beyond the vocabulary of 128"),
    ],
)
def test_a_malformed_generate_request_raises_request_error(
    ray_cluster: ModuleType, tiny_llama_dir: Path, input_ids: Any, max_new_tokens: Any, pattern: str
) -> None:
    server = PackrtServer(ModelSource.resolve(tiny_llama_dir))
    with pytest.raises(RequestError, match=pattern):
        _run(server.generate(input_ids, max_new_tokens))


def test_an_eos_id_beyond_the_vocabulary_raises_request_error(ray_cluster: ModuleType, tiny_llama_dir: Path) -> None:
    server = PackrtServer(ModelSource.resolve(tiny_llama_dir))
    with pytest.raises(RequestError, match=r"eos_token_id holds id 500, beyond the vocabulary of 128"):
        _run(server.generate([[1, 2]], 3, 500))


def test_every_packrt_ray_error_is_a_packrt_error_and_a_builtin() -> None:
    assert issubclass(ModelDirectoryError, CheckpointError)
    assert issubclass(ModelDirectoryError, FileNotFoundError)
    assert issubclass(ModelKindError, TypeError)
    assert issubclass(BatchColumnError, KeyError)
    assert issubclass(RequestError, ValueError)
    for error in (ModelDirectoryError, ModelKindError, BatchColumnError, RequestError):
        assert issubclass(error, PackrtError)


def test_a_prompt_past_the_models_positions_raises_request_error(ray_cluster: ModuleType, tiny_gpt2_dir: Path) -> None:
    server = PackrtServer(ModelSource.resolve(tiny_gpt2_dir))
    with pytest.raises(
        RequestError, match=r"input_ids\[0\]: 30 prompt tokens \+ 5 new ones exceed the model's 32 positions"
    ):
        _run(server.generate([list(range(30))], 5))
