"""``packrt serve`` decodes concurrent completions together (continuous batching), each as it is alone.

Eight streamed completions of different prompts and lengths, sent at once, share decode steps and each
streams the text it streams alone; one stream closed early leaves the others' text untouched; OpenAI's
presence and frequency penalties are applied to a request's own tokens, as the formula says.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packrt
from packrt.models import CausalLM, from_pretrained, load_tokenizer

if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")

import httpx2 as httpx
from serving import Running, running

WAIT_S = 120.0
PROMPTS = [
    "hello world",
    "the cat sat on the mat",
    "a dog",
    "the dog ran and then stop here",
    "w1 w2 w3",
    "hello",
    "the mat and the cat and the dog",
    "then the world",
]
MAX_TOKENS = [12, 7, 16, 5, 10, 14, 6, 9]


@pytest.fixture(scope="module")
def server(llama_dir: Path) -> Iterator[Running]:
    with running(llama_dir) as served:
        yield served


def _stream(base: str, body: dict[str, Any], close_after: int | None = None) -> tuple[str, str | None]:
    """The text a streamed completion sends and its finish reason (None when the client left first, after
    ``close_after`` chunks)."""
    text, finish, chunks = "", None, 0
    with httpx.stream("POST", f"{base}/v1/completions", json={**body, "stream": True}, timeout=WAIT_S) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            choice = json.loads(line[len("data: ") :])["choices"][0]
            text += choice["text"]
            finish = choice["finish_reason"] or finish
            chunks += 1
            if close_after is not None and chunks >= close_after:
                return text, None
    return text, finish


def _concurrently(base: str, bodies: list[dict[str, Any]], close_after: dict[int, int]) -> list[tuple[str, Any]]:
    """Every body streamed at once, each from its own thread; the answers in the bodies' order."""
    answers: list[tuple[str, Any]] = [("", None)] * len(bodies)
    errors: list[BaseException] = []
    start = threading.Barrier(len(bodies))

    def one(index: int) -> None:
        try:
            start.wait()
            answers[index] = _stream(base, bodies[index], close_after.get(index))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=one, args=(index,)) for index in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert not errors, errors
    return answers


def _widest_step(server: Running, gather: int) -> list[int]:
    """A list that grows with the number of sequences in each of the worker's decode steps, from now on; the
    first step waits (up to 10 s) for ``gather`` requests to be submitted, so a loaded machine's slow HTTP side
    cannot let each request end before the next arrives."""
    worker = server.app.state.packrt.worker
    decoder = worker._decoder
    widths: list[int] = []
    step = decoder.step

    def counted() -> Any:
        until = time.monotonic() + 10.0
        while not widths and worker.pending < gather and time.monotonic() < until:
            time.sleep(0.001)
        if not widths:
            decoder.step = step  # from the next step on, the decoder's own
        widths.append(decoder.active + decoder.waiting + worker._queue.qsize())
        return step()

    decoder.step = counted
    return widths


def test_eight_concurrent_streamed_completions_share_steps_and_each_equals_its_answer_alone(server: Running) -> None:
    bodies = [{"prompt": p, "max_tokens": n, "temperature": 0} for p, n in zip(PROMPTS, MAX_TOKENS, strict=True)]
    alone = [_stream(server.base, body) for body in bodies]
    assert all(text for text, _ in alone), alone
    widths = _widest_step(server, len(bodies))
    together = _concurrently(server.base, bodies, {})
    assert together == alone
    assert widths and widths[0] == len(bodies), f"the requests did not share a decode step: {widths}"


def test_a_stream_closed_early_leaves_the_others_streams_unchanged(server: Running) -> None:
    bodies = [{"prompt": p, "max_tokens": 16, "temperature": 0} for p in PROMPTS[:4]]
    alone = [_stream(server.base, body) for body in bodies]
    together = _concurrently(server.base, bodies, {1: 1})
    assert together[1][1] is None
    assert [answer for index, answer in enumerate(together) if index != 1] == alone[:1] + alone[2:]


def test_a_seeded_sample_is_the_same_alone_and_among_concurrent_requests(server: Running) -> None:
    bodies = [{"prompt": p, "max_tokens": 12, "temperature": 1.3, "seed": 5 + i} for i, p in enumerate(PROMPTS[:5])]
    alone = [_stream(server.base, body) for body in bodies]
    assert _concurrently(server.base, bodies, {}) == alone


def _penalized_greedy(llama_dir: Path, prompt: str, count: int, presence: float, frequency: float) -> str:
    """OpenAI's penalties by hand: greedy over the whole sequence's logits each step (no cache), each token's
    logit less ``presence * (count > 0) + frequency * count`` of its count among the new tokens; to eos (2)."""
    lm = from_pretrained(llama_dir)
    assert isinstance(lm, CausalLM)
    tokenizer = load_tokenizer(llama_dir)
    ids = tokenizer.encode(prompt).ids
    new: list[int] = []
    for _ in range(count):
        logits = lm(packrt.from_numpy(np.asarray([ids + new], dtype=np.int64))).numpy()[0, -1].astype(np.float64)
        for token in set(new):
            logits[token] -= presence + frequency * new.count(token)
        new.append(int(logits.argmax()))
        if new[-1] == 2:
            new.pop()
            break
    return str(tokenizer.decode(new))


@pytest.mark.parametrize(("presence", "frequency"), [(0.0, 1.5), (1.2, 0.0), (-0.5, 0.8)])
def test_presence_and_frequency_penalties_change_the_logits_by_openais_formula(
    server: Running, llama_dir: Path, presence: float, frequency: float
) -> None:
    body = {"prompt": "the cat", "max_tokens": 14, "temperature": 0}
    penalized = {**body, "presence_penalty": presence, "frequency_penalty": frequency}
    answer = httpx.post(f"{server.base}/v1/completions", json=penalized, timeout=WAIT_S)
    assert answer.status_code == 200, answer.text
    text = answer.json()["choices"][0]["text"]
    assert text == _penalized_greedy(llama_dir, "the cat", 14, presence, frequency)
    chat = {"messages": [{"role": "user", "content": "the cat"}], "max_tokens": 14, "temperature": 0}
    plain = httpx.post(f"{server.base}/v1/chat/completions", json=chat, timeout=WAIT_S).json()
    chat |= {"presence_penalty": presence, "frequency_penalty": frequency}
    changed = httpx.post(f"{server.base}/v1/chat/completions", json=chat, timeout=WAIT_S).json()
    assert changed["choices"][0]["message"] != plain["choices"][0]["message"], "the penalties changed the chat's answer"


def test_a_logit_bias_of_100_on_a_token_makes_the_greedy_answer_that_token(server: Running, llama_dir: Path) -> None:
    tokenizer = load_tokenizer(llama_dir)
    token = tokenizer.encode("cat", add_special_tokens=False).ids[0]
    body = {"prompt": "the dog", "max_tokens": 3, "temperature": 0, "logit_bias": {str(token): 100}}
    answer = httpx.post(f"{server.base}/v1/completions", json=body, timeout=WAIT_S)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["text"] == tokenizer.decode([token] * 3)
