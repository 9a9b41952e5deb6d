"""The demo's real-model part runs in its quick mode and prints what a reader looks for."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from packrt import demo_http, demo_pretrained


def test_the_similarity_table_numbers_rows_and_columns() -> None:
    vectors = np.eye(2, dtype=np.float32)
    table = demo_pretrained.similarity_table(["first", "second"], vectors)
    assert table.splitlines()[1].startswith(" 1. first") and "1.00" in table and "0.00" in table


@pytest.mark.usefixtures("minilm_dir", "transformers")
def test_the_minilm_part_prints_similarities_memory_and_the_comparison(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo_pretrained.serve_minilm(smoke=True)
    out = capsys.readouterr().out
    assert "loaded borrowed" in out and "cosine similarity" in out
    assert "packed 0.0 MiB" in out and "transformers" in out and "max |diff|" in out
    assert "x transformers' time for a batch of 6 sentences" in out and "thread(s) each, 1-minute load" in out
    # the same model behind `packrt serve`, asked over HTTP (the serve extra is in packrt[test])
    assert "POST /v1/embeddings with 6 sentences: 200" in out
    served = re.search(r"max \|diff\| against SentenceEncoder (\S+)", out)
    assert served is not None and float(served.group(1)) <= 1e-6, out  # the same encoder in another process
    assert "a request for another model: 404 model_not_found" in out
    assert "SIGTERM: the server drained its requests and shut down" in out


def test_the_http_part_says_why_it_skips_without_the_serve_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    assert not demo_http.serve_over_http(tmp_path, ["a"], np.zeros((1, 2), np.float32), smoke=True)
    assert "the serve extra is not installed (pip install 'packrt[serve]'); skipped" in capsys.readouterr().out


def test_the_llama_part_generates_the_same_tokens_as_transformers(
    transformers: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo_pretrained.generate_llama(smoke=True)
    out = capsys.readouterr().out
    assert "(KV cache): tokens identical to transformers'" in out
    # speed only as ratios measured side by side, with the threads and the load beside them
    assert "packrt took " in out and "x transformers' time for 8 greedy tokens" in out
    assert "packrt borrowed took " in out and "thread(s) each, 1-minute load" in out
    assert "tok/s" not in out
