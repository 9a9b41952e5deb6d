"""``packrt warmup``: compile, once per machine, every CPU kernel signature the given models serve with.

packrt's fused CPU kernels are compiled by numba on their first call and kept on disk
(``packrt_kernels_cpu.kernel_cache``: ``PACKRT_CACHE_DIR``, by default ``~/.cache/packrt``,
shared by every venv holding the same kernel sources). Without a warm cache the first forward
of a fresh process spends seconds compiling; ``packrt warmup DIR...`` spends them ahead of time
(an image build, a deploy step), so a serving process only loads machine code.

Each directory is loaded the way it is served (a sentence-transformers directory as a
:class:`~packrt.models.SentenceEncoder`, any other with :func:`~packrt.models.from_pretrained`)
and run at the shapes given (default ``1x16`` and ``8x128``: the one-thread road of small
inputs and the pooled road of large ones take different kernels); a causal LM also generates a
few tokens at batch 1, the decode road. Shapes past a model's positions are clipped to them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import packrt

DEFAULT_SHAPES: tuple[tuple[int, int], ...] = ((1, 16), (8, 128))
_DECODE_TOKENS = 4


@dataclass(frozen=True)
class WarmupResult:
    """What one warmup did: the models run, the kernel signatures compiled in this process (cache misses,
    written to the cache), those loaded from the cache instead (hits), the cache directory, the wall time."""

    models: tuple[str, ...]
    compiled: int
    loaded: int
    cache_dir: str
    seconds: float


def parse_shape(text: str) -> tuple[int, int]:
    """``"8x128"`` -> (8, 128); a ValueError naming the text and the expected form otherwise."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"shape {text!r} is not BATCHxSEQ with two positive integers (e.g. 8x128)")
    return int(parts[0]), int(parts[1])


def _kernel_stats() -> tuple[int, int, str]:
    """(signatures compiled, signatures loaded from the cache, cache directory) over packrt's numba kernels
    in this process ((0, 0, '') where numba is unavailable)."""
    from packrt_kernels_cpu import compiled

    if not compiled.enabled():
        return 0, 0, ""
    from packrt_kernels_cpu import kernel_cache

    misses, hits = kernel_cache.cache_counts(compiled.kernels())
    return misses, hits, str(kernel_cache.kernel_cache_dir())


def _ids(batch: int, seq: int, vocab: int) -> packrt.Tensor:
    ids = np.random.default_rng(batch * 1000 + seq).integers(0, max(1, min(vocab, 1000)), (batch, seq))
    return packrt.from_numpy(ids.astype(np.int64))


def _run_sentence(directory: Path, shapes: Sequence[tuple[int, int]], dtype: str | None) -> None:
    from packrt.models import SentenceEncoder

    encoder = SentenceEncoder.from_pretrained(directory, dtype=dtype)
    for batch, seq in shapes:
        # words of one token each; [CLS]/[SEP] make it seq tokens, the tokenizer's truncation the rest
        text = " ".join(["word"] * max(1, seq - 2))
        encoder.encode([text] * batch, batch_size=batch)


def _run_model(directory: Path, shapes: Sequence[tuple[int, int]], dtype: str | None, *, decode: bool) -> None:
    """The model at ``directory`` (a Hugging Face directory or a GGUF file) run at ``shapes``, then decoding."""
    from packrt.models import CausalLM, from_pretrained

    model: Any = from_pretrained(directory, dtype=dtype)  # reads config.json first (a CheckpointError if bad)
    if isinstance(model, CausalLM):  # a directory's or a GGUF file's: the model says its vocabulary and bound
        vocab, limit = model.vocab, model.positions_bound
    else:
        config = json.loads((directory / "config.json").read_text())
        vocab = int(config.get("vocab_size") or 1000)
        limit = config.get("max_position_embeddings") or config.get("n_positions")
    for batch, seq in shapes:
        seq = min(seq, limit) if limit else seq
        model(_ids(batch, seq, vocab))
    if decode:
        prompt = min(16, (limit or 32) - _DECODE_TOKENS)
        model.generate(_ids(1, max(1, prompt), vocab), _DECODE_TOKENS, eos_token_id=None)  # every step compiles


def warmup(
    directories: Sequence[str | os.PathLike[str]],
    shapes: Sequence[tuple[int, int]] = DEFAULT_SHAPES,
    dtype: str | None = None,
) -> WarmupResult:
    """Run each model directory at ``shapes`` (and a short decode for causal LMs), so every kernel
    signature they serve with is compiled into the kernel cache. Loading errors are packrt's own
    (:class:`~packrt.errors.CheckpointError` naming the file)."""
    started = time.perf_counter()
    done = []
    from packrt.models import describe

    for entry in directories:
        directory = Path(os.fspath(entry))
        described = describe(directory)  # the answer packrt serve reads: served the way it will be served
        if described.sentence_transformers:
            _run_sentence(directory, shapes, dtype)
        else:
            _run_model(directory, shapes, dtype, decode=described.kind == "causal-lm")
        done.append(str(directory))
    compiled, loaded, cache_dir = _kernel_stats()
    return WarmupResult(tuple(done), compiled, loaded, cache_dir, time.perf_counter() - started)


__all__ = ["DEFAULT_SHAPES", "WarmupResult", "parse_shape", "warmup"]
