"""``n`` choices per prompt and a list of prompts on ``packrt serve``'s completions (``n`` on chat), through the
real ``openai`` client: each choice is its own sequence on the generation worker, listed by ``index``
(``prompt * n + j``), streamed chunks carry their choice's index, the usage counts each prompt once and every
choice's new tokens, choice ``j`` of a seeded request samples with ``seed + j``, greedy choices are equal, and a
request's choices enter the bounded queue all together or not at all."""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")
    pytest.importorskip("openai", reason="the openai client is a test dependency of packrt serve")

import openai
from serving import START_S, Running, running

from packrt.serve import ServeLimits

WAIT_S = 120.0
PROMPTS = ["hello world", "the cat sat on the mat", "a dog"]


@pytest.fixture(scope="module")
def server(llama_dir: Path) -> Iterator[Running]:
    with running(llama_dir, ServeLimits(max_queued_requests=8)) as served:
        yield served


def _client(base: str) -> Any:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=WAIT_S)


def test_greedy_n_gives_n_equal_choices_indexed_and_usage_counts_the_prompt_once(server: Running) -> None:
    client = _client(server.base)
    one = client.completions.create(model="tiny", prompt="hello world", max_tokens=8, temperature=0)
    three = client.completions.create(model="tiny", prompt="hello world", max_tokens=8, temperature=0, n=3)
    assert [choice.index for choice in three.choices] == [0, 1, 2]
    assert [choice.text for choice in three.choices] == [one.choices[0].text] * 3
    assert three.usage.prompt_tokens == one.usage.prompt_tokens
    assert three.usage.completion_tokens == 3 * one.usage.completion_tokens


def test_a_list_of_prompts_gives_n_choices_each_in_prompt_major_order(server: Running) -> None:
    client = _client(server.base)
    alone = [client.completions.create(model="tiny", prompt=p, max_tokens=6, temperature=0) for p in PROMPTS]
    answer = client.completions.create(model="tiny", prompt=PROMPTS, max_tokens=6, temperature=0, n=2, best_of=2)
    assert [choice.index for choice in answer.choices] == list(range(6))
    assert [choice.text for choice in answer.choices] == [a.choices[0].text for a in alone for _ in range(2)]
    assert answer.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert answer.usage.completion_tokens == 2 * sum(a.usage.completion_tokens for a in alone)
    ids = client.completions.create(model="tiny", prompt=[[1, 4, 5], [1, 7]], max_tokens=6, temperature=0)
    cat = client.completions.create(model="tiny", prompt="cat", max_tokens=6, temperature=0)
    assert [c.text for c in ids.choices] == [alone[0].choices[0].text, cat.choices[0].text]  # <s> hello world; <s> cat


def test_choice_j_of_a_seeded_request_is_the_sample_of_seed_plus_j(server: Running) -> None:
    client = _client(server.base)
    sampling: dict[str, Any] = {"model": "tiny", "prompt": "the cat", "max_tokens": 12, "temperature": 1.5}
    together = client.completions.create(**sampling, n=3, seed=7)
    alone = [client.completions.create(**sampling, seed=7 + j).choices[0].text for j in range(3)]
    assert [choice.text for choice in together.choices] == alone
    assert len(set(alone)) > 1, f"three seeds drew the same text: {alone}"


def test_streamed_choices_carry_their_index_and_join_to_the_unstreamed_answer(server: Running) -> None:
    client = _client(server.base)
    options: dict[str, Any] = {"model": "tiny", "prompt": PROMPTS[:2], "max_tokens": 7, "temperature": 0, "n": 2}
    whole = client.completions.create(**options, echo=True)
    chunks = list(client.completions.create(**options, echo=True, stream=True, stream_options={"include_usage": True}))
    texts: defaultdict[int, str] = defaultdict(str)
    finishes: defaultdict[int, list[str]] = defaultdict(list)
    for chunk in chunks[:-1]:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            if choice.finish_reason is not None:
                finishes[choice.index].append(choice.finish_reason)
    assert dict(texts) == {choice.index: choice.text for choice in whole.choices}
    assert dict(finishes) == {choice.index: [choice.finish_reason] for choice in whole.choices}
    assert texts[2].startswith(PROMPTS[1])  # each choice echoes its own prompt
    assert (chunks[-1].choices, chunks[-1].usage) == ([], whole.usage)


def test_chat_n_gives_a_message_per_choice_streamed_or_not(server: Running) -> None:
    client = _client(server.base)
    options: dict[str, Any] = {"model": "tiny", "messages": [{"role": "user", "content": "hello cat"}]}
    options |= {"max_tokens": 6, "temperature": 0, "n": 2}
    whole = client.chat.completions.create(**options)
    assert [choice.index for choice in whole.choices] == [0, 1]
    assert whole.choices[0].message.content == whole.choices[1].message.content
    contents: defaultdict[int, str] = defaultdict(str)
    roles: defaultdict[int, list[str]] = defaultdict(list)
    for chunk in client.chat.completions.create(**options, stream=True):
        for choice in chunk.choices:
            contents[choice.index] += choice.delta.content or ""
            roles[choice.index] += [choice.delta.role] if choice.delta.role else []
    assert dict(contents) == {c.index: c.message.content for c in whole.choices}
    assert dict(roles) == {0: ["assistant"], 1: ["assistant"]}


def test_a_requests_choices_enter_the_queue_all_together_or_not_at_all(server: Running) -> None:
    from packrt.serve import completions
    from packrt.serve.batching import QueueFullError
    from packrt.serve.decoding import DecodeJob

    state = server.app.state.packrt
    cancelled = threading.Event()
    prompt = completions.Prompt([1, 4, 5], 200, 0.0, 1.0, None, ())

    def job() -> DecodeJob:
        completion = completions.Completion(state.served, prompt, lambda piece: None)
        return DecodeJob(prompt.ids, completion, time.monotonic() + START_S, cancelled.is_set, lambda o: o)

    held = state.worker.submit([job() for _ in range(5)])  # 5 of the server's 8 places
    try:
        with pytest.raises(QueueFullError):
            state.worker.submit([job() for _ in range(4)])
        assert state.worker.pending == 5  # none of the 4 took a place
        with pytest.raises(openai.RateLimitError, match="already holds 8 requests"):
            _client(server.base).completions.create(model="tiny", prompt="hello", max_tokens=2, n=4)
    finally:
        cancelled.set()
    for future in held:
        assert future.result(timeout=WAIT_S).finish == "cancelled"
