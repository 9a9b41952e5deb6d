"""Each bad input raises a specific packrt error that names the thing, what was expected, and the fix."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from packrt.errors import CheckpointError, DTypeError, PackrtError, ResidencyError
from packrt.serve import LimitsError
from packrt_ray import BatchColumnError, ModelDirectoryError, ModelKindError, RequestError
from packrt_ray.data import ModelBatchMapper, map_model
from packrt_ray.model import ModelSource
from packrt_ray.serve import app_builder, build_app


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
    # the refusals from_pretrained and packrt serve give the same directory (packrt.models.describe)
    with pytest.raises(CheckpointError, match=r"has no config\.json; a Hugging Face model directory"):
        ModelSource.resolve(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "t5"}')
    with pytest.raises(CheckpointError, match=r"model_type 't5' is not one packrt can build; supported .*bert"):
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


def test_app_builder_refuses_args_without_a_path_naming_the_fix() -> None:
    with pytest.raises(RequestError, match=r"app_builder needs a dict with the model directory as 'path'.*serve run"):
        app_builder({"num_replicas": 1})
    with pytest.raises(ValueError, match=r"got \{\}"):  # the builtin a Python user would catch
        app_builder({})


def test_a_bad_limit_or_option_is_refused_in_the_driver_naming_it(minilm_dir: Path) -> None:
    with pytest.raises(
        RequestError, match=r"limits: unknown field\(s\) max_texts; ServeLimits has .*max_texts_per_request"
    ):
        build_app(minilm_dir, limits={"max_texts": 3})
    with pytest.raises(RequestError, match=r"limits.max_texts_per_request must be a number, got 'many'"):
        app_builder({"path": str(minilm_dir), "max_texts_per_request": "many"})
    with pytest.raises(LimitsError, match=r"ServeLimits.max_queued_requests must be a positive number, got 0"):
        app_builder({"path": str(minilm_dir), "limits": {"max_queued_requests": 0}})
    with pytest.raises(RequestError, match=r"deployment option num_replicas must be a number, got 'two'"):
        app_builder({"path": str(minilm_dir), "num_replicas": "two"})


def test_every_packrt_ray_error_is_a_packrt_error_and_a_builtin() -> None:
    assert issubclass(ModelDirectoryError, CheckpointError)
    assert issubclass(ModelDirectoryError, FileNotFoundError)
    assert issubclass(ModelKindError, TypeError)
    assert issubclass(BatchColumnError, KeyError)
    assert issubclass(RequestError, ValueError)
    for error in (ModelDirectoryError, ModelKindError, BatchColumnError, RequestError):
        assert issubclass(error, PackrtError)
