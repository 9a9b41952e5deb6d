"""packrt on CUDA against torch on the same GPU, timed with CUDA events; what ``nox -s gpu`` runs.

Rows: Linear 4096x4096 in float32 / float16 / bfloat16 at batch 1, 64 and 4096; the BERT
encoder (``packrt.models.BertEncoder``, bert-base geometry) against transformers' BertModel at
B=32, S=128; greedy decode of a llama-shaped model (from one saved checkpoint, so both sides
serve the same weights) at batch 1 and 16. packrt is timed with ``cupy.cuda.Event``, torch with
``torch.cuda.Event``. A row that fails records its error and the script exits 1 after writing
``<out>/gpu-bench.json`` and ``<out>/gpu-bench.md``. ``ratio`` is packrt's throughput over
torch's (above 1: packrt is faster).

    python packages/packrt-kernels-cuda/benchmarks/gpu_bench.py --out reports
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

Timed = Callable[[], Any]

# The decode rows' model (a LlamaConfig): llama-shaped, 0.2B parameters, grouped-query attention.
DECODE_MODEL: dict[str, int] = {
    "vocab_size": 32000,
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
}


def time_packrt(fn: Timed, warmup: int, repeat: int) -> float:
    import cupy  # type: ignore[import-not-found]

    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(repeat):
        fn()
    stop.record()
    stop.synchronize()
    return float(cupy.cuda.get_elapsed_time(start, stop)) / repeat


def time_torch(fn: Timed, warmup: int, repeat: int) -> float:
    import torch

    with torch.inference_mode():
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        event: Any = torch.cuda.Event
        start, stop = event(enable_timing=True), event(enable_timing=True)
        start.record()
        for _ in range(repeat):
            fn()
        stop.record()
        stop.synchronize()
    return float(start.elapsed_time(stop)) / repeat


def _repeat_for(ms_estimate: float, budget_ms: float = 300.0) -> int:
    return int(max(3, min(200, budget_ms / max(ms_estimate, 1e-3))))


def bench_linear(rows: list[dict[str, Any]]) -> None:
    import torch

    import packrt
    from packrt import nn

    features = 4096
    for dtype in ("float32", "float16", "bfloat16"):
        layer = nn.Linear(features, features).to(dtype).to("cuda")
        peer = torch.nn.Linear(features, features, device="cuda", dtype=getattr(torch, dtype)).eval()
        for batch in (1, 64, 4096):
            name = f"Linear {features}x{features} {dtype} batch {batch}"
            try:
                x = packrt.randn(batch, features).to(dtype).to("cuda")
                tx = torch.randn(batch, features, device="cuda", dtype=getattr(torch, dtype))
                once = time_packrt(partial(layer, x), 2, 3)
                repeat = _repeat_for(once)
                mine = time_packrt(partial(layer, x), 2, repeat)
                theirs = time_torch(partial(peer, tx), 2, repeat)
                flops = 2.0 * batch * features * features
                rows.append(_row(name, mine, theirs, f"packrt {flops / mine / 1e9:.1f} TFLOP/s"))
            except Exception as err:
                rows.append(_failed(name, err))


def bench_encoder(rows: list[dict[str, Any]]) -> None:
    import torch

    import packrt
    from packrt.models import BertEncoder, EncoderConfig

    batch, seq = 32, 128
    for dtype in ("float32", "float16"):
        name = f"BertEncoder bert-base {dtype} B={batch} S={seq}"
        try:
            from transformers import BertConfig, BertModel

            model = BertEncoder(EncoderConfig()).to(dtype).to("cuda")
            ids = np.random.default_rng(0).integers(0, 30522, size=(batch, seq))
            x = packrt.tensor(ids).to("cuda")
            bert: Any = BertModel(BertConfig(), add_pooling_layer=False)
            peer = bert.to("cuda", getattr(torch, dtype)).eval()
            tx = torch.as_tensor(ids, device="cuda")
            mine = time_packrt(partial(model, x), 2, 10)
            theirs = time_torch(partial(peer, input_ids=tx), 2, 10)
            rows.append(_row(name, mine, theirs, f"packrt {batch * seq / mine * 1e3:.0f} tokens/s"))
        except Exception as err:
            rows.append(_failed(name, err))


def bench_decode(rows: list[dict[str, Any]]) -> None:
    import torch

    import packrt
    from packrt import models

    if not hasattr(models.CausalLM, "generate"):
        rows.append({"benchmark": "llama decode", "error": "skipped: packrt.models has no generate"})
        return
    prompt, new = 16, 64
    with tempfile.TemporaryDirectory() as tmp:
        try:
            from transformers import LlamaConfig, LlamaForCausalLM

            # no eos/bos/pad token: every row runs all its steps
            config = LlamaConfig(**DECODE_MODEL, eos_token_id=None, bos_token_id=None, pad_token_id=None)
            torch.manual_seed(0)
            llama: Any = LlamaForCausalLM(config)
            peer = llama.to(torch.float16).eval()
            peer.save_pretrained(tmp)
            peer = peer.to("cuda")
            mine_model = models.from_pretrained(tmp, device="cuda")
        except Exception as err:
            rows.append(_failed("llama decode (setup)", err))
            return
        for batch in (1, 16):
            name = f"llama-shaped (0.2B, float16) greedy decode batch {batch}, {prompt}+{new} tokens"
            try:
                ids = np.random.default_rng(batch).integers(0, DECODE_MODEL["vocab_size"], size=(batch, prompt))
                x = packrt.tensor(ids).to("cuda")
                tx = torch.as_tensor(ids, device="cuda")

                def ours(x: Any = x) -> Any:
                    return mine_model.generate(x, new)

                def theirs_fn(tx: Any = tx) -> Any:
                    return peer.generate(tx, max_new_tokens=new, min_new_tokens=new, do_sample=False)

                mine = time_packrt(ours, 1, 2)
                theirs = time_torch(theirs_fn, 1, 2)
                tokens = batch * new
                rows.append(_row(name, mine, theirs, f"packrt {tokens / mine * 1e3:.0f} tokens/s"))
            except Exception as err:
                rows.append(_failed(name, err))


def _row(name: str, mine_ms: float, theirs_ms: float, note: str) -> dict[str, Any]:
    return {
        "benchmark": name,
        "packrt_ms": round(mine_ms, 4),
        "torch_ms": round(theirs_ms, 4),
        "ratio": round(theirs_ms / mine_ms, 3),
        "note": note,
    }


def _failed(name: str, err: BaseException) -> dict[str, Any]:
    detail = "".join(traceback.format_exception_only(type(err), err)).strip()
    return {"benchmark": name, "error": detail[:400]}


def _device_name() -> str:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


# The report table's columns: header and markdown alignment (numbers right-aligned).
TABLE_COLUMNS = (
    ("benchmark", "---"),
    ("packrt ms", "---:"),
    ("torch ms", "---:"),
    ("packrt/torch throughput", "---:"),
    ("note", "---"),
)


def markdown(report: dict[str, Any]) -> str:
    table = [[name for name, _ in TABLE_COLUMNS], [align for _, align in TABLE_COLUMNS]]
    for row in report["rows"]:
        if "error" in row:
            table.append([row["benchmark"], "-", "-", "-", row["error"].replace("|", "/")])
        else:
            ms = [f"{row['packrt_ms']:.3f}", f"{row['torch_ms']:.3f}"]
            table.append([row["benchmark"], *ms, f"{row['ratio']:.2f}x", row["note"]])
    title = f"GPU benchmarks, {report['date']}, {report['device']} (cupy {report['cupy']}, torch {report['torch']})"
    lines = [title, "", *("| " + " | ".join(cells) + " |" for cells in table)]
    lines += ["", f"Linear bf16 batch 4096 >= 0.9x torch: {report['bf16_4096_check']}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument("--only", choices=["linear", "encoder", "decode"], action="append")
    args = parser.parse_args(argv)
    import cupy
    import torch

    import packrt

    if not packrt.cuda.is_available() or not torch.cuda.is_available():
        print("gpu_bench: needs packrt.cuda and torch.cuda on one GPU", file=sys.stderr)
        return 2
    began = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for part, fn in (("linear", bench_linear), ("encoder", bench_encoder), ("decode", bench_decode)):
        if args.only is None or part in args.only:
            fn(rows)
    bf16 = [r for r in rows if r["benchmark"].endswith("bfloat16 batch 4096") and "ratio" in r]
    check = "not measured" if not bf16 else ("PASS" if bf16[0]["ratio"] >= 0.9 else "FAIL") + f" ({bf16[0]['ratio']}x)"
    report = {
        "date": datetime.date.today().isoformat(),
        "device": _device_name(),
        "cupy": cupy.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "seconds": round(time.perf_counter() - began, 1),
        "bf16_4096_check": check,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-bench.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    text = markdown(report)
    (args.out / "gpu-bench.md").write_text(text, encoding="utf-8")
    print(text)
    return 1 if any("error" in r and not r["error"].startswith("skipped") for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
