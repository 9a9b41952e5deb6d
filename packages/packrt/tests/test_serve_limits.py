"""``packrt serve`` is bounded and isolated: every limit of ServeLimits refuses with its own status and
OpenAI's error object, a bad text fails only its own request, and no error leaves without a JSON body."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

# skipped where the serve extra is not installed (nox -s lowest installs no extras); CI, which sets
# PACKRT_REQUIRE_TORCH=1 and installs packrt[test], fails on the import below instead
if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")

import httpx2 as httpx
from serving import START_S, Running, running, tiny_llama

from packrt.models import SentenceEncoder
from packrt.serve import LimitsError, ServeLimits
from packrt.serve.metrics import endpoint_of

LIMITS = ServeLimits(
    max_texts_per_request=4, max_tokens_per_text=16, max_body_bytes=4096, max_json_depth=8, max_queued_requests=2
)
WAIT_S = 120.0  # a client's patience: far beyond a quiet machine's milliseconds


@pytest.fixture(scope="module")
def server(encoder_dir: Path) -> Iterator[Running]:
    with running(encoder_dir, LIMITS) as started:
        yield started


def _post(base: str, path: str, body: Any) -> httpx.Response:
    """POST ``body`` as JSON with non-ASCII escaped (so a lone surrogate travels as the JSON text \\ud800)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{base}{path}", content=data, headers={"content-type": "application/json"}, timeout=WAIT_S)


def _error(response: httpx.Response, status: int, param: str | None = None, code: str | None = None) -> str:
    """The error's message, after checking the status and that the body is OpenAI's error object."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    message: str = error["message"]
    return message


class Gate:
    """Holds the server's embedding worker inside its next model call until released, so the queue
    behind it can be filled and timed out deterministically, whatever the machine's speed."""

    def __init__(self, started: Running) -> None:
        self.worker = started.app.state.packrt.worker
        self.original: Callable[[list[Any]], np.ndarray] = self.worker._encode
        self.entered, self.release = threading.Event(), threading.Event()

    def __enter__(self) -> Gate:
        def held(encodings: list[Any]) -> np.ndarray:
            self.entered.set()
            assert self.release.wait(WAIT_S)
            return self.original(encodings)

        self.worker._encode = held
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.worker._encode = self.original

    def wait_pending(self, count: int) -> None:
        until = time.monotonic() + WAIT_S
        while self.worker.pending < count:
            assert time.monotonic() < until, f"the worker never held {count} requests"
            time.sleep(0.01)


def test_a_limit_that_is_not_a_positive_number_is_refused_naming_the_field() -> None:
    with pytest.raises(LimitsError, match=r"ServeLimits\.max_queued_requests must be a positive number, got 0"):
        ServeLimits(max_queued_requests=0)
    with pytest.raises(LimitsError, match=r"ServeLimits\.request_timeout_s must be a positive number, got True"):
        ServeLimits(request_timeout_s=True)


def test_more_texts_than_the_limit_is_a_400_naming_input(server: Running) -> None:
    message = _error(_post(server.base, "/v1/embeddings", {"input": ["a"] * 5}), 400, "input", "too_many_inputs")
    assert "5 texts, more than this server's 4" in message


def test_a_long_text_is_refused_with_truncate_false_and_cut_to_the_bound_by_default(
    server: Running, encoder_dir: Path
) -> None:
    long = "the cat sat on the mat " * 10
    refused = _post(server.base, "/v1/embeddings", {"input": ["short", long], "truncate": False})
    assert "input[1] has 62 tokens, more than this server's 16" in _error(
        refused, 400, "input[1]", "context_length_exceeded"
    )
    cut = _post(server.base, "/v1/embeddings", {"input": [long], "encoding_format": "float"})
    assert cut.status_code == 200, cut.text
    assert cut.json()["usage"]["prompt_tokens"] == 16
    reference = SentenceEncoder.from_pretrained(encoder_dir)
    reference.tokenizer.enable_truncation(max_length=16)
    np.testing.assert_allclose(cut.json()["data"][0]["embedding"], reference.encode([long])[0], atol=2e-6)


def test_a_body_over_the_byte_limit_is_a_413_declared_or_streamed(server: Running) -> None:
    body = json.dumps({"input": ["x" * 5000]}).encode()
    _error(_post(server.base, "/v1/embeddings", body), 413, None, "body_too_large")

    def chunks() -> Iterator[bytes]:  # no content-length: the server counts while it reads
        yield body[:3000]
        yield body[3000:]

    streamed = httpx.post(f"{server.base}/v1/embeddings", content=chunks(), timeout=WAIT_S)
    _error(streamed, 413, None, "body_too_large")


