"""Hot swap on a served model: calls of a llama (a forward, a generation, a streamed step) and an encoder's
``encode`` running while ``load_checkpoint`` swaps the weights see one version for the whole call, never a
mixture and never a raise; and a model from ``from_pretrained``
checks the mapped files it serves from before each call, as one from ``load_checkpoint`` does."""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoints import LLAMA, random_weights, write_checkpoint
from faults import skip_unless_leased, truncate_from_another_process_during

import packrt
from packrt import io
from packrt.errors import CheckpointError
from packrt.models import SentenceEncoder, from_pretrained

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


def _generated(model: Any) -> bytes:
    return bytes(model.generate(IDS, 4, eos_token_id=None).numpy().tobytes())


def _streamed(model: Any) -> bytes:
    """One step of ``stream`` (the prompt and the first token): a step reads one version."""
    return bytes(next(model.stream(IDS, 1, eos_token_id=None)).tobytes())


# A load between two calls may swap the weights; no call may read some layers' weights before the load and
# the others' after it. ``model(x)`` is one module call; generate holds one version over all its steps
# (issue 44), each step of stream is one; SentenceEncoder.encode over all its batches (below).
CALLS = {"forward": _logits, "generate": _generated, "stream": _streamed}

LOADS = [
    {"weight_residency": "packed", "pack": True},
    {"weight_residency": "borrowed"},
    {"weight_residency": "per_call", "assign": False},
    {"weight_residency": "packed"},
    {"weight_residency": "borrowed", "assign": False},
]


def _stress(call: Any, references: dict[bytes, str], steps: list[Any], threads: int) -> tuple[Counter[str], int]:
    """``threads`` threads making ``call()`` while one thread runs ``steps`` (loads) in a loop, for
    STRESS_SECONDS at a 1 us switch interval: what the calls saw (a reference's name or "mixed"), and the
    number of loads; any exception a call or a load raised fails the test."""
    seen: Counter[str] = Counter()
    errors: list[BaseException] = []
    stop = threading.Event()
    swaps = [0]

    def serve() -> None:
        while not stop.is_set():
            try:
                seen[references.get(call(), "mixed")] += 1
            except Exception as err:  # every exception a call raises is a failure here
                errors.append(err)

    def swap() -> None:
        for step in itertools.cycle(steps):
            if stop.is_set():
                return
            try:
                step()
            except Exception as err:
                errors.append(err)
                return
            swaps[0] += 1

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=serve) for _ in range(threads)] + [threading.Thread(target=swap)]
        for t in workers:
            t.start()
        time.sleep(STRESS_SECONDS)
        stop.set()
        for t in workers:
            t.join(30)
    finally:
        sys.setswitchinterval(previous)
    assert not any(t.is_alive() for t in workers), "a call or the swapper hung"
    assert not errors, f"{dict(seen)} over {swaps[0]} swaps; errors {errors[:3]}"
    assert swaps[0] > 0 and seen["A"] + seen["B"] > 0, f"nothing ran: {swaps[0]} swaps, outputs {dict(seen)}"
    return seen, swaps[0]


@pytest.mark.parametrize("kind", list(CALLS))
def test_llama_calls_see_one_version_while_load_checkpoint_swaps_its_weights(tmp_path: Path, kind: str) -> None:
    files = _checkpoints(tmp_path)
    call = CALLS[kind]
    references: dict[bytes, str] = {}
    for (name, path), residency in itertools.product(files.items(), ("packed", "borrowed", "per_call")):
        quiet = from_pretrained(tmp_path / "A", weight_residency=residency)
        io.load_checkpoint(quiet, path, weight_residency=residency, progress=False)
        references[call(quiet)] = name
    assert len(set(references.values())) == 2, "versions A and B give the same output: the test could not tell"
    model = from_pretrained(tmp_path / "A", weight_residency="borrowed")
    steps = [
        (lambda path=path, options=options: io.load_checkpoint(model, path, progress=False, **options))
        for options, path in zip(LOADS, itertools.cycle((files["B"], files["A"])), strict=False)
    ]
    seen, swaps = _stress(lambda: call(model), references, steps, threads=8)
    assert seen["mixed"] == 0, f"{kind}: {dict(seen)} over {swaps} swaps"


