"""The demo's real-model part runs in its quick mode and prints what a reader looks for."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from packrt import demo_pretrained


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


def test_the_llama_part_generates_the_same_tokens_as_transformers(
    transformers: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo_pretrained.generate_llama(smoke=True)
    out = capsys.readouterr().out
    assert "tok/s (KV cache)" in out and "tokens identical" in out
