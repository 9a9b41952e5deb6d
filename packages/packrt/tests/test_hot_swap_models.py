"""Hot swap on a served model: forwards of a llama running while ``load_checkpoint`` swaps its weights see
one version for the whole forward, never a mixture and never a raise; and a model from ``from_pretrained``
checks the mapped files it serves from before each call, as one from ``load_checkpoint`` does."""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoints import LLAMA, random_weights, write_checkpoint

import packrt
from packrt import io
from packrt.errors import CheckpointError
from packrt.models import from_pretrained

STRESS_SECONDS = float(os.environ.get("PACKRT_STRESS_SECONDS", "4"))
IDS = packrt.tensor([[1, 5, 9, 2, 7, 3]])


def _checkpoints(tmp_path: Path) -> dict[str, Path]:
    """Version A and B of one llama, each saved by packrt under the model's own names."""
    files = {}
    for name, seed in (("A", 0), ("B", 1)):
        directory = write_checkpoint(tmp_path / name, LLAMA, random_weights(LLAMA, seed=seed))
        files[name] = io.save_checkpoint(from_pretrained(directory), tmp_path / f"{name}.safetensors")
    return files


def _logits(model: Any) -> bytes:
    return bytes(model(IDS).numpy().tobytes())


def test_llama_forwards_see_one_version_while_load_checkpoint_swaps_its_weights(tmp_path: Path) -> None:
    files = _checkpoints(tmp_path)
    references: dict[bytes, str] = {}
    for (name, path), residency in itertools.product(files.items(), ("packed", "borrowed", "per_call")):
        quiet = from_pretrained(tmp_path / "A", weight_residency=residency)
        io.load_checkpoint(quiet, path, weight_residency=residency, progress=False)
        references[_logits(quiet)] = name
    model = from_pretrained(tmp_path / "A", weight_residency="borrowed")
    loads = [
        {"weight_residency": "packed", "pack": True},
        {"weight_residency": "borrowed"},
        {"weight_residency": "per_call", "assign": False},
        {"weight_residency": "packed"},
        {"weight_residency": "borrowed", "assign": False},
    ]
    steps = [
        (lambda path=path, options=options: io.load_checkpoint(model, path, progress=False, **options))
        for options, path in zip(loads, itertools.cycle((files["B"], files["A"])), strict=False)
    ]
    seen: Counter[str] = Counter()
    errors: list[BaseException] = []
    stop = threading.Event()
    swaps = [0]

    def serve() -> None:
        while not stop.is_set():
            try:
                seen[references.get(_logits(model), "mixed")] += 1
            except Exception as err:  # every exception a forward raises is a failure here
                errors.append(err)

    def swap() -> None:
        for step in itertools.cycle(steps):
            if stop.is_set():
                return
            step()
            swaps[0] += 1

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=serve) for _ in range(4)] + [threading.Thread(target=swap)]
        for t in threads:
            t.start()
        time.sleep(STRESS_SECONDS)
        stop.set()
        for t in threads:
            t.join(30)
    finally:
        sys.setswitchinterval(previous)
    assert not any(t.is_alive() for t in threads), "a forward or the swapper hung"
    assert swaps[0] > 0 and seen["A"] + seen["B"] > 0, f"nothing ran: {swaps[0]} swaps, outputs {dict(seen)}"
    assert seen["mixed"] == 0 and not errors, f"{dict(seen)} over {swaps[0]} swaps; errors {errors[:3]}"


@pytest.mark.parametrize("residency", ["borrowed", "packed"])
def test_a_from_pretrained_model_names_its_file_truncated_under_it_at_the_next_call(
    tmp_path: Path, residency: str
) -> None:
    directory = write_checkpoint(tmp_path / "model", LLAMA)
    model = from_pretrained(directory, weight_residency=residency)
    model(IDS)
    os.truncate(directory / "model.safetensors", 100)
    with pytest.raises(CheckpointError, match=r"model\.safetensors': the memory-mapped file .* shrank from \d+ to 100"):
        model(IDS)


def test_a_from_pretrained_model_cast_on_load_watches_no_file(tmp_path: Path) -> None:
    directory = write_checkpoint(tmp_path / "model", LLAMA)
    model = from_pretrained(directory, dtype="float64")  # every weight a copy: the file serves nothing
    expected = model(IDS).numpy()
    os.truncate(directory / "model.safetensors", 100)
    np.testing.assert_array_equal(model(IDS).numpy(), expected)
