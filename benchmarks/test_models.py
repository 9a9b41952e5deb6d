"""Whole models, packrt against transformers / torch eager in the same run, at 1 and 2 threads.

Each case builds the reference in torch with seeded random weights, writes it with
``save_pretrained`` (safetensors) and loads packrt's side from that directory with
``packrt.models.from_pretrained``, so both sides serve the same bytes. Outputs are checked
before anything is timed: hidden states within the suite's tolerance (``bench_support.TOLERANCE``,
relative to the largest |reference|), generated tokens identical.

- encoders (``BertModel``, exact GELU, no pooler): MiniLM shape (hidden 384, 6 layers, 12 heads,
  intermediate 1536) and BERT-base shape (hidden 768, 12 heads, intermediate 3072) with **4** of
  its 12 layers to keep the run short (the layers are identical, so the ratio is the 12-layer
  one up to the embeddings); vocabulary 8192 for both (it changes only the embedding gather).
  B=1 S=16 and B=8 S=128, weights in float32 and in bfloat16. A bf16 case checks both sides
  against torch float32 run on the same (bf16-rounded) weights.
- conv net: five 3x3 convolutions (3 -> 32 -> 32 -> 32 -> 32 -> 32, padding 1) each followed by
  ReLU, on 8x3x64x64, packrt ``nn.Sequential`` against ``torch.nn.Sequential``.
- decode: greedy generation of 32 tokens after a 16-token prompt at batch 1 from a small
  Llama-shaped ``LlamaForCausalLM`` (hidden 512, 6 layers, 8 heads / 4 key-value heads), with a
  key/value cache on both sides: packrt's ``generate`` against transformers'
  ``generate(do_sample=False)``. Weights are drawn with std 0.1 (not 0.02) so the logits are
  peaked and no greedy pick is a near-tie that rounding could flip.

The two implementations are timed interleaved (``bench_support.race``) and stored in the
pytest-benchmark JSON like every other case; case names end in ``-1t`` / ``-2t``, the threads
both sides got (this suite sets them itself, whatever --bench-threads says). A one-thread case
fails when the process used more than one core while timed.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from bench_support import (
    TOLERANCE,
    apply_thread_cap,
    check_close,
    race,
    record_model_case,
    require_torch,
)

THREADS = (1, 2)
VOCAB = 8192
ENCODERS = {  # name -> (hidden, layers, heads, intermediate)
    "minilm-6L": (384, 6, 12, 1536),
    "bert-base-4L": (768, 4, 12, 3072),
}
SHAPES = ((1, 16), (8, 128))
CONV_CHANNELS = (3, 32, 32, 32, 32, 32)
CONV_INPUT = (8, 3, 64, 64)
PROMPT, NEW_TOKENS = 16, 32
# At 2 threads packrt's numba (OpenMP) and OpenBLAS pools spin against each other on two cores and
# a case takes 5-30x its 1-thread time (measured: 82 s for the decode case), so the 2-thread run
# keeps the cases the issue sets 2-thread targets for: fp32 encoders at B=8 S=128, conv net, decode.
TWO_THREAD_SKIP = "2 threads: only fp32 B=8 S=128 encoders, conv net and decode (run time; see TWO_THREAD_SKIP)"


def _targets(case: str, threads: int) -> float | None:
    """The issue's packrt / torch targets (docs/benchmarks.md); None where it sets none."""
    if case.startswith("model-decode"):
        return 1.0
    if case.startswith("model-convnet"):
        return 1.5
    if "-8x128-" in case:
        if "-bf16-" in case:
            return 2.0
        return 1.0 if threads == 1 else 1.1
    return None


def _transformers() -> ModuleType:
    require_torch()
    return pytest.importorskip("transformers", reason="transformers is not installed (nox -s benchmarks pins it)")


