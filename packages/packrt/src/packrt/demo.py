"""The packrt demo: ``python -m packrt.demo`` (``--smoke`` for the quick CI run).

0. Real models (:mod:`packrt.demo_pretrained`): all-MiniLM-L6-v2 served borrowed from its mapped
   file (similarities, load time, resident bytes, speed against transformers), then a llama-shaped
   model's greedy generation over the KV cache (tokens per second against transformers).
1. A short tour of the dtypes: a tensor of each through numpy and DLPack (zero-copy where
   the format allows).
2. Serving a reference model (the causal decoder by default, ``--model encoder`` for the
   BERT-style one): random weights are saved with ``packrt.io.save_checkpoint``, then for each
   weight residency the model is declared under ``packrt.meta_init()``, bound to the checkpoint
   with ``load_checkpoint(assign=True, weight_residency=...)`` and served a batch. The four modes
   then take turns in the same timing rounds; each prints its time as a ratio to ``packed``'s and
   its ``memory_report`` totals, and a table compares them at the end.

No speed is printed alone: each is a ratio measured side by side in this process, with the threads
and the machine's load beside it (:mod:`packrt.demo_timing`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import packrt
from packrt import io, nn
from packrt.demo_pretrained import generate_llama, serve_minilm
from packrt.demo_timing import Race, race
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
    forward_ratio: float  # forward time over packed's, each in its fastest of the same rounds
    decode_ratio: float | None
    totals: dict[str, int]
    max_diff: float


def load(p: Plan, path: Path, residency: str) -> tuple[BertEncoder | CausalDecoder, float]:
    """Declare, bind: one residency's model and the milliseconds the load took (a one-off cost)."""
    start = time.perf_counter()
    with packrt.meta_init():
        model = build(p)
    io.load_checkpoint(model, path, assign=True, weight_residency=residency, progress=False)
    return model, (time.perf_counter() - start) * 1e3


def _forward_call(model: BertEncoder | CausalDecoder, ids: packrt.Tensor) -> Callable[[], object]:
    return lambda: model(ids)


def _decode_call(model: CausalDecoder, prompt: packrt.Tensor, steps: int) -> Callable[[], object]:
    return lambda: model.generate(prompt, steps)


def _ratio_text(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def run_model(p: Plan) -> tuple[list[ModeResult], Race]:
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
    prompt = ids[:, : min(p.seq, 16)]  # a short prompt, as a chat turn starts
    threads = packrt.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="packrt-demo-") as tmp:
        path = Path(tmp) / f"{p.model}.safetensors"
        io.save_checkpoint(build(p), path)  # fresh random weights, written once
        print(f"saved {path.stat().st_size / MiB:.2f} MiB checkpoint; serving it under each residency:")
        loaded = {residency: load(p, path, residency) for residency in nn.WEIGHT_RESIDENCIES}
        models = {residency: model for residency, (model, _) in loaded.items()}
        outputs = {residency: model(ids).numpy() for residency, model in models.items()}  # packs where it packs
        # The modes take turns in the same rounds, so a burst of other work on the machine slows them all.
        forward = race({r: _forward_call(m, ids) for r, m in models.items()}, p.forwards, threads)
        decode = None
        if p.decode_steps:
            decoders = {r: m for r, m in models.items() if isinstance(m, CausalDecoder)}
            decode = race(
                {r: _decode_call(m, prompt, p.decode_steps) for r, m in decoders.items()}, p.forwards, threads
            )
        results = []
        for residency, model in models.items():
            t = nn.memory_report(model).totals()
            r = ModeResult(
                residency,
                loaded[residency][1],
                forward.ratio(residency, "packed"),
                None if decode is None else decode.ratio(residency, "packed"),
                t,
                float(np.abs(outputs[residency] - outputs["packed"]).max()),
            )
            decoding = "" if r.decode_ratio is None else f", decode {_ratio_text(r.decode_ratio)}"
            print(
                f"  {residency:<9} forward {_ratio_text(r.forward_ratio)}{decoding} packed's time; "
                f"raw {t['raw'] / MiB:.2f} MiB, packed {t['packed'] / MiB:.2f} MiB, "
                f"borrowed {t['borrowed'] / MiB:.2f} MiB"
            )
            results.append(r)
    return results, forward


def summary(results: list[ModeResult]) -> str:
    header = ["residency", "load ms", "forward", "decode", "raw MiB", "packed MiB", "borrowed MiB", "max|diff|"]
    rows = [
        [
            r.residency,
            f"{r.load_ms:.1f}",
            _ratio_text(r.forward_ratio),
            _ratio_text(r.decode_ratio),
            f"{r.totals['raw'] / MiB:.2f}",
            f"{r.totals['packed'] / MiB:.2f}",
            f"{r.totals['borrowed'] / MiB:.2f}",
            f"{r.max_diff:.1e}",
        ]
        for r in results
    ]
    return _table(header, rows)


def reading(results: list[ModeResult], forward: Race) -> str:
    """What to take from the table, in a sentence: the slowest mode against packed, under what conditions."""
    slowest = max((r for r in results if r.residency != "packed"), key=lambda r: r.forward_ratio)
    word = forward.reading(slowest.forward_ratio).replace("packrt", slowest.residency)
    return (
        f"forward and decode are each mode's time over packed's, each side's fastest of the same interleaved rounds "
        f"({forward.conditions()}); the slowest other mode, {slowest.residency}, took "
        f"{slowest.forward_ratio:.2f}x packed's time: {word}. borrowed and per_call keep no packed copy of the "
        "weights (the MiB columns): a ratio above 1 is what that costs in time. load ms is a one-off cost."
    )


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
    results, forward = run_model(plan(args.model, args.smoke))
    print("\n" + summary(results))
    print(reading(results, forward))
    print(f"max|diff| is each mode's output against packed's; total {(time.perf_counter() - start):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
