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


# -- the tracked summary and the --compare gate ----------------------------------------------------------
def _model_run(ratio: float, kernel_ratio: float = 0.5) -> dict[str, Any]:
    return _run(
        _bench("model-enc-fp32-8x128-1t", "packrt", ratio, target_ratio_vs_torch=1.0),
        _bench("model-enc-fp32-8x128-1t", "torch", 1.0),
        _bench("matmul-fp32-512", "packrt", kernel_ratio),
        _bench("matmul-fp32-512", "numpy", 1.0),
    )


MARGINS = {
    "tracked": [
        {"case": "model-enc-fp32-8x128-1t", "impl": "packrt", "ref": "torch", "margin": 0.2},
        {"case": "matmul-fp32-512", "impl": "packrt", "ref": "numpy", "margin": 0.1},
    ]
}


def _gate(tmp_path: Path, run: dict[str, Any], baseline: dict[str, Any], *extra: str) -> int:
    paths = {}
    for name, content in (("run", run), ("base", baseline), ("margins", MARGINS)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(content))
    args = [str(paths["run"]), "--baseline", str(paths["base"]), "--margins", str(paths["margins"]), *extra]
    return report.main(args)


def test_compare_fails_when_one_tracked_ratio_worsens_beyond_its_margin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeded = _model_run(0.9, kernel_ratio=0.5 * 1.15)  # the kernel case: 15% worse against a 10% margin
    assert _gate(tmp_path, seeded, _model_run(0.9), "--compare") == 1
    err = capsys.readouterr().err
    assert "REGRESSED: matmul-fp32-512 packrt / numpy 0.500 -> 0.575 (1.15x, margin 10%)" in err
    assert "model-enc" not in err


def test_compare_passes_on_an_unchanged_run_and_on_changes_within_the_margins(tmp_path: Path) -> None:
    assert _gate(tmp_path, _model_run(0.9), _model_run(0.9), "--compare") == 0
    assert _gate(tmp_path, _model_run(0.9 * 1.19, kernel_ratio=0.5 * 1.09), _model_run(0.9), "--compare") == 0


def test_a_regression_only_fails_the_run_when_compare_is_asked(tmp_path: Path) -> None:
    assert _gate(tmp_path, _model_run(1.8), _model_run(0.9)) == 0
    assert _gate(tmp_path, _model_run(1.8), _model_run(0.9), "--compare") == 1


def test_summary_table_comes_first_with_ratio_baseline_change_and_flag(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    _gate(tmp_path, _model_run(1.35), _model_run(0.9), "--markdown", str(out))
    text = out.read_text()
    assert text.index("## Tracked ratios") < text.index("## Machine") < text.index("## Ratios")
    assert "| model-enc-fp32-8x128-1t / torch | 1.35 | 0.90 | 1.50x | 20% | REGRESSED | <= 1.0: MISSED |" in text
    assert "| matmul-fp32-512 / numpy | 0.50 | 0.50 | 1.00x | 10% | ok | - |" in text


def test_compare_without_a_baseline_is_an_error_not_a_pass(tmp_path: Path) -> None:
    results, margins = tmp_path / "run.json", tmp_path / "margins.json"
    results.write_text(json.dumps(_model_run(0.9)))
    margins.write_text(json.dumps(MARGINS))
    assert report.main([str(results), "--no-baseline", "--margins", str(margins), "--compare"]) == 2


def test_margins_are_twice_the_measured_spread_plus_a_floor_and_capped_so_1_5x_always_fails() -> None:
    runs = [_model_run(r, kernel_ratio=k) for r, k in ((1.0, 0.50), (1.1, 0.50), (1.05, 0.80))]
    derived = {(t["case"], t["ref"]): t for t in report.derive_margins(runs)["tracked"]}
    model = derived["model-enc-fp32-8x128-1t", "torch"]
    assert model["spread"] == pytest.approx(0.1)
    assert model["margin"] == pytest.approx(2 * 0.1 + report.MARGIN_FLOOR)
    kernel = derived["matmul-fp32-512", "numpy"]  # spread 60%: capped below 50%
    assert kernel["margin"] == report.MAX_MARGIN < 0.5
    assert kernel["capped"] is True


def test_write_margins_refuses_fewer_than_three_runs(tmp_path: Path) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps(_model_run(1.0)))
    with pytest.raises(SystemExit, match="2"):
        report.main([str(run), str(run), "--write-margins", str(tmp_path / "m.json")])


def test_flops_table_gives_achieved_gflops_and_the_core_use() -> None:
    run = _run(_bench("matmul-fp32-512", "packrt", 0.01, flops=2 * 512**3, threads=1, cpu_per_wall=1.01))
    assert report.flops_table(run)[-1] == "| matmul-fp32-512 | packrt | 1 | 26.8 | 1.01 |"


