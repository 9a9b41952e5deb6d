"""The same-run A/B (ab.py, ab_stats.py): its statistics on synthetic rounds, and the gate end to end.

The end-to-end tests (marked ``ab_gate``, run with ``--ab-gate``, as ``nox -s benchmarks_ab_gate`` does) copy
the tree's package sources into a scratch folder, seed a 30% slowdown into one kernel there (fused
GELU, wrapped in a busy-wait of 0.3x its own CPU time), and run the A/B gate of a few kernel cases
with the scratch copy as HEAD and this tree as REV: the seeded kernel's case must be flagged and no
other; with no seed, nothing is. No test here asserts a time: only what the gate concluded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import ab
import ab_seed
import ab_stats
import kernel_cases
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SEEDED_CASE = "kernel-gelu"
# The seeded kernel's case, cases on the same compiled loop (SiLU: the same `activation` kernel) or the
# same math by another road (the plan's GELU epilogue), and unrelated row kernels: none may be flagged.
GATE_CASES = [SEEDED_CASE, "kernel-silu", "kernel-epilogue-gelu", "kernel-layer-norm", "kernel-softmax"]
SEED = "packrt_kernels_cpu.fused:gelu"
SLOWDOWN = 0.3


# -- statistics ------------------------------------------------------------------------------------------
def _rounds(ratio: float, n: int = 32, noise: float = 0.03, seed: int = 1) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(seed)
    rev = 1e-4 * np.exp(rng.normal(0, noise, n))
    head = rev * ratio * np.exp(rng.normal(0, noise, n))
    return list(head), list(rev)


def test_estimate_flags_a_30_percent_slowdown_as_regressed() -> None:
    est = ab_stats.estimate(*_rounds(1.3))
    assert est.low > 1.10 and est.flag(1.10) == "REGRESSED"
    assert est.low < 1.3 < est.high


def test_estimate_leaves_equal_sides_ok() -> None:
    est = ab_stats.estimate(*_rounds(1.0))
    assert est.low < 1.0 < est.high
    assert est.flag(1.10) == "ok" and not est.undecided(1.10)


def test_estimate_flags_a_clear_speedup_as_improved() -> None:
    assert ab_stats.estimate(*_rounds(0.7)).flag(1.10) == "improved"


def test_an_interval_straddling_the_threshold_is_ok_and_undecided() -> None:
    est = ab_stats.estimate(*_rounds(1.10, n=12, noise=0.05))
    assert est.low <= 1.10 <= est.high
    assert est.flag(1.10) == "ok" and est.undecided(1.10)


def test_a_few_outlier_rounds_do_not_move_the_estimate() -> None:
    head, rev = _rounds(1.0, noise=0.01)
    head[:3] = [h * 5 for h in head[:3]]  # three rounds hit by a burst on one side only
    est = ab_stats.estimate(head, rev)
    assert 0.97 < est.ratio < 1.03 and est.flag(1.10) == "ok"


def test_disagreeing_worker_pairs_widen_the_interval() -> None:
    head, rev = _rounds(1.0, n=32, noise=0.01)
    pairs = [i % 4 for i in range(32)]
    biased = [h * (1.12 if p == 0 else 0.96) for h, p in zip(head, pairs, strict=True)]  # one pair's processes 12% off
    as_rounds = ab_stats.estimate(biased, rev)
    as_pairs = ab_stats.estimate(biased, rev, pairs)
    assert as_pairs.high - as_pairs.low > 2 * (as_rounds.high - as_rounds.low)
    assert as_pairs.flag(1.10) == "ok"


def test_estimate_refuses_unpaired_rounds() -> None:
    with pytest.raises(ValueError, match="one HEAD and one REV time per round"):
        ab_stats.estimate([1.0, 2.0], [1.0])


def test_estimate_refuses_a_round_whose_clock_did_not_advance() -> None:
    with pytest.raises(ValueError, match="zero or negative"):
        ab_stats.estimate([1.0, 0.0], [1.0, 1.0])


def test_estimate_refuses_a_pair_list_of_another_length() -> None:
    with pytest.raises(ValueError, match="one pair number per round"):
        ab_stats.estimate([1.0, 1.0], [1.0, 1.0], [0])


# -- selection, sources, command line ---------------------------------------------------------------------
def test_quick_selection_is_a_strict_subset_with_the_gelu_case() -> None:
    quick = {c.name for c in kernel_cases.select(quick=True)}
    assert SEEDED_CASE in quick and quick < {c.name for c in kernel_cases.CASES}


def test_an_unknown_case_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(KeyError, match="no kernel case kernel-nope; the cases are: kernel-gelu"):
        kernel_cases.select(["kernel-nope"])


def test_materialise_extracts_the_revision_sources_once(tmp_path: Path) -> None:
    sha, folder = ab.materialise("HEAD", cache=tmp_path)
    assert folder == tmp_path / sha
    assert (folder / "packages" / "packrt-kernels-cpu" / "src" / "packrt_kernels_cpu" / "fused.py").is_file()
    assert not (folder / "packages" / "packrt-kernels-cpu" / "tests").exists()  # the sources only
    stamp = (folder / ".complete").stat().st_mtime_ns
    assert ab.materialise(sha, cache=tmp_path) == (sha, folder)
    assert (folder / ".complete").stat().st_mtime_ns == stamp  # reused, not extracted again


def test_materialise_names_a_revision_that_does_not_resolve(tmp_path: Path) -> None:
    with pytest.raises(ab.ABError, match="rev-parse --verify no-such-rev"):
        ab.materialise("no-such-rev", cache=tmp_path)


def test_a_threshold_not_above_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert ab.main(["--threshold", "0.9", "--quick"]) == 2
    assert "--threshold must be above 1" in capsys.readouterr().err


def test_a_pair_count_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert ab.main(["--pairs", "0", "--quick"]) == 2
    assert "--pairs must be at least 1, got 0" in capsys.readouterr().err


def test_a_tree_without_package_sources_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ab.main(["--against-tree", str(tmp_path), "--cases", SEEDED_CASE]) == 2
    assert "has no packages/*/src: not a packrt tree" in capsys.readouterr().err


def test_a_seed_busy_waits_its_factor_of_the_calls_own_cpu_time(tmp_path: Path) -> None:
    tree = ab_seed.scratch_tree(tmp_path / "tree", [SEED], SLOWDOWN)
    assert "_seed_gelu = gelu" in ab_seed.module_file(tree, "packrt_kernels_cpu.fused").read_text()
    spent: list[float] = []

    def work(n: int) -> int:
        start = time.thread_time()
        total = sum(range(n))
        spent.append(time.thread_time() - start)
        return total

    namespace: dict[str, Any] = {"work": work}
    exec(ab_seed.wrapper_source("work", 1.0), namespace)  # the seed's code, as appended to a module
    start = time.thread_time()
    assert namespace["work"](300_000) == sum(range(300_000))  # the result is the function's own
    # the wrapper spins on this thread's CPU clock until it has added the call's own time again
    assert time.thread_time() - start >= 2 * spent[0]


def test_a_seed_naming_no_function_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="defines no function 'nope' to seed"):
        ab_seed.scratch_tree(tmp_path / "tree", ["packrt_kernels_cpu.fused:nope"])


def test_a_seed_naming_no_module_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"module packrt_kernels_cpu\.nope is not one file"):
        ab_seed.scratch_tree(tmp_path / "tree", ["packrt_kernels_cpu.nope:gelu"])


def test_a_seed_on_a_method_slows_every_instance_of_its_class() -> None:
    class Layer:
        def forward(self, n: int) -> int:
            return sum(range(n))

    namespace: dict[str, Any] = {"Layer": Layer}
    made_before = Layer()
    exec(ab_seed.wrapper_source("Layer.forward", 1.0), namespace)
    for layer in (made_before, Layer()):
        start = time.thread_time()
        assert layer.forward(300_000) == sum(range(300_000))  # self still reaches the method
        spent = time.thread_time() - start
        start = time.thread_time()
        sum(range(300_000))
        assert spent >= 1.5 * (time.thread_time() - start)


def test_a_seed_with_a_condition_slows_only_the_calls_it_names() -> None:
    namespace: dict[str, Any] = {"work": lambda n: sum(range(n))}
    exec(ab_seed.wrapper_source("work", 20.0, when="args[0] % 2 == 1"), namespace)
    start = time.thread_time()
    namespace["work"](200_000)  # even: not seeded
    even = time.thread_time() - start
    start = time.thread_time()
    namespace["work"](200_001)  # odd: 20x its own time again
    odd = time.thread_time() - start
    assert odd > 5 * even


def test_a_seed_condition_that_is_not_an_expression_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--when 'args\[0\] ==' is not a Python expression"):
        ab_seed.scratch_tree(tmp_path / "tree", [SEED], when="args[0] ==")


def test_a_seed_naming_no_class_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="defines no class 'Nope' to seed a method of"):
        ab_seed.scratch_tree(tmp_path / "tree", ["packrt_kernels_cpu.fused:Nope.gelu"])


# -- which cases a change can slow -----------------------------------------------------------------------
def _edit(tree: Path, package: str, text: str = "\n# edited\n") -> None:
    init = next((tree / "packages" / package / "src").glob("*/__init__.py"))
    init.write_text(init.read_text() + text)


def test_an_unchanged_copy_changes_no_package_and_caches_are_not_changes(tmp_path: Path) -> None:
    tree = ab_seed.scratch_tree(tmp_path / "tree", [])
    cache = tree / "packages" / "packrt-core" / "src" / "packrt_core" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "x.nbi").write_bytes(b"numba's index")
    assert ab.changed_packages(tree, ROOT) == set()


def test_an_edited_added_or_removed_file_changes_its_package(tmp_path: Path) -> None:
    tree = ab_seed.scratch_tree(tmp_path / "tree", [])
    _edit(tree, "packrt-kernels-cpu")
    (tree / "packages" / "packrt-io" / "src" / "packrt_io" / "new.py").write_text("X = 1\n")
    next((tree / "packages" / "packrt-hooks" / "src").rglob("*.py")).unlink()
    assert ab.changed_packages(tree, ROOT) == {"packrt-kernels-cpu", "packrt-io", "packrt-hooks"}


def test_a_kernel_change_times_kernel_and_model_cases_a_model_change_only_model_cases() -> None:
    cases = kernel_cases.select(quick=True)
    models = [c for c in cases if c.model]
    assert models and len(models) < len(cases)
    assert ab.touched(cases, {"packrt-kernels-cpu"}) == cases
    assert ab.touched(cases, {"packrt-base", "packrt"}) == cases
    assert ab.touched(cases, {"packrt"}) == models
    assert ab.touched(cases, {"packrt-core", "packrt-io"}) == models
    assert ab.touched(cases, set()) == []


def test_the_gate_times_nothing_when_no_package_source_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = ab_seed.scratch_tree(tmp_path / "tree", [])
    assert ab.main(["--against-tree", str(ROOT), "--tree", str(tree), "--quick", "--changed-only"]) == 0
    out = capsys.readouterr().out
    assert "packages changed against" in out and ": none" in out
    assert "no case's code changed: nothing to time" in out


def _fake_runs(monkeypatch: pytest.MonkeyPatch, verdicts: list[dict[str, str]]) -> list[list[str]]:
    """ab.run_ab replaced by runs answering ``verdicts`` in turn (case -> flag); returns the cases each timed."""
    asked: list[list[str]] = []

    def run_ab(head: Path, rev: Path, names: list[str], *rest: Any) -> dict[str, Any]:
        flags = verdicts[len(asked)]
        asked.append(list(names))
        row = {"head_s": 1e-3, "rev_s": 1e-3, "ratio": 1.0, "low": 0.9, "high": 1.1, "rounds": 24}
        cases = {n: {**row, "calls_per_batch": 1, "flag": flags.get(n, "ok"), "times": {}} for n in names}
        return {"threshold": 1.1, "pairs": 6, "cases": cases, "missing": {}, "wall_s": 1.0}

    monkeypatch.setattr(ab, "run_ab", run_ab)
    return asked


GATE_ARGS = ["--against-tree", str(ROOT), "--cases", "kernel-gelu,kernel-silu", "--confirm"]


def test_a_case_flagged_once_is_timed_again_alone_and_passes_when_the_second_run_clears_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = _fake_runs(monkeypatch, [{"kernel-gelu": "REGRESSED"}, {"kernel-gelu": "ok"}])
    assert ab.main(GATE_ARGS) == 0
    assert asked == [["kernel-gelu", "kernel-silu"], ["kernel-gelu"]]
    assert "no case REGRESSED twice" in capsys.readouterr().out


def test_a_case_flagged_in_both_runs_fails_the_gate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_runs(monkeypatch, [{"kernel-gelu": "REGRESSED"}, {"kernel-gelu": "REGRESSED"}])
    assert ab.main(GATE_ARGS) == 1
    assert "REGRESSED in both runs: kernel-gelu" in capsys.readouterr().out


def test_without_confirm_one_flag_fails_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _fake_runs(monkeypatch, [{"kernel-silu": "REGRESSED"}])
    assert ab.main(GATE_ARGS[:-1]) == 1
    assert len(asked) == 1


# -- the gate end to end ------------------------------------------------------------------------------------
def _scratch_tree(where: Path, seed: bool) -> Path:
    """A copy of this tree's package sources, fused GELU seeded 30% slower when ``seed``."""
    return ab_seed.scratch_tree(where, [SEED] if seed else [], SLOWDOWN)


