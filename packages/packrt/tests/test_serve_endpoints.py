"""The endpoints and options people expect of an OpenAI-style server: ``GET /v1/models/{id}``, llama.cpp's
``POST /tokenize`` and ``POST /detokenize``, an API key (``--api-key`` / ``PACKRT_API_KEY``) that every route but
``/health`` requires, and CORS for the browser origins ``--cors-origin`` names."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")
    pytest.importorskip("openai", reason="the openai client is a test dependency of packrt serve")

import httpx2 as httpx
import openai
from serving import Running, running

from packrt.cli import main
from packrt.models import load_tokenizer
from packrt.serve.access import api_key_from

WAIT_S = 120.0
KEY = "sk-test-0123"
ORIGIN = "http://localhost:3000"


@pytest.fixture(scope="module")
def llama_server(llama_dir: Path) -> Iterator[Running]:
    with running(llama_dir) as server:
        yield server


@pytest.fixture(scope="module")
def guarded(llama_dir: Path) -> Iterator[Running]:
    """A server that requires KEY and allows ORIGIN."""
    with running(llama_dir, api_key=KEY, cors_origins=[ORIGIN]) as server:
        yield server


def _error(response: httpx.Response, status: int, code: str | None) -> dict[str, Any]:
    """The error object of a ``status`` answer in OpenAI's shape, after checking its ``code``."""
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code, error
    return error


def test_get_model_by_id_describes_the_served_model_and_404s_another(llama_server: Running) -> None:
    client = openai.OpenAI(base_url=f"{llama_server.base}/v1", api_key="unused", max_retries=0, timeout=WAIT_S)
    assert client.models.retrieve("tiny").id == "tiny"
    with pytest.raises(openai.NotFoundError, match="model 'org/other' is not served here; this server serves 'tiny'"):
        client.models.retrieve("org/other")
    error = _error(httpx.get(f"{llama_server.base}/v1/models/gpt-4o", timeout=WAIT_S), 404, "model_not_found")
    assert error["param"] == "model"


def test_tokenize_and_detokenize_speak_llama_cpps_shapes(llama_server: Running, llama_dir: Path) -> None:
    base, tokenizer = llama_server.base, load_tokenizer(llama_dir)
    plain = httpx.post(f"{base}/tokenize", json={"content": "hello world the cat"}, timeout=WAIT_S)
    assert plain.status_code == 200, plain.text
    assert plain.json() == {"tokens": tokenizer.encode("hello world the cat", add_special_tokens=False).ids}
    special = httpx.post(f"{base}/tokenize", json={"content": "hello world", "add_special": True}, timeout=WAIT_S)
    assert special.json()["tokens"] == [1, *plain.json()["tokens"][:2]]  # <s> first, as the model's template says
    pieces = httpx.post(f"{base}/tokenize", json={"content": "hello world", "with_pieces": True}, timeout=WAIT_S)
    assert pieces.json() == {"tokens": [{"id": 4, "piece": "hello"}, {"id": 5, "piece": " world"}]}
    back = httpx.post(f"{base}/detokenize", json={"tokens": plain.json()["tokens"]}, timeout=WAIT_S)
    assert back.status_code == 200 and back.json() == {"content": "hello world the cat"}


def test_detokenize_of_an_id_outside_the_vocabulary_is_a_400_naming_it(llama_server: Running) -> None:
    answer = httpx.post(f"{llama_server.base}/detokenize", json={"tokens": [4, 5, 1000]}, timeout=WAIT_S)
    error = _error(answer, 400, "invalid_token_id")
    assert error["param"] == "tokens[2]" and "outside this model's vocabulary" in error["message"]
    _error(httpx.post(f"{llama_server.base}/tokenize", json={"content": 5}, timeout=WAIT_S), 422, "invalid_value")


def test_tokenize_serves_embedding_models_too(encoder_dir: Path) -> None:
    with running(encoder_dir) as server:
        answer = httpx.post(f"{server.base}/tokenize", json={"content": "hello", "add_special": True}, timeout=WAIT_S)
    assert answer.status_code == 200 and answer.json()["tokens"][0] == 101  # [CLS]


