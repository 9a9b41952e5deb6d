"""One copy of the weights per node: replicas serving borrowed weights add no anonymous memory for them.

The measure is taken inside each replica (``PackrtServer.memory``): anonymous bytes before the load
and after every layer was packed. ``packed`` replicas must show a full private copy each, so the
same measure is seen to count copies when there are copies.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ray import serve

import packrt
from packrt_ray.memory import ProcessMemory, file_mappings
from packrt_ray.model import ModelSource, load
from packrt_ray.serve import build_app

BORROWED_LIMIT = 0.05  # of the checkpoint, per replica


def _replica_memory(
    directory: Path, weight_residency: str, name: str, replica_answers: Any, serve_url: str
) -> tuple[int, dict[int, Any]]:
    """(checkpoint bytes, each of 2 replicas' memory report by pid) for ``directory`` served so."""
    app = build_app(
        directory, weight_residency=weight_residency, num_replicas=2, ray_actor_options={"num_cpus": 0.5}, name=name
    )
    serve.run(app, name=name, route_prefix=f"/{name}")
    try:
        handle = serve.get_app_handle(name)
        answers: dict[int, Any] = replica_answers(lambda: handle.memory.remote().result(timeout_s=180), want=2)
    finally:
        serve.delete(name)
    return (directory / "model.safetensors").stat().st_size, answers


def test_two_borrowed_replicas_each_add_at_most_5_percent_of_the_checkpoint_as_anonymous_memory(
    serve_url: str, big_bert_dir: Path, replica_answers: Any
) -> None:
    checkpoint, replicas = _replica_memory(big_bert_dir, "borrowed", "big_borrowed", replica_answers, serve_url)
    for pid, memory in replicas.items():
        assert memory["checkpoint_bytes"] == checkpoint
        assert memory["weight_residency"] == "borrowed"
        assert memory["anonymous_added"] <= BORROWED_LIMIT * checkpoint, (pid, memory["anonymous_added"])
        assert memory["report"]["packed"] == 0
        assert memory["report"]["mapped"] >= memory["report"]["borrowed"] > 0.98 * checkpoint
        (mapping,) = memory["files"]
        assert Path(mapping["path"]).name == "model.safetensors"
        assert mapping["anonymous"] == 0  # no page of the mapped checkpoint was copied
    assert len({m["hostname"] for m in replicas.values()}) == 1  # both replicas ran on this one node


def test_two_packed_replicas_each_hold_about_one_full_copy_so_the_measure_sees_copies(
    serve_url: str, big_bert_dir: Path, replica_answers: Any
) -> None:
    checkpoint, replicas = _replica_memory(big_bert_dir, "packed", "big_packed", replica_answers, serve_url)
    for pid, memory in replicas.items():
        fraction = memory["anonymous_added"] / checkpoint
        assert 0.9 <= fraction <= 1.25, (pid, fraction)
        assert memory["report"]["packed"] >= 0.98 * checkpoint


def test_a_written_page_of_a_mapped_file_counts_as_anonymous_in_that_mapping(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(64 * mmap.PAGESIZE))
    with open(path, "rb") as file:
        view = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    try:
        pages = np.frombuffer(view, dtype=np.uint8)
        int(pages[:: mmap.PAGESIZE].sum())  # read every page: resident, still shared
        (read,) = file_mappings([str(path)])
        assert read.resident == 64 * mmap.PAGESIZE
        assert read.anonymous == 0
        view[: 3 * mmap.PAGESIZE] = b"\x01" * (3 * mmap.PAGESIZE)  # copy-on-write: three private pages
        (written,) = file_mappings([str(path)])
        assert written.anonymous == 3 * mmap.PAGESIZE
        assert written.size == 64 * mmap.PAGESIZE
        del pages
    finally:
        view.close()


def test_process_memory_splits_resident_bytes_into_anonymous_and_file_backed() -> None:
    before = ProcessMemory.read()
    block = mmap.mmap(-1, 32 * 2**20, flags=mmap.MAP_PRIVATE)  # fresh private pages, outside malloc
    try:
        block[:: mmap.PAGESIZE] = b"\x01" * (32 * 2**20 // mmap.PAGESIZE)  # touch each page
        after = ProcessMemory.read()
    finally:
        block.close()
    assert after.anonymous - before.anonymous >= 31 * 2**20
    assert after.rss == after.anonymous + after.file_backed
    assert after.file_backed > 0


def test_a_loaded_model_reports_its_files_and_the_residency_it_was_loaded_with(tiny_bert_dir: Path) -> None:
    loaded = load(ModelSource.resolve(tiny_bert_dir, weight_residency="per_call"))
    loaded.model(packrt.tensor([[1, 2, 3]]))
    memory = loaded.memory()
    assert memory.weight_residency == "per_call"
    assert memory.pid == os.getpid()
    assert memory.checkpoint_bytes == (tiny_bert_dir / "model.safetensors").stat().st_size
    assert memory.as_dict()["anonymous_fraction"] == pytest.approx(memory.anonymous_fraction)
