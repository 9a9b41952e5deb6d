"""The demo's serving part: the real all-MiniLM-L6-v2 behind ``packrt serve``, asked over HTTP.

It runs the command a user types (``packrt serve DIR --name all-MiniLM-L6-v2``, as a subprocess on a
free loopback port), waits for ``/health``, sends the demo's sentences to ``POST /v1/embeddings`` as an
OpenAI client would, checks the vectors against :class:`~packrt.models.SentenceEncoder` in this
process, times requests from a few concurrent clients, reads ``/metrics``, and stops the server with
SIGTERM, which drains it. Skipped, saying why, without the ``serve`` extra.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from packrt.demo_timing import machine_load

NAME = "all-MiniLM-L6-v2"
START_S = 120.0  # a cold start on a loaded 2-core machine imports FastAPI and maps the model in seconds


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _call(url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            raw = answer.read()
            kind = answer.headers.get("content-type", "")
            return answer.status, json.loads(raw) if kind.startswith("application/json") else raw.decode()
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _wait_healthy(base: str, server: subprocess.Popen[bytes]) -> None:
    until = time.monotonic() + START_S
    while time.monotonic() < until:
        if server.poll() is not None:
            raise RuntimeError(f"packrt serve exited with code {server.returncode} before it answered /health")
        try:
            if _call(f"{base}/health")[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    raise RuntimeError(f"packrt serve did not answer {base}/health within {START_S:.0f} s")


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def serve_over_http(directory: Path, sentences: list[str], vectors: np.ndarray, smoke: bool) -> bool:
    """Serve ``directory`` with ``packrt serve`` and check its answers equal ``vectors`` (the encoder's
    own for ``sentences``). Returns False (after saying why) without the serve extra."""
    if importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None:
        print("packrt serve: the serve extra is not installed (pip install 'packrt[serve]'); skipped")
        return False
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "packrt.cli", "serve", str(directory), "--name", NAME, "--port", str(port)]
    print(f"\n$ packrt serve {directory} --name {NAME} --port {port}")
    started = time.perf_counter()
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_healthy(base, server)
        ready_s = time.perf_counter() - started
        status, body = _call(f"{base}/v1/embeddings", {"model": NAME, "input": sentences})
        if status != 200:
            raise RuntimeError(f"POST /v1/embeddings answered {status}: {body}")
        served = np.asarray([item["embedding"] for item in body["data"]], dtype=np.float32)
        diff = float(np.abs(served - vectors).max())
        print(
            f"ready in {ready_s:.1f} s; POST /v1/embeddings with {len(sentences)} sentences: 200, "
            f"{body['usage']['prompt_tokens']} tokens, max |diff| against SentenceEncoder {diff:.1e}"
        )
        clients, per_client = (2, 3) if smoke else (4, 25)

        def one_client(seed: int) -> list[float]:
            times = []
            for i in range(per_client):
                texts = [sentences[(seed + i + j) % len(sentences)] for j in range(1 + (seed + i) % 4)]
                start = time.perf_counter()
                status, answer = _call(f"{base}/v1/embeddings", {"model": NAME, "input": texts})
                if status != 200:
                    raise RuntimeError(f"POST /v1/embeddings answered {status}: {answer}")
                times.append(time.perf_counter() - start)
            return times

        with ThreadPoolExecutor(clients) as pool:
            latencies = sorted(t for times in pool.map(one_client, range(clients)) for t in times)
        p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
        metrics = _call(f"{base}/metrics")[1]
        load = machine_load()
        print(
            f"{clients} concurrent clients, {len(latencies)} requests of 1-4 sentences: all 200, "
            f"p50 {statistics.median(latencies) * 1e3:.1f} ms, p95 {p95 * 1e3:.1f} ms; the server batched "
            f"them into {_metric(metrics, 'packrt_batches_total'):.0f} model calls (GET /metrics); "
            f"latencies of this machine at 1-minute load {'n/a' if load is None else f'{load:.1f}'}, "
            "the clients and the server sharing its cores, not a comparison"
        )
        status, body = _call(f"{base}/v1/embeddings", {"model": "gpt-4o", "input": "hello"})
        print(f"a request for another model: {status} {body['error']['code']}: {body['error']['message']}")
    finally:
        server.send_signal(signal.SIGTERM)  # drains: requests in flight finish, then it exits
        try:
            code = server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            code = server.wait()
        errors = server.stderr.read().decode(errors="replace") if server.stderr is not None else ""
    # uvicorn finishes its graceful shutdown, then ends by the signal it caught (exit status -15)
    if code not in (0, -signal.SIGTERM) or "Application shutdown complete" not in errors:
        raise RuntimeError(f"packrt serve exited with code {code} after SIGTERM:\n{errors[-2000:]}")
    print("SIGTERM: the server drained its requests and shut down")
    return True
