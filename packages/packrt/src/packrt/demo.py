"""The packrt demo: ``python -m packrt.demo`` (``--smoke`` for the quick CI run).

0. Real models (:mod:`packrt.demo_pretrained`): all-MiniLM-L6-v2 served borrowed from its mapped
   file (similarities, load time, resident bytes, speed against transformers), then a llama-shaped
   model's greedy generation over the KV cache (tokens per second against transformers).
1. A short tour of the dtypes: a tensor of each through numpy and DLPack (zero-copy where
   the format allows).
2. Serving a reference model (the causal decoder by default, ``--model encoder`` for the
   BERT-style one): random weights are saved with ``packrt.io.save_checkpoint``, then for each
   weight residency the model is declared under ``packrt.meta_init()``, bound to the checkpoint
   with ``load_checkpoint(assign=True, weight_residency=...)`` and served a batch. Each mode
   prints its latency and ``memory_report`` totals; a table compares them at the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import packrt
from packrt import io, nn
from packrt.demo_pretrained import generate_llama, serve_minilm
from packrt.errors import DLPackError
from packrt.models import BertEncoder, CausalDecoder, DecoderConfig, EncoderConfig

MiB = 2**20


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows])


# -- 1. dtypes through numpy and DLPack ------------------------------------------------------------------
def _all_dtypes() -> list[packrt.dtype]:
    return [
        packrt.float16,
        packrt.bfloat16,
        packrt.float32,
        packrt.float64,
        packrt.int8,
        packrt.uint8,
        packrt.int16,
        packrt.int32,
        packrt.int64,
        packrt.bool,
    ]


def dtype_tour(n: int) -> list[list[str]]:
    """One row per dtype: shape, bytes, whether numpy and DLPack views share memory."""
    rows = []
    for dt in _all_dtypes():
        t = packrt.arange(n, dtype=packrt.int64).to(dt) if dt is not packrt.bool else packrt.arange(n) % 2 == 0
        view = t.numpy()
        try:
            peer = np.from_dlpack(t)
            dlpack = "zero-copy" if np.shares_memory(peer, view) else "copy"
        except DLPackError:
            dlpack = "not exportable"
        back = packrt.from_numpy(view)
        shared = np.shares_memory(view, np.asarray(t))
        rows.append(
            [
                dt.name,
                str(t.nbytes),
                "yes" if shared else "no",
                dlpack,
                "yes" if back.data_ptr() == t.data_ptr() else "no",
            ]
        )
    return rows


# -- 2. serving a reference model under each residency ---------------------------------------------------
@dataclass
class Plan:
    """What to build and how hard to drive it."""

    model: str
    config: DecoderConfig | EncoderConfig
    batch: int
    seq: int
    forwards: int
    decode_steps: int


def plan(model: str, smoke: bool) -> Plan:
    if model == "encoder":
        if smoke:
            return Plan(
                model,
                EncoderConfig(vocab=256, hidden=64, heads=4, layers=2, intermediate=128, max_positions=32),
                2,
                16,
                2,
                0,
            )
        return Plan(
            model,
            EncoderConfig(vocab=8000, hidden=384, heads=6, layers=4, intermediate=1536, max_positions=256),
            2,
            128,
            3,
            0,
        )
    # An untied head keeps memory_report's per-layer rows one weight each; see CausalDecoder for tying.
    if smoke:
        return Plan(
            model,
            DecoderConfig(
                vocab=256, hidden=64, heads=4, layers=2, intermediate=128, max_positions=32, tie_embeddings=False
            ),
            2,
            16,
            2,
            2,
        )
    return Plan(
        model,
        DecoderConfig(
            vocab=4000, hidden=384, heads=6, layers=4, intermediate=1024, max_positions=256, tie_embeddings=False
        ),
        2,
        128,
        3,
        8,
    )


def build(p: Plan) -> BertEncoder | CausalDecoder:
    if isinstance(p.config, EncoderConfig):
        return BertEncoder(p.config)
    return CausalDecoder(p.config)


@dataclass
class ModeResult:
    residency: str
    load_ms: float
    first_ms: float
    forward_ms: float
    tokens_per_s: float | None
    totals: dict[str, int]
    max_diff: float


def serve(
    p: Plan, path: Path, residency: str, ids: packrt.Tensor, reference: np.ndarray | None
) -> tuple[ModeResult, np.ndarray]:
    """Declare, bind, serve: one residency's run."""
    start = time.perf_counter()
    with packrt.meta_init():
        model = build(p)
    io.load_checkpoint(model, path, assign=True, weight_residency=residency, progress=False)
    load_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    out = model(ids).numpy()  # the first forward packs where the residency packs
    first_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    for _ in range(p.forwards):
        model(ids)
    forward_ms = (time.perf_counter() - start) * 1e3 / max(p.forwards, 1)
    tokens_per_s = None
    if isinstance(model, CausalDecoder) and p.decode_steps:
        start = time.perf_counter()
        model.generate(ids[:, : min(p.seq, 16)], p.decode_steps)  # a short prompt, as a chat turn starts
        tokens_per_s = p.batch * p.decode_steps / (time.perf_counter() - start)
    totals = nn.memory_report(model).totals()
    diff = 0.0 if reference is None else float(np.abs(out - reference).max())
    return ModeResult(residency, load_ms, first_ms, forward_ms, tokens_per_s, totals, diff), out