def _packrt_models(*names: str) -> ModuleType:
    models = pytest.importorskip("packrt.models", reason="the packrt meta-package is not installed")
    missing = [n for n in names if not hasattr(models, n)]
    if missing:
        pytest.skip(f"packrt.models has no {', '.join(missing)} yet; this benchmark lights up when it lands")
    return models


def _smoke(config: pytest.Config) -> bool:
    return bool(config.getoption("benchmark_disable", False))


def _run_case(
    request: pytest.FixtureRequest, case: str, calls: dict[str, Callable[[], Any]], threads: int, **extra: Any
) -> None:
    """Time packrt and its reference interleaved, check the one-core limit, and record both."""
    if _smoke(request.config):
        return
    try:
        results = race(calls, threads)
    finally:
        apply_thread_cap(int(request.config.getoption("--bench-threads") or threads))
    target = _targets(case, threads)
    for impl, (times, use) in results.items():
        use.check(threads, f"{case} [{impl}]")
        info = dict(extra)
        if impl.startswith("packrt") and target is not None:
            info["target_ratio_vs_torch"] = target
        record_model_case(request.node.originalname, case, impl, times, use, threads, **info)


# -- model builders, cached for the module: each is reused across shapes and thread counts ------------------
_CACHE: dict[tuple[Any, ...], Any] = {}


def _cached(key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
    if key not in _CACHE:
        _CACHE[key] = build()
    return _CACHE[key]


def _encoder_pair(name: str, dtype: str, where: Path) -> tuple[Any, Any, Any]:
    """(transformers model in ``dtype``, its float32 copy for the check, packrt model from the same files)."""
    torch, transformers = require_torch(), _transformers()
    models = _packrt_models("from_pretrained")
    hidden, layers, heads, intermediate = ENCODERS[name]
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=512,
    )
    torch.manual_seed(17)
    reference = transformers.BertModel(config, add_pooling_layer=False).eval()
    if dtype == "bf16":
        reference = reference.to(torch.bfloat16)
    directory = where / f"{name}-{dtype}"
    reference.save_pretrained(directory)
    checker = copy.deepcopy(reference).float() if dtype == "bf16" else reference
    return reference, checker, models.from_pretrained(directory)


def _ids(torch: ModuleType, shape: tuple[int, int], vocab: int, seed: int) -> tuple[Any, Any]:
    import packrt

    ids = torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))
    return ids, packrt.from_numpy(ids.numpy().copy())


@pytest.mark.parametrize("threads", THREADS, ids=[f"{n}t" for n in THREADS])
@pytest.mark.parametrize(("batch", "seq"), SHAPES, ids=[f"{b}x{s}" for b, s in SHAPES])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("name", list(ENCODERS))
def test_bert_encoder(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    dtype: str,
    batch: int,
    seq: int,
    threads: int,
) -> None:
    torch = require_torch()
    reference, checker, model = _cached(
        ("encoder", name, dtype), lambda: _encoder_pair(name, dtype, tmp_path_factory.mktemp("encoders"))
    )
    ids, packrt_ids = _ids(torch, (batch, seq), VOCAB, seed=batch * 1000 + seq)
    with torch.inference_mode():
        expected = checker(input_ids=ids).last_hidden_state

    def torch_call() -> Any:
        with torch.inference_mode():
            return reference(input_ids=ids).last_hidden_state

    def packrt_call() -> Any:
        return model(packrt_ids)

    case = f"model-{name}-{dtype}-{batch}x{seq}-{threads}t"
    if threads > 1 and (dtype, batch) != ("fp32", 8):
        pytest.skip(TWO_THREAD_SKIP)
    apply_thread_cap(threads)
    check_close(packrt_call(), expected, dtype, f"packrt {case}")
    check_close(torch_call(), expected, dtype, f"torch {case}")
    _run_case(request, case, {"packrt": packrt_call, "torch": torch_call}, threads, tolerance=TOLERANCE[dtype])


