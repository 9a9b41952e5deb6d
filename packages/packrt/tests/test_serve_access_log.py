"""``packrt serve --access-log``: one JSON line per request, written when its answer is sent, with the time, the
method, path and status, the duration, a request id (the client's ``X-Request-Id`` or a new one, sent back),
the client, and the tokens where the request read or generated any; uvicorn's own access lines are then off."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")

import httpx2 as httpx
from serving import running

from packrt.serve.access_log import AccessLog, AccessLogError

WAIT_S = 120.0


def _lines(path: Path, count: int) -> list[dict[str, Any]]:
    """The log's first ``count`` lines, waiting a little: a line is written just after its answer's last byte."""
    until = time.monotonic() + 10.0
    while True:
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        if len(lines) >= count or time.monotonic() > until:
            return lines
        time.sleep(0.02)


def test_each_request_is_one_json_line_with_its_status_id_and_tokens(llama_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "access.jsonl"
    with running(llama_dir, access_log=str(log), api_key="k") as server:
        auth = {"Authorization": "Bearer k"}
        body = {"prompt": "hello world", "max_tokens": 5, "temperature": 0}
        plain = httpx.post(
            f"{server.base}/v1/completions", json=body, headers=auth | {"X-Request-Id": "mine-1"}, timeout=WAIT_S
        )
        stream = {**body, "prompt": ["hello", "the cat"], "n": 2, "stream": True}
        with httpx.stream("POST", f"{server.base}/v1/completions", json=stream, headers=auth, timeout=WAIT_S) as r:
            assert r.status_code == 200
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        missing = httpx.get(f"{server.base}/nowhere", headers=auth, timeout=WAIT_S)
        refused = httpx.get(f"{server.base}/v1/models", timeout=WAIT_S)
        lines = _lines(log, 5)
    assert [(line["method"], line["path"], line["status"]) for line in lines[-4:]] == [
        ("POST", "/v1/completions", 200),
        ("POST", "/v1/completions", 200),
        ("GET", "/nowhere", 404),
        ("GET", "/v1/models", 401),
    ]
    first, streamed, absent, unauthorized = lines[-4:]
    assert plain.headers["x-request-id"] == first["request_id"] == "mine-1"
    assert missing.headers["x-request-id"] == absent["request_id"] != refused.headers["x-request-id"]
    usage = plain.json()["usage"]
    assert (first["prompt_tokens"], first["completion_tokens"]) == (usage["prompt_tokens"], usage["completion_tokens"])
    ends = [e for e in events if e["choices"][0]["finish_reason"] is not None]
    assert len(ends) == 4 and streamed["prompt_tokens"] == 2 + 3  # <s> hello; <s> the cat
    assert streamed["completion_tokens"] >= 4
    assert "prompt_tokens" not in absent and "completion_tokens" not in unauthorized
    assert first["client"].startswith("127.0.0.1:") and first["duration_ms"] > 0
    assert first["time"].endswith("Z") and first["time"][:2] == "20"


def test_an_embeddings_line_counts_the_tokens_read(encoder_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "access.jsonl"
    with running(encoder_dir, access_log=str(log)) as server:
        answer = httpx.post(f"{server.base}/v1/embeddings", json={"input": ["hello world", "a"]}, timeout=WAIT_S)
        line = next(entry for entry in _lines(log, 2) if entry["path"] == "/v1/embeddings")
    assert line["prompt_tokens"] == answer.json()["usage"]["prompt_tokens"]
    assert "completion_tokens" not in line


def test_an_access_log_that_cannot_be_opened_is_an_os_error_naming_it(tmp_path: Path) -> None:
    target = tmp_path / "no-such-dir" / "access.jsonl"
    with pytest.raises(AccessLogError, match=r"access log '.*access\.jsonl' cannot be opened for appending .*or - for"):
        AccessLog(str(target))
    assert issubclass(AccessLogError, OSError)


@pytest.mark.parametrize(("access_log", "uvicorns"), [("-", False), (None, True)])
def test_uvicorns_own_access_lines_are_off_when_ours_are_on(
    monkeypatch: pytest.MonkeyPatch, access_log: str | None, uvicorns: bool
) -> None:
    import uvicorn

    from packrt import serve

    ran: dict[str, Any] = {}
    monkeypatch.setattr("packrt.serve.app.build_app", lambda *args, **options: ran.update(options) or "app")
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: ran.update(uvicorn=options))
    serve.serve("model", access_log=access_log)
    assert ran["access_log"] == access_log
    assert ran["uvicorn"]["access_log"] is uvicorns
