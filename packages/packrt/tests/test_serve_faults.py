"""``packrt serve`` under faults: a checkpoint changed under a borrowed model fails ``/health`` and gives
clients a JSON error (a truncated one included: no dead connection, no SIGBUS), SIGTERM drains the
requests in flight, and the command refuses a bad directory or limit before serving."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# skipped where the serve extra is not installed (nox -s lowest installs no extras); CI, which sets
# PACKRT_REQUIRE_TORCH=1 and installs packrt[test], fails on the import below instead
if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")

import httpx2 as httpx
from faults import skip_unless_leased, truncate_from_another_process_during
from serving import START_S, free_port, running, wait_healthy

from packrt.cli import main
from packrt.serve import ServedModel, ServeLimits

WAIT_S = 120.0


def _copy(source: Path, tmp_path: Path) -> Path:
    """A copy the test may damage (the module's source directory stays whole), under the name it is
    served by, in a folder of its own."""
    return Path(shutil.copytree(source, tmp_path / source.parent.name / source.name))


def _rewrite_in_place(path: Path) -> None:
    """What ``cp other model.safetensors`` does: same inode and size, new bytes and mtime."""
    with open(path, "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\x00\x00\x80\x7f")
    os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 10**9))


def _checkpoint_error(response: httpx.Response) -> str:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "checkpoint_changed")
    message: str = error["message"]
    return message


def test_a_checkpoint_rewritten_in_place_fails_health_and_every_request_with_a_json_503(
    encoder_dir: Path, llama_dir: Path, tmp_path: Path
) -> None:
    encoder, llama = _copy(encoder_dir, tmp_path), _copy(llama_dir, tmp_path)
    with running(encoder) as embedding_server, running(llama) as completion_server:
        for started in (embedding_server, completion_server):
            assert httpx.get(f"{started.base}/health", timeout=WAIT_S).json()["status"] == "ok"
        _rewrite_in_place(encoder / "model.safetensors")
        _rewrite_in_place(llama / "model.safetensors")
        for started in (embedding_server, completion_server):
            health = httpx.get(f"{started.base}/health", timeout=WAIT_S)
            assert "model.safetensors': the memory-mapped file the model serves from changed" in _checkpoint_error(
                health
            )
        embedding = httpx.post(f"{embedding_server.base}/v1/embeddings", json={"input": ["a"]}, timeout=WAIT_S)
        assert "modified in place" in _checkpoint_error(embedding)
        for stream in (False, True):
            completion = httpx.post(
                f"{completion_server.base}/v1/completions",
                json={"prompt": "hello", "max_tokens": 4, "stream": stream},
                timeout=WAIT_S,
            )
            if stream:  # the stream had started: the error is its last event before [DONE]
                events = [line for line in completion.text.splitlines() if line]
                assert events[-1] == "data: [DONE]"
                assert json.loads(events[-2][len("data: ") :])["error"]["code"] == "checkpoint_changed"
            else:
                _checkpoint_error(completion)


def test_a_truncation_during_a_streamed_completion_ends_it_with_an_error_event_and_the_server_lives(
    llama_dir: Path, tmp_path: Path
) -> None:
    llama = _copy(llama_dir, tmp_path)
    served = ServedModel.load(llama)
    skip_unless_leased(served.module)
    writers = truncate_from_another_process_during(
        served.module, served.module.layers[0], llama / "model.safetensors", 3
    )
    body = {"prompt": "hello world the cat", "max_tokens": 32, "temperature": 0, "stream": True}
    with running(served) as server:
        completion = httpx.post(f"{server.base}/v1/completions", json=body, timeout=WAIT_S)
        events = [line for line in completion.text.splitlines() if line]
        assert completion.status_code == 200 and events[-1] == "data: [DONE]"
        assert json.loads(events[-2][len("data: ") :])["error"]["code"] == "checkpoint_changed", events
        assert writers[0].wait(WAIT_S) == 0  # the writer went on once the step in flight had ended
        assert "shrank from" in _checkpoint_error(httpx.get(f"{server.base}/health", timeout=WAIT_S))


def test_a_truncation_during_a_batched_embedding_request_is_a_json_503_and_the_server_lives(
    encoder_dir: Path, tmp_path: Path
) -> None:
    encoder = _copy(encoder_dir, tmp_path)
    served = ServedModel.load(encoder)
    skip_unless_leased(served.module)
    writers = truncate_from_another_process_during(served.module, served.module, encoder / "model.safetensors", 2)
    texts = ["one text", "a second, longer text than the first", "and a third one, longer again than those"]
    with running(served, ServeLimits(max_batch_tokens=16)) as server:  # one text per model call
        answer = httpx.post(f"{server.base}/v1/embeddings", json={"input": texts}, timeout=WAIT_S)
        assert "the memory-mapped file the model serves from changed" in _checkpoint_error(answer)
        assert writers[0].wait(WAIT_S) == 0
        assert httpx.get(f"{server.base}/health", timeout=WAIT_S).status_code == 503


@contextmanager
def _serve_process(directory: Path, tmp_path: Path, *options: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``packrt serve DIR`` as its own process on a free loopback port (its log in tmp_path/serve.log)."""
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below, after the process
    command = [sys.executable, "-m", "packrt.cli", "serve", str(directory), "--port", str(port), *options]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base)
        yield base, process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=START_S)
        log.close()


