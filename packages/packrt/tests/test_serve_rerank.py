"""``packrt serve`` on a cross-encoder answers ``POST /rerank`` (and ``/v1/rerank``) in Cohere's shape with the
scores :meth:`CrossEncoder.rank` gives, batches the pairs of concurrent requests, and refuses what it cannot
answer with a 400 naming the field."""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from packrt.models import CrossEncoder

if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")

from serving import running

from packrt.serve.limits import ServeLimits

QUERY = "how do small machines serve models"
DOCUMENTS = [
    "serving models on small machines, quickly and well",
    "The sky is blue today.",
    "models are served",
    "A man is eating food. " * 60,  # over the server's bound: cut with truncate, refused without
]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def _reranker(directory: Path, transformers: ModuleType, minilm: Path, labels: int = 1) -> Path:
    import torch

    torch.manual_seed(3)
    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=labels,
    )
    transformers.BertForSequenceClassification(config).save_pretrained(str(directory))
    for name in TOKENIZER_FILES:
        if (minilm / name).is_file():
            shutil.copy(minilm / name, directory / name)
    return directory


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory: pytest.TempPathFactory, transformers: ModuleType, minilm_dir: Path) -> Path:
    return _reranker(tmp_path_factory.mktemp("reranker"), transformers, minilm_dir)


@pytest.fixture(scope="module")
def server(reranker_dir: Path) -> Iterator[str]:
    with running(reranker_dir, ServeLimits(max_tokens_per_text=64)) as served:
        yield served.base


def _post(base: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _expected(reranker_dir: Path, **keywords: Any) -> list[dict[str, Any]]:
    scorer = CrossEncoder.from_pretrained(reranker_dir)
    scorer.tokenizer.enable_truncation(max_length=64)  # the server's bound
    return scorer.rank(QUERY, DOCUMENTS, **keywords)


def test_rerank_gives_cross_encoder_rank_in_coheres_shape(server: str, reranker_dir: Path) -> None:
    status, body = _post(server, "/rerank", {"query": QUERY, "documents": DOCUMENTS, "return_documents": True})
    assert status == 200, body
    assert body["object"] == "rerank" and body["model"] == reranker_dir.name
    expected = _expected(reranker_dir, return_documents=True)
    assert [r["index"] for r in body["results"]] == [r["corpus_id"] for r in expected]
    assert [r["document"]["text"] for r in body["results"]] == [r["text"] for r in expected]
    np.testing.assert_allclose(
        [r["relevance_score"] for r in body["results"]], [r["score"] for r in expected], atol=1e-5
    )
    assert body["usage"]["total_tokens"] > 0


def test_top_n_and_raw_scores_and_the_v1_path(server: str, reranker_dir: Path) -> None:
    status, body = _post(server, "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS, "top_n": 2, "raw_scores": True})
    assert status == 200, body
    expected = _expected(reranker_dir, top_k=2, activation_fn="identity")
    assert [r["index"] for r in body["results"]] == [r["corpus_id"] for r in expected]
    assert all("document" not in r for r in body["results"])
    np.testing.assert_allclose(
        [r["relevance_score"] for r in body["results"]], [r["score"] for r in expected], atol=1e-5
    )


def test_concurrent_requests_get_their_own_scores(server: str, reranker_dir: Path) -> None:
    queries = [QUERY, "the sky", "food", "machines"]
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda q: _post(server, "/rerank", {"query": q, "documents": DOCUMENTS}), queries))
    scorer = CrossEncoder.from_pretrained(reranker_dir)
    scorer.tokenizer.enable_truncation(max_length=64)
    for query, (status, body) in zip(queries, answers, strict=True):
        assert status == 200, body
        expected = scorer.predict([(query, document) for document in DOCUMENTS])
        got = {r["index"]: r["relevance_score"] for r in body["results"]}
        np.testing.assert_allclose([got[i] for i in range(len(DOCUMENTS))], expected, atol=1e-5)


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"query": QUERY, "documents": []}, 400, r"documents is an empty list"),
        ({"query": QUERY, "documents": ["a", 3]}, 400, r"documents\[1\] is a int, expected a string"),
        ({"query": 3, "documents": ["a"]}, 422, r"^query: Input should be a valid string"),
        ({"query": QUERY, "documents": ["a"], "top_n": 0}, 422, r"^top_n: Input should be greater than or equal to 1"),
        ({"query": QUERY, "documents": DOCUMENTS, "truncate": False}, 400, r"documents\[3\] has \d+ tokens, more than"),
        ({"query": QUERY, "documents": ["a"], "model": "other"}, 404, r"model 'other' is not served here"),
    ],
    ids=["empty", "not-a-string", "query-type", "top_n", "too-long", "wrong-model"],
)
def test_bad_rerank_requests_are_refused_naming_the_field(
    server: str, body: dict[str, Any], status: int, message: str
) -> None:
    import re

    got, answer = _post(server, "/rerank", body)
    assert got == status, answer
    assert re.search(message, answer["error"]["message"]), answer


def test_an_embedding_server_does_not_answer_rerank_nor_a_reranker_embeddings(server: str, encoder_dir: Path) -> None:
    status, body = _post(server, "/v1/embeddings", {"input": ["a"]})
    assert status == 404 and "serves /v1/rerank" in body["error"]["message"]
    with running(encoder_dir) as embedding:
        status, body = _post(embedding.base, "/rerank", {"query": "a", "documents": ["b"]})
    assert status == 404 and "serves /v1/embeddings" in body["error"]["message"]


def test_a_classifier_of_several_labels_is_no_reranker(
    tmp_path: Path, transformers: ModuleType, minilm_dir: Path
) -> None:
    with running(_reranker(tmp_path / "three", transformers, minilm_dir, labels=3)) as served:
        status, body = _post(served.base, "/rerank", {"query": "a", "documents": ["b"]})
    assert status == 400 and "gives 3 scores per pair and ranking needs one" in body["error"]["message"]