def test_json_nested_past_the_limit_is_a_400_before_parsing(server: Running) -> None:
    assert "nests 9 levels deep" in _error(
        _post(server.base, "/v1/embeddings", {"input": [[[[[[[["a"]]]]]]]]}), 400, None, "json_too_deep"
    )
    _error(_post(server.base, "/v1/embeddings", b"[" * 4000), 400, None, "json_too_deep")
    _error(_post(server.base, "/v1/embeddings", b'{"input": ["a"'), 400, None, "invalid_json")
    _error(_post(server.base, "/v1/embeddings", b'{"input": "' + bytes([0xFF]) + b'"}'), 400, None, "invalid_json")


def test_json_100000_deep_is_a_400_under_the_default_limits_not_a_recursion_error(default_server: Running) -> None:
    deep = _post(default_server.base, "/v1/embeddings", b'{"input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert "nests 100001 levels deep; this server takes 32" in _error(deep, 400, None, "json_too_deep")


def test_fields_of_the_wrong_shape_are_a_422_naming_the_field(server: Running) -> None:
    assert "Field required" in _error(_post(server.base, "/v1/embeddings", {"model": "m"}), 422, "input")
    _error(_post(server.base, "/v1/embeddings", {"input": "a", "encoding_format": "hex"}), 422, "encoding_format")
    _error(_post(server.base, "/v1/embeddings", {"input": "a", "truncate": "maybe"}), 422, "truncate")


def test_each_bad_text_is_a_400_naming_its_index(server: Running) -> None:
    surrogate = _post(server.base, "/v1/embeddings", {"input": ["fine", "\ud800", "fine"]})
    assert "input[1] is not valid Unicode text" in _error(surrogate, 400, "input[1]", "invalid_text")
    number = _post(server.base, "/v1/embeddings", {"input": ["fine", "fine", 7]})
    assert "input[2] is a int, expected a string" in _error(number, 400, "input[2]")
    _error(_post(server.base, "/v1/embeddings", {"input": []}), 400, "input")
    _error(_post(server.base, "/v1/embeddings", {"input": "\udfff"}), 400, "input", "invalid_text")


def test_a_bad_text_fails_alone_while_concurrent_good_requests_succeed(server: Running, encoder_dir: Path) -> None:
    good = [["hello world", f"text number {i}", "the cat"] for i in range(12)]
    bad = [["hello world", "\ud800 broken", "the cat"]] * 3
    reference = SentenceEncoder.from_pretrained(encoder_dir)
    bodies = [{"input": texts, "encoding_format": "float"} for texts in [*good, *bad]]
    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        # max_queued_requests is 2: a 429 is a legitimate answer under this load, so each retries on one
        answers = list(pool.map(lambda body: _post_retrying(server.base, body), bodies))
    for texts, answer in zip(good, answers[: len(good)], strict=True):
        assert answer.status_code == 200, answer.text
        got = np.asarray([item["embedding"] for item in answer.json()["data"]])
        np.testing.assert_allclose(got, reference.encode(texts), atol=2e-6)
    for answer in answers[len(good) :]:
        _error(answer, 400, "input[1]", "invalid_text")


def _post_retrying(base: str, body: Any) -> httpx.Response:
    until = time.monotonic() + WAIT_S
    while True:
        answer = _post(base, "/v1/embeddings", body)
        if answer.status_code != 429 or time.monotonic() > until:
            return answer
        time.sleep(float(answer.headers["retry-after"]) / 20)


def test_a_full_queue_is_a_429_with_retry_after_and_the_held_requests_then_succeed(server: Running) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool, Gate(server) as gate:
        first = pool.submit(_post, server.base, "/v1/embeddings", {"input": ["one"]})
        assert gate.entered.wait(WAIT_S)
        second = pool.submit(_post, server.base, "/v1/embeddings", {"input": ["two"]})
        gate.wait_pending(2)
        refused = _post(server.base, "/v1/embeddings", {"input": ["three"]})
        assert "already holds 2 requests" in _error(refused, 429, None, "queue_full")
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        gate.release.set()
        assert first.result().status_code == 200
        assert second.result().status_code == 200


@pytest.fixture(scope="module")
def default_server(encoder_dir: Path) -> Iterator[Running]:
    """The default limits but a 1 s request timeout."""
    with running(encoder_dir, ServeLimits(request_timeout_s=1.0)) as started:
        yield started


def test_a_request_past_its_timeout_is_a_504_and_its_queued_work_is_never_run(default_server: Running) -> None:
    started = default_server
    with ThreadPoolExecutor(2) as pool:
        state = started.app.state.packrt
        before = state.metrics.batch_texts
        with Gate(started) as gate:
            held = pool.submit(_post, started.base, "/v1/embeddings", {"input": ["held in the model call"]})
            assert gate.entered.wait(WAIT_S)
            queued = pool.submit(_post, started.base, "/v1/embeddings", {"input": ["never computed", "nor this"]})
            _error(held.result(), 504, None, "timeout")
            _error(queued.result(), 504, None, "timeout")
        until = time.monotonic() + WAIT_S
        while state.worker.pending:
            assert time.monotonic() < until
            time.sleep(0.01)
        assert (
            state.metrics.batch_texts == before + 1
        )  # the held call finished; the queued request's texts were dropped
        after = _post(started.base, "/v1/embeddings", {"input": ["the server serves on"]})
        assert after.status_code == 200


def test_an_unexpected_failure_is_a_500_json_body_and_the_next_request_is_served(server: Running) -> None:
    worker = server.app.state.packrt.worker
    original = worker._encode

    def broken(encodings: list[Any]) -> np.ndarray:
        raise RuntimeError("a defect inside the model call")

    worker._encode = broken
    try:
        failed = _post(server.base, "/v1/embeddings", {"input": ["a"]})
    finally:
        worker._encode = original
    assert "internal error (RuntimeError): a defect inside the model call" in _error(failed, 500, None)
    assert failed.json()["error"]["type"] == "server_error"
    assert _post(server.base, "/v1/embeddings", {"input": ["a"]}).status_code == 200


def test_unknown_routes_wrong_methods_and_wrong_endpoints_answer_in_openais_error_shape(server: Running) -> None:
    _error(httpx.get(f"{server.base}/v1/nothing", timeout=WAIT_S), 404, None, "not_found")
    _error(httpx.get(f"{server.base}/v1/embeddings", timeout=WAIT_S), 405, None, "method_not_allowed")
    wrong = _post(server.base, "/v1/completions", {"prompt": "hello"})
    assert "serves /v1/embeddings" in _error(wrong, 404, None, "wrong_endpoint")


def test_metrics_count_requests_by_endpoint_and_status_and_show_the_queue(server: Running) -> None:
    _post(server.base, "/v1/embeddings", {"input": ["counted"]})
    _post(server.base, "/v1/embeddings", {"input": ["a"] * 9})
    text = httpx.get(f"{server.base}/metrics", timeout=WAIT_S).text
    counts = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[0] != "#"}
    assert counts['packrt_requests_total{endpoint="/v1/embeddings",status="200"}'] >= 1
    assert counts['packrt_requests_total{endpoint="/v1/embeddings",status="400"}'] >= 1
    assert counts['packrt_request_seconds_count{endpoint="/v1/embeddings"}'] >= 2
    assert counts['packrt_tokens_total{kind="prompt"}'] >= 3
    assert counts["packrt_queue_depth"] == 0
    assert counts["packrt_queue_capacity"] == 2


