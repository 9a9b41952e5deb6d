"""The demo's timing rules: contestants take turns, a ratio is printed with its threads and load, and read
in plain words. (No timing is asserted: the rules are checked on given times and recorded call orders.)"""

from __future__ import annotations

import io
import os
import sys
from types import ModuleType

import pytest

from packrt import demo_timing
from packrt.demo_timing import Race, race


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
