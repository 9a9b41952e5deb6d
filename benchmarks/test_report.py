"""report.py's promises, checked on a synthetic pytest-benchmark JSON (no timing involved)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import report


def _bench(case: str, impl: str, seconds: float, **extra: Any) -> dict[str, Any]:
    return {
        "group": case,
        "name": f"test[{impl}]",
        "extra_info": {"impl": impl, "case": case, **extra},
        "stats": {"min": seconds, "median": seconds * 2},
    }


def _run(*benches: dict[str, Any]) -> dict[str, Any]:
    return {"datetime": "2026-01-01T00:00:00", "machine_info": {"cpu_count": 2}, "benchmarks": list(benches)}


RUN = _run(
    _bench("matmul", "packrt", 2.0),
    _bench("matmul", "numpy", 1.0),
    _bench("matmul", "torch", 4.0),
    _bench("call", "packrt", 0.5, target_ratio_vs_torch=0.7),
    _bench("call", "torch", 1.0),
    _bench("pack", "packrt-packed", 1.0, memory={"weight_bytes": 1024, "kept_bytes": 2048, "peak_bytes": 0}),
)


def test_ratio_is_packrt_time_over_each_reference_from_the_same_run() -> None:
    assert report.ratios(report.medians(RUN)) == {
        ("matmul", "packrt"): {"numpy": 2.0, "torch": 0.5},
        ("call", "packrt"): {"torch": 0.5},
        ("pack", "packrt-packed"): {},
    }


def test_median_statistic_is_used_when_asked() -> None:
    assert report.medians(RUN, "median")["matmul"] == {"packrt": 4.0, "numpy": 2.0, "torch": 8.0}


def test_table_shows_baseline_ratios_and_targets_side_by_side() -> None:
    baseline = _run(_bench("matmul", "packrt", 1.0), _bench("matmul", "numpy", 1.0))
    rows = report.ratio_table(RUN, baseline)
    assert "| matmul | packrt | 2 s | 2.00 | 0.50 | 1.00 | - |" in rows
    assert any("0.50 (target <= 0.7)" in row for row in rows)


def test_memory_table_reports_kept_bytes_against_declared_bytes() -> None:
    rows = report.memory_table(RUN)
    assert rows[-1] == "| pack | 1.00 KiB | 2.00 KiB | 2.00x | 0 B |"


def test_openblas_overrides_in_the_run_are_flagged() -> None:
    run = dict(RUN, machine_info={"openblas_overrides": {"OPENBLAS_CORETYPE": "Haswell"}})
    assert any("WARNING: OPENBLAS_CORETYPE=Haswell" in line for line in report.machine_lines(run))


def test_main_writes_markdown_and_skips_a_baseline_that_is_the_run_itself(tmp_path: Path) -> None:
    results, out = tmp_path / "run.json", tmp_path / "out" / "report.md"
    results.write_text(json.dumps(RUN))
    assert report.main([str(results), "--baseline", str(results), "--markdown", str(out)]) == 0
    text = out.read_text()
    assert "| matmul | packrt | 2 s | 2.00 | 0.50 |" in text
    assert "baseline / numpy" not in text


def test_a_file_that_is_not_benchmark_output_is_refused_with_its_name(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"not": "it"}))
    with pytest.raises(SystemExit, match=r"bad\.json is not pytest-benchmark output"):
        report.load(bad)
    with pytest.raises(SystemExit, match=r"cannot read benchmark results .*missing\.json"):
        report.load(tmp_path / "missing.json")


def test_saved_baseline_keeps_statistics_and_drops_raw_rounds(tmp_path: Path) -> None:
    run = _run(dict(_bench("matmul", "packrt", 2.0), stats={"min": 2.0, "median": 2.0, "data": [2.0] * 5}))
    saved = tmp_path / "base" / "b.json"
    report.save_baseline(run, saved)
    stored = json.loads(saved.read_text())
    assert stored["benchmarks"][0]["stats"] == {"min": 2.0, "median": 2.0}
    assert report.medians(stored) == report.medians(run)
