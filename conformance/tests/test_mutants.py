"""The suite catches broken implementations: each mutant adapter fails exactly the clauses its fault breaks.

Every mutant (``mutants.py``) is packrt with one rule broken. The suite runs against it in a
subprocess (``--impl mutants:<Name>``, this directory on ``PYTHONPATH``) over the suite files that
hold the broken rule's tests; the JSON report must show the clauses in the mutant's ``breaks`` as
failed and no other clause (a fault that trips an unrelated clause says the clause is not atomic, or
the mutant breaks more than it claims), and the same clauses must pass on the real packrt adapter
(so the failure is the fault's, not the test's). packrt is not a dependency of the suite: without it
these tests skip, unless
``PACKRT_REQUIRE_PACKRT=1`` makes its absence a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from packrt_conformance.clauses import load_registry
from packrt_conformance.report import validate_report

HERE = Path(__file__).parent


def _load_mutants(name: str) -> Any:
    # Imported from its file, so this test module needs no package (conftest.py puts this folder on
    # sys.path, where mutants_sentences.py finds the base it shares with mutants.py).
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The first mutants (mutants.py), one per sentence a hidden adapter broke unseen (mutants_sentences.py), those
#: taken off the backlog (mutants_backlog.py), one per signature sentence and the revision-1 twins
#: (mutants_families.py), and those of the concurrency clauses (mutants_threads.py).
MUTANT_FILES = ("mutants", "mutants_sentences", "mutants_backlog", "mutants_families", "mutants_threads")
MUTANTS = tuple(m for name in MUTANT_FILES for m in _load_mutants(name).MUTANTS)


def _env() -> dict[str, str]:
    """The runs' environment, taken in the calling thread: pytest rewrites ``PYTEST_CURRENT_TEST`` on every
    test, so copying ``os.environ`` from a worker thread can race with it (KeyError mid-copy)."""
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


Run = tuple[int, str, dict[str, str]]


def _run(tmp: Path, impl: str, revision: int, files: tuple[str, ...], env: dict[str, str]) -> Run:
    """Run the shipped suite's ``files`` against ``impl``; return the exit code, output and outcomes."""
    import subprocess

    report = tmp / f"{impl.replace(':', '_')}-r{revision}.json"
    cmd = [sys.executable, "-m", "packrt_conformance.cli", "--impl", impl, "--revision", str(revision)]
    cmd += ["--max-examples", "5", "--report-json", str(report), "-q"]
    if files:
        cmd += ["-k", " or ".join(files)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=300, check=False)
    output = proc.stdout + proc.stderr
    assert report.exists(), f"{impl}: no report written (exit {proc.returncode}):\n{output[-3000:]}"
    data = json.loads(report.read_text(encoding="utf-8"))
    validate_report(data)
    return proc.returncode, output, {c["id"]: c["outcome"] for c in data["clauses"]}


def test_every_mutant_names_known_clauses_of_its_revision() -> None:
    registry = load_registry()
    assert len(MUTANTS) >= 6
    assert len({m.fault for m in MUTANTS}) == len(MUTANTS), "two mutants inject the same fault"
    for mutant in MUTANTS:
        assert mutant.breaks, f"{mutant.__name__} names no clause it breaks"
        of_revision = {c.id for c in registry.for_revision(mutant.revision_under_test)}
        assert mutant.breaks <= of_revision, f"{mutant.__name__}: {sorted(mutant.breaks - of_revision)}"


@pytest.mark.usefixtures("require_packrt")
@pytest.mark.parametrize("revision", [1, 2])
def test_real_packrt_passes_every_clause_a_mutant_breaks(tmp_path: Path, revision: int) -> None:
    broken = {cid for m in MUTANTS if m.revision_under_test == revision for cid in m.breaks}
    files = tuple(sorted({f for m in MUTANTS if m.revision_under_test == revision for f in m.suite_files}))
    code, output, outcomes = _run(tmp_path, "packrt", revision, files, _env())
    assert code == 0, output[-3000:]
    assert {cid: outcomes[cid] for cid in broken if outcomes[cid] != "pass"} == {}


@pytest.fixture(scope="module")
def mutant_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, require_packrt: None
) -> dict[str, Future[Run]]:
    """Every selected mutant's run, started at once on a few workers (each is a subprocess): the
    module's tests then only read their own result, so the selftest costs about runs / workers.
    ``PACKRT_MUTANT_WORKERS`` sets the number of workers (1 on a machine others are timing on)."""
    tmp = tmp_path_factory.mktemp("mutants")
    workers = int(os.environ.get("PACKRT_MUTANT_WORKERS", "0")) or max(2, min(4, os.cpu_count() or 2))
    pool = ThreadPoolExecutor(max_workers=workers)
    env = _env()
    selected = {item.callspec.id for item in request.session.items if hasattr(item, "callspec")}
    runs = {
        m.__name__: pool.submit(_run, tmp, f"{m.__module__}:{m.__name__}", m.revision_under_test, m.suite_files, env)
        for m in MUTANTS
        if m.__name__ in selected
    }
    pool.shutdown(wait=False)
    return runs


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.__name__ for m in MUTANTS])
def test_suite_fails_the_mutant_on_exactly_the_clauses_its_fault_breaks(
    mutant_runs: dict[str, Future[Run]], mutant: Any
) -> None:
    code, output, outcomes = mutant_runs[mutant.__name__].result(timeout=600)
    assert code == pytest.ExitCode.TESTS_FAILED, f"the suite passed a broken implementation:\n{output[-3000:]}"
    failed = {cid for cid, outcome in outcomes.items() if outcome == "fail"}
    assert sorted(mutant.breaks - failed) == [], f"{mutant.fault}: the suite missed these broken clauses"
    assert sorted(failed - mutant.breaks) == [], f"{mutant.fault}: these clauses fail but do not say why"
    assert f"packrt-mutant[{mutant.fault}] " in output, "the run summary names the mutant"
    assert "broken contract clause" in output
    assert any(f"{cid} (revision {mutant.revision_under_test})" in output for cid in mutant.breaks)
