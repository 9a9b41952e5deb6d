"""The embedding worker of ``packrt serve`` shares its model calls fairly: a small request that arrives while a
large one is being served rides in the next call and is answered first, a request frees its place in the queue
as soon as it is answered, and a request given up stops costing the model at the next call. Checked on the
worker itself, with a stand-in model that records each call and can hold one."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np
import pytest

if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")

from packrt.serve.batching import EmbedJob, EmbedWorker, QueueFullError

WAIT_S = 30.0


class Model:
    """Records the rows of each call (each row an ``(request, index)`` name) and holds the first call until
    released, so requests can be queued behind it deterministically."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, rows: list[Any]) -> np.ndarray:
        self.calls.append(list(rows))
        if len(self.calls) == 1:
            self.entered.set()
            assert self.release.wait(WAIT_S)
        return np.asarray([[float(len(rows)), 0.0]] * len(rows), dtype=np.float32)


def _job(name: str, texts: int, tokens: int = 1) -> EmbedJob:
    return EmbedJob([(name, i) for i in range(texts)], [tokens] * texts, time.monotonic() + WAIT_S)  # type: ignore[misc]


@pytest.fixture
def worker() -> Any:
    model = Model()
    started = EmbedWorker(model, 2, capacity=3, max_batch_tokens=4, wait_s=0.0)
    yield started, model
    model.release.set()
    started.close()


def test_a_small_request_rides_in_the_next_call_and_is_answered_before_a_large_one(worker: Any) -> None:
    started, model = worker
    answered: list[str] = []
    large = _job("large", 20)  # five calls of four rows on its own
    large.future.add_done_callback(lambda _: answered.append("large"))
    started.submit(large)
    assert model.entered.wait(WAIT_S)
    small = _job("small", 1)
    small.future.add_done_callback(lambda _: answered.append("small"))
    started.submit(small)
    model.release.set()
    large.future.result(WAIT_S)
    small.future.result(WAIT_S)
    assert answered == ["small", "large"], "the small request waited for the large one to end"
    assert ("small", 0) in model.calls[1]  # the call right after the one it arrived during
    assert sorted(row for call in model.calls for row in call) == sorted([*large.encodings, *small.encodings])


class SteppedModel(Model):
    """Holds every call until the test lets one through (``step``), so the worker stops between any two calls."""

    def __init__(self) -> None:
        super().__init__()
        self.turns = threading.Semaphore(0)
        self.started = threading.Semaphore(0)

    def __call__(self, rows: list[Any]) -> np.ndarray:
        self.calls.append(list(rows))
        self.started.release()
        assert self.turns.acquire(timeout=WAIT_S)
        return np.zeros((len(rows), 2), dtype=np.float32)

    def step(self) -> None:
        """Let the held call finish, then wait until the next one is held (or none comes)."""
        self.turns.release()
        self.started.acquire(timeout=1.0)


def test_an_answered_request_frees_its_place_while_a_large_one_runs() -> None:
    model = SteppedModel()
    started = EmbedWorker(model, 2, capacity=3, max_batch_tokens=4, wait_s=0.0)
    try:
        large = _job("large", 20)
        started.submit(large)
        assert model.started.acquire(timeout=WAIT_S)  # the first call, held
        small, third = _job("small", 1), _job("third", 1)
        started.submit(small)
        started.submit(third)
        with pytest.raises(QueueFullError):
            started.submit(_job("fourth", 1))  # capacity 3: large, small and third are held
        model.step()  # the first call ends; the second (small, third and two of large's) is held
        model.step()  # the second ends: small and third are answered; the third call is held
        assert small.future.done() and third.future.done() and not large.future.done()
        assert started.pending == 1
        fourth = _job("fourth", 1)
        started.submit(fourth)  # their places are free while the large request still runs
        while not (large.future.done() and fourth.future.done()):
            model.step()
        assert started.pending == 0
    finally:
        for _ in range(8):
            model.turns.release()
        started.close()


def test_a_request_given_up_is_not_computed_further(worker: Any) -> None:
    started, model = worker
    large = _job("large", 20)
    started.submit(large)
    assert model.entered.wait(WAIT_S)
    large.future.cancel()  # its client went away during the first call
    model.release.set()
    follow = _job("follow", 1)
    started.submit(follow)
    follow.future.result(WAIT_S)
    computed = [row for call in model.calls for row in call if row[0] == "large"]
    assert len(computed) == 4  # the first call's rows only
    assert started.pending == 0
