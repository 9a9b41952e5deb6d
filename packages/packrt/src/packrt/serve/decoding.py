"""The generation worker: every completion in flight decoded together, one batched step at a time.

One thread owns the causal LM and a :class:`~packrt.models.BatchDecoder`. A request joins the worker's
bounded queue as a :class:`DecodeJob` (its prompt ids, sampling and penalties already checked); between two
steps the worker admits every job queued since the last step, drops the jobs whose client left
(``cancelled``) or whose deadline passed (a :class:`~packrt.serve.completions.RequestTimeoutError`), then
runs one step, in which each sequence gets its next token (a newcomer: its prompt, then its first token).
Each token goes to its request's :class:`~packrt.serve.completions.Completion`, which hands its text on
(a stream's events) and says when a stop string ends it. A request's answer, and its place in the queue,
is given back the moment its sequence ends; a step that fails ends only the sequences it computed.

What the batch gives a request is what decoding it alone gives (the decoder's rule): the same tokens for the
same prompt and sampling, whoever else is in flight.
"""

from __future__ import annotations

import concurrent.futures
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from packrt.models import BatchDecoder, CausalLM
from packrt.serve.batching import Worker, settle
from packrt.serve.completions import Completion, Outcome, RequestTimeoutError
from packrt.serve.served import ServedModel


@dataclass(eq=False)
class DecodeJob:
    """One completion: its prompt ids and :meth:`~packrt.models.BatchDecoder.add` keywords, where its tokens go
    (``completion``), its deadline and cancellation, and what to compute on the worker thread once it ended
    (``then``, given the outcome; its result is the future's)."""

    ids: list[int]
    completion: Completion
    deadline: float
    cancelled: Callable[[], bool]
    then: Callable[[Outcome], Any]
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)


class DecodeWorker(Worker):
    """The worker of a completions server: see the module docstring. ``max_batch`` sequences at most decode
    together; more jobs wait their turn in the queue (bounded by ``capacity`` with the running ones)."""

    def __init__(self, served: ServedModel, capacity: int, max_batch: int) -> None:
        lm = served.module
        assert isinstance(lm, CausalLM), "a completions server serves a causal LM"
        self.served = served
        self._decoder = BatchDecoder(lm, max_batch=max_batch)
        super().__init__(capacity, "packrt-serve-generation")

    def submit(self, jobs: list[DecodeJob]) -> list[concurrent.futures.Future[Any]]:
        """Queue ``jobs`` (one request's choices) together: each takes a place in the queue, all or none
        (QueueFullError); each frees its place when it ends."""
        self._admit(len(jobs))
        for job in jobs:
            self._queue.put(job)
        return [job.future for job in jobs]

    def _run(self) -> None:
        jobs: dict[int, DecodeJob] = {}  # the decoder's sequence id -> its job
        closed = False
        while jobs or not closed:
            closed = self._take(jobs, block=not jobs) or closed
            self._drop_given_up(jobs)
            if not jobs:
                continue
            try:
                events = self._decoder.step()
            except BaseException as err:  # a defect outside the model call: these jobs fail, the worker lives
                for sequence, job in list(jobs.items()):
                    self._decoder.remove(sequence)
                    self._end(jobs, sequence, job, error=err)
                continue
            for event in events:
                job = jobs[event.sequence]
                if event.error is not None:
                    self._end(jobs, event.sequence, job, error=event.error)
                    continue
                try:
                    finish = job.completion.push(event.token, event.finish)
                except BaseException as err:  # the request's failure (its text), never the others'
                    self._decoder.remove(event.sequence)
                    self._end(jobs, event.sequence, job, error=err)
                    continue
                if finish is not None:
                    self._decoder.remove(event.sequence)  # a stop string ends it before the model does
                    self._end(jobs, event.sequence, job, finish=finish)

    def _take(self, jobs: dict[int, DecodeJob], block: bool) -> bool:
        """Admit the queued jobs (waiting for one when ``block``: nothing else to do); True when the queue was
        closed."""
        try:
            item = self._queue.get() if block else self._queue.get_nowait()
        except queue.Empty:
            return False
        while item is not None:
            self._start(jobs, item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
        return True

    def _start(self, jobs: dict[int, DecodeJob], job: DecodeJob) -> None:
        """``job``'s sequence added to the decoder, or the job ended: given up while it waited, or refused."""
        if job.cancelled():  # given up while it waited in the queue: no step is computed
            self._settle(job, job.completion.outcome("cancelled"))
            return
        if time.monotonic() > job.deadline:
            self._settle(job, error=RequestTimeoutError())
            return
        try:
            self.served.check_files()  # a changed checkpoint is this request's 503 before any step
            sequence = self._decoder.add(job.ids, **job.completion.add_options())
        except BaseException as err:
            self._settle(job, error=err)
            return
        jobs[sequence] = job

    def _drop_given_up(self, jobs: dict[int, DecodeJob]) -> None:
        """The jobs whose client left or whose deadline passed, out of the batch before the next step."""
        now = time.monotonic()
        for sequence, job in list(jobs.items()):
            if job.cancelled():
                self._decoder.remove(sequence)
                self._end(jobs, sequence, job, finish="cancelled")
            elif now > job.deadline:
                self._decoder.remove(sequence)
                self._end(jobs, sequence, job, error=RequestTimeoutError())

    def _end(
        self,
        jobs: dict[int, DecodeJob],
        sequence: int,
        job: DecodeJob,
        finish: str | None = None,
        error: BaseException | None = None,
    ) -> None:
        del jobs[sequence]
        if error is not None:
            self._settle(job, error=error)
            return
        assert finish is not None
        try:
            outcome = job.completion.outcome(finish)
        except BaseException as err:
            self._settle(job, error=err)
            return
        self._settle(job, outcome)

    def _settle(self, job: DecodeJob, outcome: Outcome | None = None, error: BaseException | None = None) -> None:
        """``job``'s future given its result (``then`` of the outcome, computed here, on the model's thread) or
        its error, and its place in the queue freed."""
        try:
            if error is None:
                assert outcome is not None
                try:
                    result = job.then(outcome)
                except BaseException as err:
                    error = err
            settle(job.future, None if error is not None else result, error)
        finally:
            self._done()


__all__ = ["DecodeJob", "DecodeWorker"]