def test_encode_batches_see_one_version_while_load_checkpoint_swaps_the_weights(
    tmp_path: Path, encoder_dir: Path
) -> None:
    encoder = SentenceEncoder.from_pretrained(encoder_dir)
    texts = ["one version", "of the weights", "for every batch", "of one call"]
    files = {"A": io.save_checkpoint(encoder.model, tmp_path / "A.safetensors")}
    b = {key: value.numpy() * np.float32(1.5) for key, value in encoder.model.state_dict().items()}
    encoder.model.load_state_dict({key: packrt.from_numpy(value) for key, value in b.items()})
    files["B"] = io.save_checkpoint(encoder.model, tmp_path / "B.safetensors")
    references: dict[bytes, str] = {}
    # each residency's road (float32 panels where packed on AVX-512, the BLAS on the mapped file where
    # borrowed) has its own bits: a version's output is any of them, a mixed one none
    for (name, path), residency in itertools.product(files.items(), ("packed", "borrowed", "per_call")):
        io.load_checkpoint(encoder.model, path, weight_residency=residency, progress=False)
        references[bytes(encoder.encode(texts, batch_size=1).tobytes())] = name
    assert len(set(references.values())) == 2, "versions A and B give the same output: the test could not tell"
    steps = [
        (lambda path=path, options=options: io.load_checkpoint(encoder.model, path, progress=False, **options))
        for options, path in zip(LOADS, itertools.cycle((files["B"], files["A"])), strict=False)
    ]
    seen, swaps = _stress(lambda: bytes(encoder.encode(texts, batch_size=1).tobytes()), references, steps, threads=8)
    assert seen["mixed"] == 0, f"encode: {dict(seen)} over {swaps} swaps"


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


def test_a_stream_names_the_file_truncated_between_two_of_its_steps(tmp_path: Path) -> None:
    """Each step checks the mapped files first, as a call of the model does (it once checked only at the
    first step, and a borrowed model read the truncated pages: SIGBUS)."""
    directory = write_checkpoint(tmp_path / "model", LLAMA)
    model = from_pretrained(directory, weight_residency="borrowed")
    steps = model.stream(IDS, 4, eos_token_id=None)
    next(steps)
    os.truncate(directory / "model.safetensors", 100)
    with pytest.raises(CheckpointError, match=r"model\.safetensors': the memory-mapped file .* shrank from \d+ to 100"):
        next(steps)


def test_a_truncation_by_another_process_during_a_streamed_step_ends_the_stream_with_a_checkpoint_error(
    tmp_path: Path,
) -> None:
    directory = write_checkpoint(tmp_path / "model", LLAMA)
    model = from_pretrained(directory, weight_residency="borrowed")
    skip_unless_leased(model)
    writers = truncate_from_another_process_during(model, model.layers[0], directory / "model.safetensors", 3)
    steps = model.stream(IDS, 16, eos_token_id=None)
    taken = [next(steps) for _ in range(3)]  # the third step is the one the truncation arrives in
    with pytest.raises(CheckpointError, match=r"model\.safetensors': the memory-mapped file .* changed"):
        next(steps)
    assert len(writers) == 1 and len(taken) == 3  # the step the truncation arrived in finished on the weights loaded
    assert writers[0].wait(30) == 0 and (directory / "model.safetensors").stat().st_size == 100


def test_a_truncation_by_another_process_during_a_batched_encode_is_a_checkpoint_error(
    tmp_path: Path, encoder_dir: Path
) -> None:
    directory = Path(shutil.copytree(encoder_dir, tmp_path / "encoder"))
    encoder = SentenceEncoder.from_pretrained(directory, weight_residency="borrowed")
    skip_unless_leased(encoder.model)
    writers = truncate_from_another_process_during(encoder.model, encoder.model, directory / "model.safetensors", 2)
    with pytest.raises(CheckpointError, match=r"model\.safetensors': the memory-mapped file .* changed"):
        encoder.encode(["one", "batch", "at a time"], batch_size=1)
    assert writers[0].wait(30) == 0
