"""The demo's real-model part runs in its quick mode and prints what a reader looks for; its timing rules
(``packrt.demo_timing``): contestants take turns, a ratio is printed with its threads and load and read in
plain words. No timing is asserted: the rules are checked on given times and recorded call orders."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from packrt import demo_http, demo_pretrained, demo_timing
from packrt.demo_timing import Race, race


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


def test_race_warms_each_call_once_then_rotates_who_goes_first() -> None:
    calls: list[str] = []
    # round_s=0: every call counts as long, so each turn is a settling call and one timed call (no burst)
    timed = race({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=2, threads=1, round_s=0)
    assert calls == ["a", "b", "a", "a", "b", "b", "b", "b", "a", "a"]  # warm-up, round 1, round 2 rotated
    assert set(timed.best) == {"a", "b"} and timed.rounds == 2


def test_a_ratio_line_names_the_threads_the_load_and_a_reading() -> None:
    line = Race({"packrt": 0.9, "transformers": 1.0}, rounds=5, threads=2, load=0.5).line("a batch", "transformers")
    assert line.startswith("packrt took 0.90x transformers' time for a batch (fastest of 5 interleaved rounds")
    assert "2 thread(s) each, 1-minute load 0.5 on" in line and line.endswith(": level")


@pytest.mark.parametrize(
    ("ours", "word"), [(0.5, "packrt faster here"), (1.05, "level"), (0.95, "level"), (2.0, "packrt slower here")]
)
def test_ratios_within_ten_percent_of_one_read_as_level(ours: float, word: str) -> None:
    timed = Race({"packrt": ours, "ref": 1.0}, rounds=3, threads=1, load=0.0)
    assert timed.reading(timed.ratio("packrt", "ref")) == word


def test_a_load_above_the_core_count_marks_the_ratio_rough() -> None:
    busy = (os.cpu_count() or 1) + 1.5
    timed = Race({"packrt": 1.0, "ref": 1.0}, rounds=3, threads=1, load=busy)
    assert timed.reading(1.0).startswith(f"level (the machine was busy, load {busy:.1f} >")


def test_progress_bars_go_off_when_stderr_is_not_a_terminal(
    transformers: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    logging = transformers.utils.logging
    was = logging.is_progress_bar_enabled()
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    try:
        logging.enable_progress_bar()
        demo_timing.quiet_progress_bars(transformers)
        assert not logging.is_progress_bar_enabled()
    finally:
        (logging.enable_progress_bar if was else logging.disable_progress_bar)()
