"""Dynamic batching by tokens: one worker thread runs every model call of the server.

Requests join a queue already tokenized (as TEI queues token ids): each text's encoding, cut to the
server's bound, and its token count, read from that encoding.
The embedding worker takes what is queued, sorts the texts longest first and cuts them into model calls
of at most ``max_batch_tokens`` tokens (rows times the longest row, the padded size the model computes);
texts of several requests share a call, a large request spans several. Before each call it drops the
texts of requests past their deadline or given up by their client, so an abandoned request stops
costing the model at the next call boundary. A failing call fails only the requests whose texts were in
it, never the queue or the worker.

Generation runs on the same kind of worker, one request at a time (a causal LM's decode steps are
sequential); its deadline is checked between decode steps by the caller's loop.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tokenizers import Encoding


def _settle(future: concurrent.futures.Future[Any], result: Any = None, error: BaseException | None = None) -> None:
    """Give ``future`` its outcome unless it has one (its client gave up and cancelled it meanwhile)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


class QueueFullError(Exception):
    """The bounded queue holds ``max_queued_requests`` already."""


@dataclass
class EmbedJob:
    """One request's texts as the tokenizer gave them (encodings), their token counts (after truncation),
    and where its vectors go."""

    encodings: list[Encoding]
    tokens: list[int]
    deadline: float
    future: concurrent.futures.Future[np.ndarray] = field(default_factory=concurrent.futures.Future)
    vectors: np.ndarray | None = None
    left: int = 0

    def expired(self) -> bool:
        return self.future.done() or time.monotonic() > self.deadline


class Worker:
    """One thread, one bounded queue: the only place the model runs.

    ``pending`` counts jobs queued or running; :meth:`submit` refuses beyond ``capacity``.
    """

    def __init__(self, capacity: int, name: str) -> None:
        self.capacity = capacity
        self.pending = 0
        self._lock = threading.Lock()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _admit(self) -> None:
        with self._lock:
            if self.pending >= self.capacity:
                raise QueueFullError
            self.pending += 1

    def _done(self, count: int = 1) -> None:
        with self._lock:
            self.pending -= count

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        raise NotImplementedError


class CallWorker(Worker):
    """Runs submitted callables one at a time (generation: one request's decode loop per call)."""

    def submit(self, work: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        self._admit()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._queue.put((work, future))
        return future

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            work, future = item
            try:
                if future.set_running_or_notify_cancel():
                    future.set_result(work())
            except BaseException as err:  # the request's failure, never the worker's
                future.set_exception(err)
            finally:
                self._done()


class EmbedWorker(Worker):
    """Gathers queued embedding jobs and runs them in token-budgeted model calls (see the module docstring)."""

    def __init__(
        self,
        encode: Callable[[list[Encoding]], np.ndarray],
        dimension: int,
        capacity: int,
        max_batch_tokens: int,
        wait_s: float,
        on_batch: Callable[[int, int], None] | None = None,
    ) -> None:
        self._encode, self._dimension = encode, dimension
        self._budget, self._wait = max_batch_tokens, wait_s
        self._on_batch = on_batch
        super().__init__(capacity, "packrt-serve-embeddings")

    def submit(self, job: EmbedJob) -> None:
        self._admit()
        job.vectors = np.empty((len(job.encodings), self._dimension), dtype=np.float32)
        job.left = len(job.encodings)
        self._queue.put(job)

    def _gather(self, first: EmbedJob) -> tuple[list[EmbedJob], bool]:
        """``first`` and what else is queued, up to the token budget or ``wait_s``; and whether to stop after."""
        jobs, tokens = [first], sum(first.tokens)
        until = time.monotonic() + self._wait
        while tokens < self._budget:
            try:
                item = self._queue.get(timeout=max(until - time.monotonic(), 0.0))
            except queue.Empty:
                break
            if item is None:
                return jobs, True
            jobs.append(item)
            tokens += sum(item.tokens)
        return jobs, False

    def _run(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                return
            jobs, stop = self._gather(first)
            try:
                self._serve(jobs)
            except BaseException as err:  # a defect outside the model call: fail these jobs, keep the worker
                for job in jobs:
                    _settle(job.future, error=err)
            finally:
                self._done(len(jobs))

    def _calls(self, rows: list[tuple[EmbedJob, int]]) -> list[list[tuple[EmbedJob, int]]]:
        """``rows`` (longest first) cut into model calls of at most the token budget (rows x longest)."""
        calls: list[list[tuple[EmbedJob, int]]] = []
        current: list[tuple[EmbedJob, int]] = []
        for row in rows:
            longest = current[0][0].tokens[current[0][1]] if current else row[0].tokens[row[1]]
            if current and longest * (len(current) + 1) > self._budget:
                calls.append(current)
                current = []
            current.append(row)
        if current:
            calls.append(current)
        return calls

    def _serve(self, jobs: list[EmbedJob]) -> None:
        rows = [(job, i) for job in jobs for i in range(len(job.encodings))]
        rows.sort(key=lambda row: -row[0].tokens[row[1]])
        for call in self._calls(rows):
            live = [(job, i) for job, i in call if not job.expired()]
            if not live:
                continue
            try:
                vectors = self._encode([job.encodings[i] for job, i in live])
            except BaseException as err:  # fails the requests in this call only
                for job in {id(job): job for job, _ in live}.values():
                    _settle(job.future, error=err)
                continue
            if self._on_batch is not None:
                self._on_batch(len(live), sum(job.tokens[i] for job, i in live))
            for row, (job, i) in enumerate(live):
                assert job.vectors is not None
                job.vectors[i] = vectors[row]
                job.left -= 1
                if job.left == 0:
                    _settle(job.future, result=job.vectors)


__all__ = ["CallWorker", "EmbedJob", "EmbedWorker", "QueueFullError", "Worker"]
