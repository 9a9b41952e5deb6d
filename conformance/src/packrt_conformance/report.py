"""The conformance report: one outcome per clause in a versioned JSON envelope, plus a markdown summary.

A clause checked by several tests takes the worst of their outcomes
(error > fail > xpass > xfail > superseded > pass > skip); a clause of the run's revision that no
executed test checked is ``not-run`` (deselected with ``-k``, for example).
"""

from __future__ import annotations

import json
import platform
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the dev environment

from packrt_conformance.clauses import Registry

__all__ = ["OUTCOMES", "ClauseResult", "build_report", "render_markdown", "report_schema", "validate_report"]

FORMAT = "packrt-conformance-report"
FORMAT_VERSION = 1
#: Outcomes from worst to best; a clause keeps the first one any of its tests produced.
OUTCOMES = ("error", "fail", "xpass", "xfail", "superseded", "pass", "skip", "not-run")


@dataclass
class ClauseResult:
    """What the tests of one clause produced."""

    outcome: str = "not-run"
    reason: str = ""
    tests: list[str] = field(default_factory=list)

    def record(self, outcome: str, reason: str, test: str) -> None:
        """Fold one test's outcome in, keeping the worst."""
        if test not in self.tests:
            self.tests.append(test)
        if OUTCOMES.index(outcome) < OUTCOMES.index(self.outcome):
            self.outcome, self.reason = outcome, reason


def report_schema() -> dict[str, Any]:
    """The JSON Schema the report follows (shipped as ``report_schema.json``)."""
    text = resources.files("packrt_conformance").joinpath("report_schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate_report(report: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` when ``report`` does not follow the schema."""
    jsonschema.validate(report, report_schema())


def build_report(
    *,
    registry: Registry,
    results: dict[str, ClauseResult],
    revision: int,
    implementation: dict[str, Any],
    device: str,
    suite_version: str,
    expectations: str | None,
) -> dict[str, Any]:
    """Assemble and validate the report for one run (only the clauses of ``revision``)."""
    clauses = []
    for clause in registry.for_revision(revision):
        res = results.get(clause.id, ClauseResult())
        entry: dict[str, Any] = {"id": clause.id, "outcome": res.outcome, "tests": list(res.tests)}
        if res.outcome == "not-run":
            entry["reason"] = "no executed test checked this clause"
        elif res.reason or res.outcome in ("skip", "xfail", "superseded", "fail", "error"):
            entry["reason"] = res.reason or res.outcome
        clauses.append(entry)
    report: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "suite": {"name": "packrt-conformance", "version": suite_version, "clauses": len(clauses)},
        "revision": revision,
        "implementation": implementation,
        "platform": {
            "python": platform.python_version(),
            "system": platform.system(),
            "machine": platform.machine(),
        },
        "device": device,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "expectations": expectations,
        "summary": dict(Counter(c["outcome"] for c in clauses)),
        "clauses": clauses,
    }
    validate_report(report)
    return report


def render_markdown(report: dict[str, Any]) -> str:
    """A short human summary: the envelope, the counts, then every clause that did not pass."""
    impl = report["implementation"]
    lines = [
        f"# Conformance: {impl['name']} {impl['version']} against contract revision {report['revision']}",
        "",
        f"Suite {report['suite']['name']} {report['suite']['version']}, device `{report['device']}`, "
        f"Python {report['platform']['python']} on {report['platform']['system']}, {report['created']}.",
        "",
        "| outcome | clauses |",
        "| --- | --- |",
    ]
    for outcome in OUTCOMES:
        if outcome in report["summary"]:
            lines.append(f"| {outcome} | {report['summary'][outcome]} |")
    not_passed = [c for c in report["clauses"] if c["outcome"] != "pass"]
    if not_passed:
        lines += ["", "| clause | outcome | reason |", "| --- | --- | --- |"]
        for c in not_passed:
            reason = str(c.get("reason", "")).replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{c['id']}` | {c['outcome']} | {reason} |")
    return "\n".join(lines) + "\n"