def test_a_truncated_checkpoint_gives_clients_a_json_error_and_the_server_lives(
    encoder_dir: Path, tmp_path: Path
) -> None:
    encoder = _copy(encoder_dir, tmp_path)
    with _serve_process(encoder, tmp_path) as (base, process):
        assert httpx.post(f"{base}/v1/embeddings", json={"input": ["before"]}, timeout=WAIT_S).status_code == 200
        os.truncate(encoder / "model.safetensors", 100)
        answer = httpx.post(f"{base}/v1/embeddings", json={"input": ["after"]}, timeout=WAIT_S)
        assert "it shrank from" in _checkpoint_error(answer)
        _checkpoint_error(httpx.get(f"{base}/health", timeout=WAIT_S))
        assert process.poll() is None, (tmp_path / "serve.log").read_text()


def test_sigterm_drains_the_requests_in_flight_then_exits_cleanly(llama_dir: Path, tmp_path: Path) -> None:
    body = {"prompt": "hello world the cat", "max_tokens": 200, "temperature": 0, "stream": True}
    events: list[list[str]] = [[] for _ in range(3)]
    statuses: list[int] = [0] * 3
    first_text = threading.Event()

    def consume(index: int, base: str) -> None:
        with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=WAIT_S) as response:
            statuses[index] = response.status_code
            for line in response.iter_lines():
                if line:
                    events[index].append(line)
                    first_text.set()

    with _serve_process(llama_dir, tmp_path, "--drain", "300") as (base, process):
        clients = [threading.Thread(target=consume, args=(i, base)) for i in range(3)]
        for client in clients:
            client.start()
        until = time.monotonic() + WAIT_S
        # all three accepted (waiting, running or done) before the signal: one arriving after it would be refused
        while int(_metric(base, "packrt_queue_depth")) + sum("data: [DONE]" in lines for lines in events) < 3:
            assert time.monotonic() < until, "the three requests never reached the server"
            time.sleep(0.01)
        assert first_text.wait(WAIT_S)
        unfinished = sum(1 for lines in events if "data: [DONE]" not in lines)
        process.send_signal(signal.SIGTERM)
        for client in clients:
            client.join(timeout=WAIT_S * 3)
        # uvicorn finishes its shutdown, then re-raises the SIGTERM it caught: the status says "ended by SIGTERM"
        assert process.wait(timeout=WAIT_S) in (0, -signal.SIGTERM), (tmp_path / "serve.log").read_text()
    assert unfinished >= 1, "every request had finished before SIGTERM: nothing was drained"
    assert statuses == [200, 200, 200]
    for lines in events:
        assert lines[-1] == "data: [DONE]"
        assert json.loads(lines[-2][len("data: ") :])["choices"][0]["finish_reason"] in ("length", "stop")
    log = (tmp_path / "serve.log").read_text()
    assert "Application shutdown complete" in log and "Finished server process" in log


def _metric(base: str, name: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=WAIT_S).text
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def test_the_serve_command_refuses_a_missing_directory_and_a_bad_limit_before_serving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", str(tmp_path / "absent")]) == 2
    assert "absent' does not exist; pass a model directory" in capsys.readouterr().err
    assert main(["serve", str(tmp_path), "--max-queued-requests", "0"]) == 2
    assert "ServeLimits.max_queued_requests must be a positive number, got 0" in capsys.readouterr().err