def _conv_pair() -> tuple[Any, Any]:
    torch = require_torch()
    import packrt
    from packrt import nn

    torch.manual_seed(23)
    pairs = list(itertools.pairwise(CONV_CHANNELS))
    layers: list[Any] = []
    for cin, cout in pairs:
        layers += [torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.ReLU()]
    reference = torch.nn.Sequential(*layers).eval()
    with packrt.meta_init():
        mine: list[Any] = []
        for cin, cout in pairs:
            mine += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU()]
        model = nn.Sequential(*mine)
    state = {k: packrt.from_numpy(v.detach().numpy().copy()) for k, v in reference.state_dict().items()}
    model.load_state_dict(state, assign=True)
    return reference, model


@pytest.mark.parametrize("threads", THREADS, ids=[f"{n}t" for n in THREADS])
def test_conv_net(request: pytest.FixtureRequest, threads: int) -> None:
    torch = require_torch()
    import packrt

    reference, model = _cached(("convnet",), _conv_pair)
    x = np.random.default_rng(29).standard_normal(CONV_INPUT, dtype=np.float32)
    tx, px = torch.from_numpy(x), packrt.from_numpy(x)

    def torch_call() -> Any:
        with torch.inference_mode():
            return reference(tx)

    def packrt_call() -> Any:
        return model(px)

    case = f"model-convnet-5x3x3-fp32-{'x'.join(map(str, CONV_INPUT))}-{threads}t"
    apply_thread_cap(threads)
    expected = torch_call()
    check_close(packrt_call(), expected, "fp32", f"packrt {case}")
    _run_case(request, case, {"packrt": packrt_call, "torch": torch_call}, threads)


# The decode case's model: a small grouped-query Llama (8 heads sharing 4 key/value heads), untied head.
_DECODER_SHAPE: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 512,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "intermediate_size": 1408,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
    "initializer_range": 0.1,
}


def _decoder_pair(where: Path) -> tuple[Any, Any]:
    torch, transformers = require_torch(), _transformers()
    models = _packrt_models("from_pretrained")
    config = transformers.LlamaConfig(**_DECODER_SHAPE)
    torch.manual_seed(31)
    reference = transformers.LlamaForCausalLM(config).eval()
    directory = where / "llama"
    reference.save_pretrained(directory)
    model = models.from_pretrained(directory)
    if not hasattr(model, "generate"):
        pytest.skip("packrt.models' causal LM has no generate() yet; this benchmark lights up when it lands")
    return reference, model


@pytest.mark.parametrize("threads", THREADS, ids=[f"{n}t" for n in THREADS])
def test_greedy_decode(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, threads: int) -> None:
    torch, transformers = require_torch(), _transformers()
    reference, model = _cached(("decoder",), lambda: _decoder_pair(tmp_path_factory.mktemp("decoder")))
    ids, packrt_ids = _ids(torch, (1, PROMPT), VOCAB, seed=37)
    # Exactly NEW_TOKENS new tokens on both sides: no end-of-sequence stop, a cache in transformers (its default).
    generation = transformers.GenerationConfig(
        do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=0
    )

    def torch_call() -> Any:
        with torch.inference_mode():
            return reference.generate(ids, generation_config=generation, use_cache=True)

    def packrt_call() -> Any:
        return model.generate(packrt_ids, NEW_TOKENS, eos_token_id=None)

    case = f"model-decode-llama-greedy{NEW_TOKENS}-fp32-1x{PROMPT}-{threads}t"
    apply_thread_cap(threads)
    want = torch_call().numpy()
    got = np.asarray(packrt_call().numpy())
    assert want.shape == (1, PROMPT + NEW_TOKENS), f"torch {case}: generated shape {want.shape}"
    assert got.shape == want.shape, f"packrt {case}: generated shape {got.shape} != transformers' {want.shape}"
    differ = np.flatnonzero(got[0] != want[0])
    assert differ.size == 0, f"packrt {case}: tokens differ from transformers' from position {differ[:1]}"
    _run_case(request, case, {"packrt": packrt_call, "torch": torch_call}, threads)