def run_model(p: Plan) -> list[ModeResult]:
    packrt.manual_seed(0)
    c = p.config
    print(
        f"\n{p.model}: hidden={c.hidden} heads={c.heads} layers={c.layers} vocab={c.vocab}; "
        f"batch {p.batch} x {p.seq} tokens"
    )
    with packrt.meta_init():
        declared = build(p)
    n_params = sum(t.numel() for t in declared.parameters())
    declared_bytes = sum(t.storage_nbytes for t in declared.parameters())
    print(f"declared under meta_init: {n_params:,} parameters, {declared_bytes} bytes of weight storage")
    ids = packrt.from_numpy(np.random.default_rng(0).integers(0, c.vocab, (p.batch, p.seq), dtype=np.int64))
    results: list[ModeResult] = []
    with tempfile.TemporaryDirectory(prefix="packrt-demo-") as tmp:
        path = Path(tmp) / f"{p.model}.safetensors"
        io.save_checkpoint(build(p), path)  # fresh random weights, written once
        print(f"saved {path.stat().st_size / MiB:.2f} MiB checkpoint; serving it under each residency:")
        reference = None
        for residency in nn.WEIGHT_RESIDENCIES:
            r, out = serve(p, path, residency, ids, reference)
            reference = out if reference is None else reference
            t = r.totals
            decode = f", decode {r.tokens_per_s:.0f} tok/s" if r.tokens_per_s is not None else ""
            print(
                f"  {residency:<9} {r.forward_ms:8.2f} ms/forward (first {r.first_ms:.2f} ms){decode}; "
                f"raw {t['raw'] / MiB:.2f} MiB, packed {t['packed'] / MiB:.2f} MiB, "
                f"borrowed {t['borrowed'] / MiB:.2f} MiB"
            )
            results.append(r)
    return results


def summary(results: list[ModeResult]) -> str:
    header = [
        "residency",
        "load ms",
        "1st fwd ms",
        "ms/fwd",
        "tok/s",
        "raw MiB",
        "packed MiB",
        "borrowed MiB",
        "max|diff|",
    ]
    rows = [
        [
            r.residency,
            f"{r.load_ms:.1f}",
            f"{r.first_ms:.2f}",
            f"{r.forward_ms:.2f}",
            "-" if r.tokens_per_s is None else f"{r.tokens_per_s:.0f}",
            f"{r.totals['raw'] / MiB:.2f}",
            f"{r.totals['packed'] / MiB:.2f}",
            f"{r.totals['borrowed'] / MiB:.2f}",
            f"{r.max_diff:.1e}",
        ]
        for r in results
    ]
    return _table(header, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m packrt.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds, for CI")
    parser.add_argument(
        "--model", choices=("decoder", "encoder"), default="decoder", help="which reference model to serve"
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()
    print(f"packrt {packrt.__version__}: real checkpoints first")
    serve_minilm(args.smoke)
    generate_llama(args.smoke)
    print()
    print(f"packrt {packrt.__version__}: tensors of every dtype through numpy and DLPack")
    print(_table(["dtype", "nbytes", "numpy view", "DLPack", "from_numpy back"], dtype_tour(8)))
    print(
        f"cuda available: {packrt.cuda.is_available()} ({packrt.cuda.device_count()} device(s)); "
        f"{packrt.get_num_threads()} CPU thread(s)"
    )
    results = run_model(plan(args.model, args.smoke))
    print("\n" + summary(results))
    print(f"max|diff| is each mode's output against packed's; total {(time.perf_counter() - start):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
