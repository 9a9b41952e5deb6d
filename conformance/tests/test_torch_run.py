"""The shipped suite against PyTorch 2.13 (CPU), in a subprocess through the console entry.

With the shipped expectation file every clause torch implements passes and nothing fails; without
it, exactly the listed clauses fail (so the file is neither stale nor incomplete).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from packrt_conformance.expectations import load_expectations
from packrt_conformance.report import validate_report

EXPECTATIONS = Path(__file__).parents[1] / "expectations" / "torch.txt"

pytestmark = pytest.mark.usefixtures("require_torch")


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, str]]:
    result = pytester.run(
        sys.executable,
        "-m",
        "packrt_conformance.cli",
        "--impl",
        "torch",
        "--report-json",
        "r.json",
        "-q",
        *args,
    )
    report = json.loads((pytester.path / "r.json").read_text())
    validate_report(report)
    return result, {c["id"]: c["outcome"] for c in report["clauses"]}


@pytest.mark.parametrize("revision", ["1", "2"])
def test_torch_passes_with_its_expectation_file(pytester: pytest.Pytester, revision: str) -> None:
    result, outcomes = _run(pytester, "--revision", revision, "--expectations", str(EXPECTATIONS))
    assert result.ret == 0, result.stdout.str()[-3000:]
    bad = {cid: o for cid, o in outcomes.items() if o in ("fail", "error", "xpass", "not-run")}
    assert bad == {}
    assert sum(o == "pass" for o in outcomes.values()) > (30 if revision == "1" else 140)


def test_without_expectations_exactly_the_listed_clauses_fail(pytester: pytest.Pytester) -> None:
    result, outcomes = _run(pytester, "--max-examples", "5", "--no-shipped-expectations")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    failing = {cid for cid, o in outcomes.items() if o == "fail"}
    assert failing == set(load_expectations(EXPECTATIONS).entries)
    result.stdout.fnmatch_lines(["*broken contract clause*"])


def test_capability_clauses_skip_on_torch_and_never_pass(pytester: pytest.Pytester) -> None:
    _, outcomes = _run(pytester, "--expectations", str(EXPECTATIONS), "-k", "pack or residency or dtype_name")
    for cid in ("load_state_dict.pack.eager", "load_state_dict.residency.auto", "to.dtype-name"):
        assert outcomes[cid] == "skip", cid