def test_plot_draws_the_tracked_ratios_across_baselines_as_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib (nox -s benchmarks installs it)")
    history = [("2026-01-01-a", _model_run(1.2)), ("this run", _model_run(0.9))]
    tracked = [("model-enc-fp32-8x128-1t", "packrt", "torch"), ("matmul-fp32-512", "packrt", "numpy")]
    path = tmp_path / "plot.png"
    report.plot(history, tracked, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_newest_baseline_is_the_last_run_not_the_last_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stamps = {"z-oldest.json": "2026-01-01T00:00:00", "a-newest.json": "2026-03-01T00:00:00", "m.json": "2026-02-01"}
    for name, stamp in stamps.items():
        (tmp_path / name).write_text(json.dumps({**RUN, "datetime": stamp}))
    monkeypatch.setattr(report, "BASELINES", tmp_path)
    assert [p.name for p in report.stored_baselines()] == ["z-oldest.json", "m.json", "a-newest.json"]
    assert report.newest_baseline() == tmp_path / "a-newest.json"


# -- baselines are kept per kind of CPU ------------------------------------------------------------------
ZEN4 = {
    "brand_raw": "AMD EPYC",
    "vendor_id_raw": "AuthenticAMD",
    "family": 25,
    "model": 17,
    "flags": ["avx2", "avx512f"],
}
XEON = {"brand_raw": "Intel Xeon", "vendor_id_raw": "GenuineIntel", "family": 6, "model": 143, "flags": ["amx_tile"]}


def _on(cpu: dict[str, Any], run: dict[str, Any], stamp: str = "2026-01-01T00:00:00") -> dict[str, Any]:
    return {**run, "datetime": stamp, "machine_info": {"cpu_count": 2, "cpu": cpu}}


def test_the_kind_of_cpu_names_vendor_family_model_and_the_vector_extensions_the_kernels_use() -> None:
    assert report.cpu_kind(_on(ZEN4, RUN)) == "AMD EPYC (AuthenticAMD family 25 model 17; avx2,avx512f)"
    assert report.cpu_kind(_on({**ZEN4, "family": 26}, RUN)) != report.cpu_kind(_on(ZEN4, RUN))
    assert report.cpu_kind(RUN) == "unknown"


def test_the_default_baseline_is_the_newest_run_on_the_same_kind_of_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "zen4.json").write_text(json.dumps(_on(ZEN4, RUN, "2026-01-01T00:00:00")))
    (tmp_path / "xeon.json").write_text(json.dumps(_on(XEON, RUN, "2026-02-01T00:00:00")))
    monkeypatch.setattr(report, "BASELINES", tmp_path)
    assert report.newest_baseline(report.cpu_kind(_on(ZEN4, RUN))) == tmp_path / "zen4.json"
    assert report.newest_baseline() == tmp_path / "xeon.json"


def test_the_plot_joins_only_runs_made_on_the_kind_of_cpu_this_run_was_made_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "zen4-old.json").write_text(json.dumps(_on(ZEN4, RUN, "2026-01-01T00:00:00")))
    (tmp_path / "xeon.json").write_text(json.dumps(_on(XEON, RUN, "2026-02-01T00:00:00")))
    (tmp_path / "zen4-new.json").write_text(json.dumps(_on(ZEN4, RUN, "2026-03-01T00:00:00")))
    monkeypatch.setattr(report, "BASELINES", tmp_path)
    now = _on(ZEN4, RUN, "2026-04-01T00:00:00")
    assert [label for label, _ in report.same_kind_history(now)] == ["zen4-old", "zen4-new", "this run"]


def test_compare_never_judges_a_run_against_a_baseline_from_another_kind_of_cpu_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    regressed, base = _on(ZEN4, _model_run(1.8)), _on(XEON, _model_run(0.9))
    assert _gate(tmp_path, regressed, base, "--compare") == 0
    assert "ran on another kind of CPU" in capsys.readouterr().err
    assert _gate(tmp_path, regressed, _on(ZEN4, _model_run(0.9)), "--compare") == 1  # same kind: judged


def test_compare_is_skipped_with_the_fix_when_no_stored_baseline_ran_on_this_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = tmp_path / "baselines"
    stored.mkdir()
    (stored / "xeon.json").write_text(json.dumps(_on(XEON, _model_run(0.9))))
    monkeypatch.setattr(report, "BASELINES", stored)
    results, margins = tmp_path / "run.json", tmp_path / "margins.json"
    results.write_text(json.dumps(_on(ZEN4, _model_run(1.8))))
    margins.write_text(json.dumps(MARGINS))
    assert report.main([str(results), "--margins", str(margins), "--compare"]) == 0
    err = capsys.readouterr().err
    assert "--compare skipped: no stored baseline ran on this kind of CPU" in err
    assert "--save-baseline" in err


def _missing(case: str, impl: str, reason: str) -> dict[str, Any]:
    return {"group": case, "name": f"test[{impl}]", "extra_info": {"impl": impl, "case": case, "missing": reason}}


