"""Dynamic batching by tokens: one worker thread runs every model call of the server.

Requests join a queue already tokenized (as TEI queues token ids): each text's encoding, cut to the
server's bound, and its token count, read from that encoding.
The embedding worker keeps the requests it has taken in arrival order and fills each model call with a text
of each request in turn (a request's longest text left first) up to ``max_batch_tokens`` tokens (rows times
the longest row, the padded size the model computes): texts of several requests share a call, a large
request spans several, and a small request that arrives while a large one is being served rides in the very
next call instead of waiting for the large one to end (no head-of-line blocking). Requests that arrive
during a call join before the next one. A request is answered, and its place in the bounded queue freed, as
soon as its last text is computed. Before each call the worker drops the requests past their deadline or
given up by their client, so an abandoned request stops costing the model at the next call boundary. A
failing call fails only the requests whose texts were in it, never the queue or the worker.

Generation runs on a worker of its own kind (:mod:`packrt.serve.decoding`): every completion in flight is
decoded in one batched step, requests joining and leaving between steps.
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


def settle(future: concurrent.futures.Future[Any], result: Any = None, error: BaseException | None = None) -> None:
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
    rows: list[int] = field(default_factory=list)  # the rows still to compute, longest first

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

    def _admit(self, count: int = 1) -> None:
        """``count`` places taken at once, or none (QueueFullError): a request's jobs enter whole."""
        with self._lock:
            if self.pending + count > self.capacity:
                raise QueueFullError
            self.pending += count

    def _done(self, count: int = 1) -> None:
        with self._lock:
            self.pending -= count

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        raise NotImplementedError


class EmbedWorker(Worker):
    """Runs queued embedding jobs in token-budgeted model calls, each job's rows shared out fairly (see the
    module docstring)."""

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
        # the job's rows still to compute, longest first: each call takes a job's longest ones
        job.rows = sorted(range(len(job.encodings)), key=lambda i: -job.tokens[i])
        self._queue.put(job)

    def _take(self, waiting: list[EmbedJob], timeout: float | None) -> bool:
        """Move queued jobs into ``waiting``: the first within ``timeout`` (None: until one comes; 0: only if one
        is there), then every other already queued; True when the queue was closed."""
        try:
            item = self._queue.get_nowait() if timeout == 0 else self._queue.get(timeout=timeout)
        except queue.Empty:
            return False
        while item is not None:
            waiting.append(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
        return True

    def _run(self) -> None:
        waiting: list[EmbedJob] = []  # admitted, not finished, in arrival order
        closed = False
        while waiting or not closed:
            if not waiting:
                closed = self._take(waiting, None)
                until = time.monotonic() + self._wait  # a batch with room waits briefly for more requests
                while not closed and self._short(waiting):
                    left = until - time.monotonic()
                    if left <= 0:
                        break
                    closed = self._take(waiting, left)
            else:
                closed = self._take(waiting, 0) or closed  # requests that came during the last call join now
            try:
                self._step(waiting)
            except BaseException as err:  # a defect outside the model call: fail these jobs, keep the worker
                for job in waiting:
                    settle(job.future, error=err)
                self._done(len(waiting))
                waiting.clear()

    def _short(self, waiting: list[EmbedJob]) -> bool:
        return sum(job.tokens[i] for job in waiting for i in job.rows) < self._budget

    def _pick(self, waiting: list[EmbedJob]) -> list[tuple[EmbedJob, int]]:
        """One model call's rows: a row of each job in turn (its longest left), in arrival order, while the call
        stays within the token budget (rows x longest). A small request that arrives while a large one is served
        rides in the next call, instead of waiting for the large one to finish."""
        picked: list[tuple[EmbedJob, int]] = []
        longest, taken = 0, dict.fromkeys(map(id, waiting), 0)
        while True:
            grew = False
            for job in waiting:
                if taken[id(job)] >= len(job.rows):
                    continue
                row = job.rows[taken[id(job)]]
                wider = max(longest, job.tokens[row])
                if picked and wider * (len(picked) + 1) > self._budget:
                    return picked
                picked.append((job, row))
                longest, grew = wider, True
                taken[id(job)] += 1
            if not grew:
                return picked

    def _step(self, waiting: list[EmbedJob]) -> None:
        """Drop the jobs past their deadline or given up (never computed further), then run one call."""
        for job in [job for job in waiting if job.expired()]:
            waiting.remove(job)
            self._done()
        picked = self._pick(waiting)
        if not picked:
            return
        try:
            vectors = self._encode([job.encodings[i] for job, i in picked])
        except BaseException as err:  # fails the requests in this call only
            for job in {id(job): job for job, _ in picked}.values():
                settle(job.future, error=err)
                waiting.remove(job)
                self._done()
            return
        if self._on_batch is not None:
            self._on_batch(len(picked), sum(job.tokens[i] for job, i in picked))
        for row, (job, i) in enumerate(picked):
            assert job.vectors is not None
            job.vectors[i] = vectors[row]
            job.left -= 1
        for job in {id(job): job for job, _ in picked}.values():
            del job.rows[: len(job.rows) - job.left]  # a call takes a prefix of each job's rows
            if job.left == 0:  # answered now, and its place in the queue freed at once
                settle(job.future, result=job.vectors)
                waiting.remove(job)
                self._done()


__all__ = ["EmbedJob", "EmbedWorker", "QueueFullError", "Worker", "settle"]