def test_with_an_api_key_every_route_but_health_needs_the_bearer_key(guarded: Running) -> None:
    base = guarded.base
    assert httpx.get(f"{base}/health", timeout=WAIT_S).status_code == 200
    for method, path in [("GET", "/v1/models"), ("GET", "/metrics"), ("GET", "/docs"), ("POST", "/v1/completions")]:
        missing = httpx.request(method, f"{base}{path}", json={"prompt": "hi"}, timeout=WAIT_S)
        assert "needs an API key" in _error(missing, 401, "invalid_api_key")["message"]
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = httpx.request(method, f"{base}{path}", headers={"Authorization": "Bearer nope"}, timeout=WAIT_S)
        assert "is not this server's" in _error(wrong, 401, "invalid_api_key")["message"]
    right = httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=WAIT_S)
    assert right.status_code == 200 and right.json()["data"][0]["id"] == "tiny"


def test_the_openai_client_with_the_key_is_served_and_without_it_is_told(guarded: Running) -> None:
    good = openai.OpenAI(base_url=f"{guarded.base}/v1", api_key=KEY, max_retries=0, timeout=WAIT_S)
    assert good.completions.create(model="tiny", prompt="hello", max_tokens=2, temperature=0).choices
    bad = openai.OpenAI(base_url=f"{guarded.base}/v1", api_key="sk-wrong", max_retries=0, timeout=WAIT_S)
    with pytest.raises(openai.AuthenticationError, match="is not this server's"):
        bad.models.list()


def test_a_cors_preflight_from_an_allowed_origin_is_answered_without_the_key(guarded: Running) -> None:
    preflight = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization",
    }
    answer = httpx.options(f"{guarded.base}/v1/chat/completions", headers=preflight, timeout=WAIT_S)
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in answer.headers["access-control-allow-methods"]
    other = httpx.options(
        f"{guarded.base}/v1/chat/completions", headers={**preflight, "Origin": "http://evil.test"}, timeout=WAIT_S
    )
    assert "access-control-allow-origin" not in other.headers
    served = httpx.get(
        f"{guarded.base}/v1/models", headers={"Origin": ORIGIN, "Authorization": f"Bearer {KEY}"}, timeout=WAIT_S
    )
    assert served.status_code == 200 and served.headers["access-control-allow-origin"] == ORIGIN


def test_without_cors_origins_no_cors_header_is_sent(llama_server: Running) -> None:
    answer = httpx.get(f"{llama_server.base}/v1/models", headers={"Origin": ORIGIN}, timeout=WAIT_S)
    assert answer.status_code == 200 and "access-control-allow-origin" not in answer.headers


def test_the_api_key_comes_from_the_option_else_packrt_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PACKRT_API_KEY", raising=False)
    assert api_key_from(None) is None
    assert api_key_from("given") == "given"
    monkeypatch.setenv("PACKRT_API_KEY", "from-env")
    assert api_key_from(None) == "from-env"
    assert api_key_from("given") == "given"
    monkeypatch.setenv("PACKRT_API_KEY", "")
    assert api_key_from(None) is None


def test_packrt_serve_passes_api_key_and_each_cors_origin_to_the_server(
    monkeypatch: pytest.MonkeyPatch, llama_dir: Path
) -> None:
    import packrt.serve

    seen: dict[str, Any] = {}
    monkeypatch.setattr(packrt.serve, "serve", lambda *args, **kwargs: seen.update(kwargs))
    argv = ["serve", str(llama_dir), "--api-key", KEY, "--cors-origin", ORIGIN, "--cors-origin", "http://b.test"]
    assert main(argv) == 0
    assert seen["api_key"] == KEY and seen["cors_origins"] == (ORIGIN, "http://b.test")
    assert main(["serve", str(llama_dir)]) == 0
    assert seen["api_key"] is None and seen["cors_origins"] == ()
