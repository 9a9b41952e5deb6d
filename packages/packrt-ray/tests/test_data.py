"""Ray Data: map_batches over packrt models gives what one process gives, row for row."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import packrt
from packrt.models import SentenceEncoder, from_pretrained
from packrt_ray.data import ModelBatchMapper, map_model
from packrt_ray.model import cpus_assigned


def _texts(count: int) -> list[str]:
    topics = ["the weather today", "a cat on the mat", "stock markets fell", "rain over the hills", "a new phone"]
    return [f"sentence {i}: {topics[i % len(topics)]} " + "and more " * (i % 7) for i in range(count)]


def test_ray_data_embeddings_equal_a_single_process_encode(ray_cluster: ModuleType, minilm_dir: Path) -> None:
    texts = _texts(96)  # three batches over two actors: sized to stay quick on a loaded machine
    dataset = ray_cluster.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
    mapped = map_model(
        dataset, minilm_dir, compute=ray_cluster.data.ActorPoolStrategy(size=2), batch_size=32, num_cpus=1
    )
    rows = sorted(mapped.take_all(), key=lambda row: row["id"])
    assert [row["text"] for row in rows] == texts  # every input column comes back, every row once
    got = np.stack([row["embedding"] for row in rows])
    expected = SentenceEncoder.from_pretrained(minilm_dir, weight_residency="borrowed").encode(texts)
    assert got.shape == (96, 384)
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5)


@pytest.mark.parametrize(("fixture", "column"), [("tiny_bert_dir", "hidden"), ("tiny_llama_dir", "logits")])
def test_token_rows_of_different_lengths_map_as_each_row_alone(
    ray_cluster: ModuleType, request: pytest.FixtureRequest, fixture: str, column: str
) -> None:
    directory: Path = request.getfixturevalue(fixture)
    prompts = [[1 + (i * 7 + j) % 90 for j in range(1 + i % 6)] for i in range(40)]
    dataset = ray_cluster.data.from_items([{"id": i, "input_ids": p} for i, p in enumerate(prompts)])
    rows = sorted(map_model(dataset, directory, batch_size=16, num_cpus=1).take_all(), key=lambda row: row["id"])
    model = from_pretrained(directory, weight_residency="borrowed")
    for prompt, row in zip(prompts, rows, strict=True):
        alone = np.asarray(model(packrt.tensor([prompt])).numpy())[0]
        assert row[column].shape == alone.shape
        np.testing.assert_allclose(row[column], alone, rtol=0, atol=2e-5)


def test_rows_of_one_length_map_to_one_2d_tensor_per_row(ray_cluster: ModuleType, tiny_bert_dir: Path) -> None:
    dataset = ray_cluster.data.from_items([{"input_ids": [5, 6, 7, 8]} for _ in range(10)])
    rows = map_model(dataset, tiny_bert_dir, output_column="vectors", batch_size=4, num_cpus=1).take_all()
    expected = np.asarray(from_pretrained(tiny_bert_dir)(packrt.tensor([[5, 6, 7, 8]])).numpy())[0]
    assert len(rows) == 10
    for row in rows:
        np.testing.assert_allclose(row["vectors"], expected, rtol=0, atol=2e-5)


def test_the_mapper_loads_borrowed_by_default_and_keeps_every_column(tiny_bert_dir: Path) -> None:
    mapper = ModelBatchMapper(tiny_bert_dir)
    batch = {"input_ids": np.array([[1, 2, 3], [4, 5, 6]]), "label": np.array(["a", "b"])}
    out = mapper(batch)
    assert set(out) == {"input_ids", "label", "hidden"}
    assert out["hidden"].shape == (2, 3, 32)
    assert mapper.source.weight_residency == "borrowed"
    totals = mapper.memory().report
    assert totals["packed"] == 0
    assert totals["borrowed"] > 0


def test_a_mapper_actor_runs_packrt_on_the_cpus_ray_gave_it(ray_cluster: ModuleType, tiny_bert_dir: Path) -> None:
    @ray_cluster.remote(num_cpus=1)
    class Probe:
        def __init__(self, directory: str) -> None:
            self.mapper = ModelBatchMapper(directory)

        def threads(self) -> tuple[int | None, int]:
            return cpus_assigned(), packrt.get_num_threads()

    probe = Probe.remote(str(tiny_bert_dir))  # type: ignore[attr-defined]
    assert ray_cluster.get(probe.threads.remote(), timeout=180) == (1, 1)
    ray_cluster.kill(probe)
    assert cpus_assigned() is None, "the driver is no Ray worker: its threads are left as they are"


def test_map_model_returns_rows_in_input_order_by_default(ray_cluster: ModuleType, tiny_encoder_dir: Path) -> None:
    texts = _texts(24)
    dataset = ray_cluster.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
    # Two actors and batches of 2 rows: twelve batches finishing in whatever order the actors take.
    pool = ray_cluster.data.ActorPoolStrategy(size=2)
    mapped = map_model(dataset, tiny_encoder_dir, compute=pool, batch_size=2, num_cpus=0.5)
    assert mapped.context.execution_options.preserve_order
    assert [row["id"] for row in mapped.take_all()] == list(range(24))


def test_preserve_order_false_leaves_the_datasets_context_as_it_was(
    ray_cluster: ModuleType, tiny_encoder_dir: Path
) -> None:
    dataset = ray_cluster.data.from_items([{"text": t} for t in _texts(4)])
    dataset.context.execution_options.preserve_order = False
    mapped = map_model(dataset, tiny_encoder_dir, preserve_order=False, batch_size=2)
    assert not mapped.context.execution_options.preserve_order
    assert sorted(row["text"] for row in mapped.take_all()) == sorted(_texts(4))
