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


#: What a failure entry carries beside its reason (each optional, all strings).
FAILURE_FIELDS = ("rule", "expected", "actual", "location", "reproduce")


@dataclass
class ClauseResult:
    """What the tests of one clause produced.

    ``detail`` belongs to the worst outcome: for a failure, the assertion's ``expected`` and
    ``actual``, the ``location`` (real path and line) and the ``reproduce`` command.
    """

    outcome: str = "not-run"
    reason: str = ""
    tests: list[str] = field(default_factory=list)
    detail: dict[str, str] = field(default_factory=dict)

    def record(self, outcome: str, reason: str, test: str, detail: dict[str, str] | None = None) -> None:
        """Fold one test's outcome in, keeping the worst."""
        if test not in self.tests:
            self.tests.append(test)
        if OUTCOMES.index(outcome) < OUTCOMES.index(self.outcome):
            self.outcome, self.reason, self.detail = outcome, reason, dict(detail or {})


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
    failing_tests: int | None = None,
) -> dict[str, Any]:
    """Assemble and validate the report for one run (only the clauses of ``revision``).

    ``failing_tests`` is how many tests failed or errored (a clause may have several, and one test
    may check several clauses); the summary counts clauses.
    """
    clauses = []
    for clause in registry.for_revision(revision):
        res = results.get(clause.id, ClauseResult())
        entry: dict[str, Any] = {"id": clause.id, "outcome": res.outcome, "tests": list(res.tests)}
        if res.outcome == "not-run":
            entry["reason"] = "no executed test checked this clause"
        elif res.reason or res.outcome in ("skip", "xfail", "superseded", "fail", "error"):
            entry["reason"] = res.reason or res.outcome
        if res.outcome in ("fail", "error"):
            entry["rule"] = clause.rule
            entry.update({k: v for k, v in res.detail.items() if k in FAILURE_FIELDS and k != "rule"})
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
    if failing_tests is not None:
        report["failing_tests"] = failing_tests
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
    lines += ["", count_line(report["summary"], report.get("failing_tests")) + "."]
    not_passed = [c for c in report["clauses"] if c["outcome"] != "pass"]
    if not_passed:
        lines += ["", "| clause | outcome | reason |", "| --- | --- | --- |"]
        for c in not_passed:
            lines.append(f"| `{c['id']}` | {c['outcome']} | {_cell(c.get('reason', ''))} |")
    failures = [c for c in report["clauses"] if c["outcome"] in ("fail", "error")]
    for c in failures:
        lines += ["", f"## `{c['id']}` ({c['outcome']})", ""]
        for key in FAILURE_FIELDS:
            if key in c:
                value = _cell(c[key])
                lines.append(f"- {key}: `{value}`" if key in ("location", "reproduce") else f"- {key}: {value}")
    return "\n".join(lines) + "\n"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def count_line(summary: dict[str, int], failing_tests: int | None) -> str:
    """'N clauses fail (M tests)', or how many clauses passed when none failed: clauses and tests apart."""
    bad = summary.get("fail", 0) + summary.get("error", 0)
    if bad == 0:
        return f"no clause fails ({summary.get('pass', 0)} clauses pass)"
    clauses = "1 clause fails" if bad == 1 else f"{bad} clauses fail"
    if failing_tests is None:
        return clauses
    return f"{clauses} ({failing_tests} {'test' if failing_tests == 1 else 'tests'})"