def test_metrics_label_every_route_by_its_path_one_label_for_all_model_pages_and_other_for_unknown_paths() -> None:
    for path in ("/v1/embeddings", "/v1/rerank", "/rerank", "/tokenize", "/detokenize", "/v1/models", "/health"):
        assert endpoint_of(path) == path
    assert endpoint_of("/v1/models/my-model") == endpoint_of("/v1/models/other") == "/v1/models/{id}"
    assert endpoint_of("/v1/models/") == endpoint_of("/v1/secret/../x") == endpoint_of("/nothing") == "other"


# -- completions ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_llama(tmp_path_factory: pytest.TempPathFactory, transformers: ModuleType) -> Iterator[Running]:
    directory = tiny_llama(tmp_path_factory.mktemp("plain-llama"), transformers, chat_template=None)
    with running(directory, ServeLimits(max_tokens_per_text=16, max_new_tokens=240)) as started:
        yield started


def test_chat_with_a_model_without_a_chat_template_is_a_clear_400(plain_llama: Running) -> None:
    answer = _post(plain_llama.base, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert "has no chat template" in _error(answer, 400, "messages", "no_chat_template")


def test_completion_bounds_are_400s_or_422s_naming_the_field(plain_llama: Running) -> None:
    base = plain_llama.base
    assert "more than this server's bound of 240" in _error(
        _post(base, "/v1/completions", {"prompt": "hello", "max_tokens": 241}), 400, "max_tokens"
    )
    _error(_post(base, "/v1/completions", {"prompt": "hello " * 20}), 400, "prompt", "context_length_exceeded")
    _error(_post(base, "/v1/completions", {"prompt": "\ud800"}), 400, "prompt")
    _error(_post(base, "/v1/completions", {"prompt": []}), 400, "prompt")
    many = {"prompt": ["a"] * 257}  # over max_texts_per_request's 256
    assert "holds 257 prompts, more than this server's 256" in _error(
        _post(base, "/v1/completions", many), 400, "prompt"
    )
    _error(_post(base, "/v1/completions", {"prompt": "hello", "temperature": 3}), 422, "temperature")
    assert "more than the 64 this server holds" in _error(
        _post(base, "/v1/completions", {"prompt": "a", "n": 65}), 400, "n"
    )
    # each field's JSON type is the one OpenAI documents: a string is not coerced into a number or a bool
    _error(_post(base, "/v1/completions", {"prompt": "hello", "max_tokens": "5"}), 422, "max_tokens")
    _error(_post(base, "/v1/completions", {"prompt": "hello", "temperature": "1"}), 422, "temperature")
    _error(_post(base, "/v1/completions", {"prompt": "hello", "stream": "yes"}), 422, "stream")
    _error(_post(base, "/v1/completions", {"prompt": "hello", "seed": -1}), 422, "seed")  # numpy's error, a 500, before
    _error(_post(base, "/v1/completions", {"prompt": "hello", "seed": "x"}), 422, "seed")
    _error(_post(base, "/v1/completions", {"prompt": "hello", "stop": [""]}), 400, "stop")
    _error(_post(base, "/v1/embeddings", {"input": "hello"}), 404, None, "wrong_endpoint")


def test_the_decode_loop_stops_between_steps_once_cancelled_or_past_its_deadline(plain_llama: Running) -> None:
    from packrt.serve import completions
    from packrt.serve.decoding import DecodeJob

    state = plain_llama.app.state.packrt
    prompt = completions.Prompt([1, 4, 5, 6, 7], 30, 0.0, 1.0, None, ())  # greedy: runs 12 steps and more
    cancelled = threading.Event()
    pieces: list[str] = []

    def emit(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 3:
            cancelled.set()

    def job(deadline: float, emit: Any, cancelled: threading.Event) -> DecodeJob:
        completion = completions.Completion(state.served, prompt, emit)
        return DecodeJob(prompt.ids, completion, deadline, cancelled.is_set, lambda outcome: outcome)

    [future] = state.worker.submit([job(time.monotonic() + START_S, emit, cancelled)])
    outcome = future.result(timeout=START_S)
    if outcome.finish == "stop":
        pytest.fail(f"the greedy text ended at eos before 3 pieces: {pieces}")
    assert (outcome.finish, outcome.count) == ("cancelled", 3)
    [late] = state.worker.submit([job(time.monotonic() - 1, pieces.append, threading.Event())])
    with pytest.raises(completions.RequestTimeoutError):
        late.result(timeout=START_S)


def test_a_stream_whose_client_goes_away_stops_decoding_at_the_next_step(
    plain_llama: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packrt.serve import completions

    pushed: list[int] = []
    original = completions.Decoder.push

    def counted(self: completions.Decoder, token: int) -> str:
        pushed.append(token)
        return original(self, token)

    monkeypatch.setattr(completions.Decoder, "push", counted)
    state = plain_llama.app.state.packrt
    body = {"prompt": "hello world the cat", "max_tokens": 240, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{plain_llama.base}/v1/completions", json=body, timeout=WAIT_S) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if line).startswith("data: {")
    # the connection is closed after one chunk: the decode loop must end without running to 240 tokens
    until = time.monotonic() + WAIT_S
    while state.worker.pending:
        assert time.monotonic() < until, "the abandoned stream kept the worker busy"
        time.sleep(0.01)
    assert 1 <= len(pushed) < 240
