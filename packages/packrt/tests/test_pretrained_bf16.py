"""``from_pretrained(..., dtype="bfloat16")`` on float32 checkpoints: the accuracy the half-precision guide
states. On a CPU with AVX512-BF16 the Linears multiply bfloat16 panels by bfloat16-rounded activations
(packrt_kernels_cpu.float_tiles); elsewhere their weights are widened to float32 panels. Either road: the
real MiniLM's vectors within cosine 0.9999 of float32's on every text, and a llama-shaped model's 32
greedy tokens float32's, or parted from them only at a near tie."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import ml_dtypes
import numpy as np
import pytest
from test_pretrained_int8 import SMALL_LLAMA, TEXTS

import packrt
from packrt.models import SentenceEncoder, from_pretrained
from packrt_kernels_cpu import float_tiles

ROAD = "bfloat16 panels" if float_tiles.available(ml_dtypes.bfloat16) else "float32 panels or BLAS"
GREEDY = 32
NEAR_TIE = 0.02  # of the logits' spread: float32 itself ranks tokens this close by noise of its own sums


def test_bf16_minilm_embeddings_stay_within_cosine_0_9999_of_float32_on_every_text(minilm_dir: Path) -> None:
    """Measured on a Zen 4 (bfloat16 panels): lowest 0.99991, mean 0.99996."""
    exact = SentenceEncoder.from_pretrained(minilm_dir).encode(TEXTS, batch_size=8)
    half = SentenceEncoder.from_pretrained(minilm_dir, dtype="bfloat16")
    assert {str(p.dtype) for p in half.model.parameters()} == {"packrt.bfloat16"}
    ours = np.asarray(half.encode(TEXTS, batch_size=8), np.float32)
    cosine = np.sum(ours * exact, axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(exact, axis=1))
    assert cosine.min() >= 0.9999, f"{ROAD}: lowest cosine to float32 {cosine.min():.6f} (text {cosine.argmin()})"


@pytest.fixture(scope="module")
def llama_dir(transformers: ModuleType, torch: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("llama")
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL_LLAMA)).eval()
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def test_bf16_greedy_decode_is_float32s_or_parts_from_it_only_at_a_near_tie(llama_dir: Path) -> None:
    """Measured on a Zen 4 (bfloat16 panels): the 4 rows identical for all 32 tokens."""
    prompt = packrt.from_numpy(np.random.default_rng(1).integers(1, 97, (4, 6)).astype(np.int64))
    exact, half = from_pretrained(llama_dir), from_pretrained(llama_dir, dtype="bfloat16")
    theirs, ours = exact.generate(prompt, GREEDY).numpy(), half.generate(prompt, GREEDY).numpy()
    assert len(set(theirs[:, 6:].ravel().tolist())) > 20, "the generation is degenerate: the test would prove little"
    logits = exact(packrt.from_numpy(ours)).numpy()  # float32's view of each step bfloat16 took
    for row in range(ours.shape[0]):
        parted = np.flatnonzero(ours[row] != theirs[row])
        if parted.size == 0:
            continue
        step = int(parted[0])
        seen = logits[row, step - 1]
        gap = float(seen.max() - seen[ours[row, step]])
        assert gap <= NEAR_TIE * float(seen.std()), (
            f"{ROAD}: row {row} parts from float32 at token {step - 6} by a logit gap of {gap:.4g} "
            f"(spread {seen.std():.4g}): not a near tie"
        )
