"""One completion request's choices: ``n`` per prompt, each its own sequence on the generation worker.

A request for ``n`` choices of each of its prompts (a list of prompts on ``/v1/completions``, the one rendered
conversation on ``/v1/chat/completions``) becomes ``n x prompts`` sequences, which the generation worker
(:mod:`packrt.serve.decoding`) decodes together with every other request's. The rules a client relies on:

- choice ``index`` is ``prompt * n + j``, OpenAI's and vLLM's order, and the answer lists the choices by it;
- choice ``j`` of a seeded request samples with ``seed + j`` (vLLM's rule), so choice 0 is what ``n: 1``
  gives with that seed and the others differ; greedy choices (``temperature: 0``) are the same text, as
  OpenAI's and vLLM's are;
- the request enters the bounded queue whole or not at all (each choice takes a place, a 429 when they
  do not all fit), and one failing or timed-out choice fails the request and drops its other choices;
- the usage counts each prompt's tokens once and the new tokens of every choice;
- streamed, every chunk carries its choice's ``index``; chunks of different choices interleave as their
  tokens come, each choice ends with its own chunk holding its ``finish_reason``, and the usage chunk
  (``stream_options.include_usage``) and ``[DONE]`` come after the last choice ended.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from fastapi.responses import StreamingResponse

from packrt.serve.access_log import note_tokens
from packrt.serve.completions import Completion, Outcome, Prompt, RequestTimeoutError, answer_logprobs
from packrt.serve.decoding import DecodeJob
from packrt.serve.metrics import Metrics
from packrt.serve.openai_shapes import (
    ServeError,
    completion_choice,
    completion_chunk,
    completion_response,
    usage_chunk,
)
from packrt.serve.served import ServedModel, dumps


@dataclass(frozen=True)
class Choice:
    """One choice of a request: its ``index`` in the answer and the prompt (with its own seed) it continues."""

    index: int
    prompt: Prompt


def expand(prompts: list[Prompt], n: int) -> list[Choice]:
    """``n`` choices of each prompt in index order (``prompt * n + j``); choice ``j`` of a seeded prompt samples
    with ``seed + j``."""
    choices = []
    for at, prompt in enumerate(prompts):
        for j in range(n):
            seed = prompt.seed + j if prompt.seed is not None else None
            choices.append(Choice(at * n + j, dataclasses.replace(prompt, seed=seed)))
    return choices


Submit = Callable[[list[DecodeJob]], list[concurrent.futures.Future[Any]]]


class ChoiceRunner:
    """Runs a request's choices on the generation worker through ``submit`` (which answers a full queue with
    its 429), counts their tokens in ``metrics``, and turns an exception into its answer with ``fail``."""

    def __init__(
        self,
        served: ServedModel,
        metrics: Metrics,
        submit: Submit,
        timeout_s: float,
        fail: Callable[[BaseException], ServeError],
    ) -> None:
        self.served, self.metrics, self.submit = served, metrics, submit
        self.timeout_s, self.fail = timeout_s, fail

    def _count(self, prompts: list[Prompt], new_tokens: int) -> tuple[int, int]:
        prompt_tokens = sum(len(prompt.ids) for prompt in prompts)
        self.metrics.add_tokens("prompt", prompt_tokens)
        self.metrics.add_tokens("completion", new_tokens)
        note_tokens(prompt_tokens, new_tokens)
        return prompt_tokens, new_tokens

    async def answer(
        self, prompts: list[Prompt], n: int, chat: bool, ident: str, deadline: float
    ) -> tuple[dict[str, Any], tuple[int, int]]:
        """The whole completion of ``n`` choices per prompt, and its (prompt, completion) token counts."""
        choices = expand(prompts, n)
        cancelled = threading.Event()
        texts: list[list[str]] = [[] for _ in choices]

        def then(prompt: Prompt) -> Callable[[Outcome], tuple[Outcome, dict[str, Any] | None]]:
            # scored on the worker thread, between two decode steps: the model is never called from two threads
            return lambda outcome: (outcome, answer_logprobs(self.served, prompt, outcome, chat))

        jobs = [
            DecodeJob(
                choice.prompt.ids,
                Completion(self.served, choice.prompt, texts[choice.index].append),
                deadline,
                cancelled.is_set,
                then(choice.prompt),
            )
            for choice in choices
        ]
        try:
            waiting = [asyncio.wrap_future(future) for future in self.submit(jobs)]
            done, pending = await asyncio.wait(waiting, timeout=self.timeout_s, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            cancelled.set()  # a timeout, a failed choice or a client gone: the worker drops the others
        for future in pending:
            future.cancel()
        for future in waiting:
            error = future.exception() if future in done else None
            if error is not None:
                raise error
        if pending:
            raise self.fail(RequestTimeoutError()) from None
        shaped, new_tokens = [], 0
        for choice, future in zip(choices, waiting, strict=True):
            outcome, logprobs = future.result()
            new_tokens += outcome.count
            text = (choice.prompt.text if choice.prompt.echo else "") + "".join(texts[choice.index])
            shaped.append(completion_choice(choice.index, text, outcome.finish, chat, logprobs))
        counts = self._count(prompts, new_tokens)
        return completion_response(ident, self.served.name, shaped, *counts, chat), counts

    def stream(
        self,
        prompts: list[Prompt],
        n: int,
        chat: bool,
        ident: str,
        deadline: float,
        include_usage: bool,
    ) -> StreamingResponse:
        """The completion as server-sent events: for each choice a first chunk with the role (chat) or its echoed
        prompt, one per piece of text, one with its finish reason; with ``include_usage`` one with no choices and
        the usage (every other chunk then carries ``"usage": null``, as OpenAI's do), then ``[DONE]``. A full queue
        is a 429 before the stream starts."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple[str, int, Any]] = asyncio.Queue()
        cancelled = threading.Event()
        choices = expand(prompts, n)

        def post(kind: str, index: int, value: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening any more
                loop.call_soon_threadsafe(events.put_nowait, (kind, index, value))

        def job(choice: Choice) -> DecodeJob:
            index = choice.index
            completion = Completion(self.served, choice.prompt, lambda piece: post("text", index, piece))
            return DecodeJob(
                choice.prompt.ids, completion, deadline, cancelled.is_set, lambda outcome: post("end", index, outcome)
            )

        def failed(future: concurrent.futures.Future[Any]) -> None:
            if not future.cancelled() and future.exception() is not None:
                post("error", -1, future.exception())

        for future in self.submit([job(choice) for choice in choices]):
            future.add_done_callback(failed)
        name = self.served.name

        def event(body: dict[str, Any]) -> str:
            if include_usage:
                body["usage"] = None
            return f"data: {dumps(body)}\n\n"

        async def sse() -> AsyncIterator[str]:
            try:
                for choice in choices:
                    if chat:
                        first = completion_chunk(ident, name, "", None, True, choice.index)
                        first["choices"][0]["delta"] = {"role": "assistant", "content": ""}
                        yield event(first)
                    elif choice.prompt.echo:
                        yield event(completion_chunk(ident, name, choice.prompt.text, None, False, choice.index))
                left, new_tokens = len(choices), 0
                while left:
                    timeout = max(deadline - time.monotonic(), 0.0) + 1.0
                    kind, index, value = await asyncio.wait_for(events.get(), timeout)
                    if kind == "text":
                        yield event(completion_chunk(ident, name, value, None, chat, index))
                    elif kind == "end":
                        left, new_tokens = left - 1, new_tokens + value.count
                        yield event(completion_chunk(ident, name, "", value.finish, chat, index))
                    else:
                        yield f"data: {dumps(self.fail(value).body())}\n\n"
                        break
                else:
                    counts = self._count(prompts, new_tokens)
                    if include_usage:
                        yield f"data: {dumps(usage_chunk(ident, name, *counts, chat))}\n\n"
            except TimeoutError:
                yield f"data: {dumps(self.fail(RequestTimeoutError()).body())}\n\n"
            finally:
                cancelled.set()  # the client left, a choice failed or all ended: nothing more is decoded
            yield "data: [DONE]\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


__all__ = ["Choice", "ChoiceRunner", "Submit", "expand"]
