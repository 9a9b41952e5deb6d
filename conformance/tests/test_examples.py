"""conformance/examples/torch_from_docs.py, an adapter written from the docs alone, passes the suite
with exactly torch's listed expectations: the same verdict per clause as the shipped torch adapter."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_run import run_cli

from packrt_conformance.expectations import load_expectations

CONFORMANCE = Path(__file__).resolve().parent.parent
EXAMPLES = CONFORMANCE / "examples"
EXPECTATIONS = CONFORMANCE / "expectations" / "torch.txt"

pytest.importorskip("torch")


def _run(impl: str, tmp: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    report = tmp / f"{impl.replace(':', '_')}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")]))}
    args = ["--check-adapter", "--impl", impl, "--expectations", str(EXPECTATIONS), "--max-examples", "10"]
    done = run_cli(*args, "--report-json", str(report), "-q", cwd=tmp, env=env)
    outcomes = (
        {c["id"]: c["outcome"] for c in json.loads(report.read_text(encoding="utf-8"))["clauses"]}
        if report.exists()
        else {}
    )
    return done, outcomes


def test_the_docs_only_example_matches_torchs_verdicts_exactly(tmp_path: Path) -> None:
    example, outcomes = _run("torch_from_docs:Adapter", tmp_path)
    assert example.returncode == 0, example.stdout[-3000:] + example.stderr[-3000:]
    assert "adapter torch_from_docs:Adapter checked" in example.stdout
    listed = set(load_expectations(EXPECTATIONS).entries)
    assert {cid for cid, outcome in outcomes.items() if outcome == "xfail"} == listed
    assert [cid for cid, outcome in outcomes.items() if outcome in ("fail", "error", "xpass")] == []
    _, shipped = _run("torch", tmp_path)
    assert outcomes == shipped
