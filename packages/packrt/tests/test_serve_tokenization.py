"""``packrt serve`` tokenizes each embedded text once: the request's encodings go on the queue, the limits and the
usage count read them, and the model call is assembled from them (as TEI queues token ids)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")

import httpx2 as httpx
from serving import running

from packrt.models import SentenceEncoder
from packrt.serve import ServedModel, ServeLimits

BOUND = 16
TEXTS = ["hello world", "the cat sat on the mat " * 10, "a", "the dog ran and then stopped here", "hello world"]


class CountingTokenizer:
    """A ``tokenizers.Tokenizer`` that counts the texts it tokenizes (every other call passes through)."""

    def __init__(self, inner: Any, counts: list[str]) -> None:
        self.inner, self.counts = inner, counts

    def encode(self, text: str, *args: Any, **kwargs: Any) -> Any:
        self.counts.append(text)
        return self.inner.encode(text, *args, **kwargs)

    def encode_batch(self, texts: list[str], *args: Any, **kwargs: Any) -> Any:
        self.counts.extend(texts)
        return self.inner.encode_batch(texts, *args, **kwargs)

    def encode_batch_fast(self, texts: list[str], *args: Any, **kwargs: Any) -> Any:
        self.counts.extend(texts)
        return self.inner.encode_batch_fast(texts, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_each_served_text_is_tokenized_once_and_gets_sentence_encoders_vector(encoder_dir: Path) -> None:
    served = ServedModel.load(encoder_dir)
    tokenized: list[str] = []
    assert served.encoder is not None and served.encoder.tokenizer is served.tokenizer
    served.tokenizer = served.encoder.tokenizer = CountingTokenizer(served.tokenizer, tokenized)  # type: ignore[assignment]
    served.counter = CountingTokenizer(served.counter, tokenized)  # type: ignore[assignment]
    with running(served, ServeLimits(max_tokens_per_text=BOUND)) as server:
        answer = httpx.post(
            f"{server.base}/v1/embeddings",
            content=json.dumps({"input": TEXTS, "encoding_format": "float"}).encode(),
            headers={"content-type": "application/json"},
            timeout=120,
        )
    assert answer.status_code == 200, answer.text
    assert sorted(tokenized) == sorted(TEXTS)  # one tokenization per text: none for the limits, none in the batch
    reference = SentenceEncoder.from_pretrained(encoder_dir)
    counts = [len(reference.tokenizer.encode(text).ids) for text in TEXTS]  # within the model's 128 positions
    assert answer.json()["usage"]["prompt_tokens"] == sum(min(count, BOUND) for count in counts)
    reference.tokenizer.enable_truncation(max_length=BOUND)
    got = np.asarray([item["embedding"] for item in answer.json()["data"]])
    np.testing.assert_allclose(got, reference.encode(TEXTS), atol=2e-6)