def _gate(head_tree: Path, out: Path) -> tuple[int, dict[str, str]]:
    """Run the A/B of GATE_CASES (HEAD: ``head_tree``, REV: this tree): (exit status, case -> flag)."""
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "ab.py"),
        "--against-tree",
        str(ROOT),
        "--tree",
        str(head_tree),
    ]
    done = subprocess.run([*command, "--cases", ",".join(GATE_CASES), "--json", str(out)], timeout=900, text=True)
    result = json.loads(out.read_text())
    return done.returncode, {name: r["flag"] for name, r in result["cases"].items()}


@pytest.mark.ab_gate
def test_the_gate_fails_on_the_seeded_kernel_and_on_no_other(tmp_path: Path) -> None:
    status, flags = _gate(_scratch_tree(tmp_path / "tree", seed=True), tmp_path / "ab.json")
    assert set(flags) == set(GATE_CASES)
    assert flags[SEEDED_CASE] == "REGRESSED", flags
    assert {n for n, f in flags.items() if f == "REGRESSED"} == {SEEDED_CASE}, flags
    assert status == 1


@pytest.mark.ab_gate
def test_the_gate_passes_an_unchanged_copy(tmp_path: Path) -> None:
    status, flags = _gate(_scratch_tree(tmp_path / "tree", seed=False), tmp_path / "ab.json")
    assert set(flags) == set(GATE_CASES)
    assert not [n for n, f in flags.items() if f == "REGRESSED"], flags
    assert status == 0