PEER_RUN = _run(
    _bench("peer-enc", "packrt", 3.0, max_abs_diff=1e-6),
    _bench("peer-enc", "packrt-int8", 1.0, max_abs_diff=0.03),
    _bench("peer-enc", "torch", 4.0),
    _bench("peer-enc", "ort-fp32", 2.0, max_abs_diff=5e-7),
    _bench("peer-enc", "ct2-fp32", 6.0, max_abs_diff=6e-7),
    _bench("peer-enc", "ct2-int8", 0.5, max_abs_diff=0.05),
    _missing("peer-enc", "ort-int8", "quantize_dynamic failed: boom"),
    _bench("peer-dec", "packrt", 1.0, tokens=32, tokens_agreeing=32, target_ratio_vs_peer=1.0),
    _bench("peer-dec", "torch", 2.0, tokens=32, tokens_agreeing=32),
    _bench("peer-dec", "ct2-fp32", 0.8, tokens=32, tokens_agreeing=32),
    _missing("peer-dec", "packrt-int8", "not available in this build: from_pretrained takes no quantize="),
)


def test_packrt_is_divided_by_the_fastest_peer_of_its_own_precision() -> None:
    now = report.ratios(report.medians(PEER_RUN))
    assert now["peer-enc", "packrt"]["best-peer"] == pytest.approx(1.5)  # 3 / ORT fp32's 2, not CT2 int8's 0.5
    assert now["peer-enc", "packrt-int8"]["best-peer"] == pytest.approx(2.0)  # 1 / CT2 int8's 0.5
    assert now["peer-enc", "packrt"]["ct2-fp32"] == pytest.approx(0.5)
    assert now["peer-dec", "packrt"] == {"torch": 0.5, "ct2-fp32": 1.25, "best-peer": 1.25}


def test_a_missing_engine_has_no_ratio_but_its_reason_is_in_the_peer_table() -> None:
    assert "ort-int8" not in report.medians(PEER_RUN)["peer-enc"]
    rows = report.peers_table(PEER_RUN)
    assert "| peer-enc | ort-int8 | missing: quantize_dynamic failed: boom | | | | |" in rows
    assert any(r.startswith("| peer-dec | packrt-int8 | missing: not available in this build") for r in rows)
    assert "| peer-dec | packrt | 1 s | 32.0 | 32/32 | - | - |" in rows
    assert "| peer-enc | 0.75 | 1.50 (ort-fp32) | 2.00 (ct2-int8) |" in rows


def test_peer_cases_are_tracked_against_torch_and_the_best_peer_with_their_targets() -> None:
    tracked = report.default_tracked(report.ratios(report.medians(PEER_RUN)))
    assert ("peer-dec", "packrt", "best-peer") in tracked and ("peer-dec", "packrt", "torch") in tracked
    assert ("peer-enc", "packrt-int8", "best-peer") in tracked
    assert ("peer-enc", "packrt-int8", "torch") not in tracked  # int8 is compared with int8 peers only
    rows = report.compare(PEER_RUN, None, dict.fromkeys(tracked, 0.2))
    dec = next(r for r in rows if (r["case"], r["ref"]) == ("peer-dec", "best-peer"))
    assert (dec["ratio"], dec["target"], dec["flag"]) == (1.25, 1.0, "new")


def test_a_peer_ratio_that_worsened_past_its_margin_fails_compare(tmp_path: Path) -> None:
    worse = json.loads(json.dumps(PEER_RUN))
    for bench in worse["benchmarks"]:
        if bench["extra_info"]["impl"] == "packrt" and bench["group"] == "peer-dec":
            bench["stats"] = {"min": 2.0, "median": 4.0}
    margins = tmp_path / "margins.json"
    entry = {"case": "peer-dec", "impl": "packrt", "ref": "best-peer", "margin": 0.2}
    margins.write_text(json.dumps({"tracked": [entry]}))
    base, same, run = tmp_path / "base.json", tmp_path / "same.json", tmp_path / "run.json"
    base.write_text(json.dumps(PEER_RUN))
    same.write_text(json.dumps(PEER_RUN))
    run.write_text(json.dumps(worse))
    assert report.main([str(run), "--baseline", str(base), "--margins", str(margins), "--compare"]) == 1
    assert report.main([str(same), "--baseline", str(base), "--margins", str(margins), "--compare"]) == 0


def test_the_standing_names_its_run_and_gives_every_tracked_ratio_with_its_target_and_the_peer_table() -> None:
    text = report.standing(PEER_RUN, "2026-01-01-test.json")
    assert text.startswith("From `2026-01-01-test.json`")
    assert "| peer-dec / best-peer | 1.25 | <= 1.0: missed |" in text  # a target missed is said so
    assert "| peer-enc | ort-int8 | missing: quantize_dynamic failed: boom | | | | |" in text
    assert "baseline ratio" not in text and "change" not in text  # a position, not a change
