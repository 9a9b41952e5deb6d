"""The report: worst outcome wins, the envelope follows the shipped schema, the markdown summary."""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import strategies as st

from packrt_conformance.clauses import load_registry
from packrt_conformance.report import OUTCOMES, ClauseResult, build_report, render_markdown, validate_report

RUN_OUTCOMES = [o for o in OUTCOMES if o != "not-run"]


def _report(results: dict[str, ClauseResult], revision: int = 2) -> dict[str, Any]:
    return build_report(
        registry=load_registry(),
        results=results,
        revision=revision,
        implementation={"name": "impl", "version": "1.0", "adapter": "x:y", "capabilities": ["packing"]},
        device="cpu",
        suite_version="0.1.0",
        expectations=None,
    )


@given(outcomes=st.lists(st.sampled_from(RUN_OUTCOMES), min_size=1, max_size=6))
def test_a_clause_keeps_the_worst_outcome_of_its_tests(outcomes: list[str]) -> None:
    res = ClauseResult()
    for i, outcome in enumerate(outcomes):
        res.record(outcome, f"r{i}", f"t{i}")
    assert res.outcome == min(outcomes, key=OUTCOMES.index)
    assert res.tests == [f"t{i}" for i in range(len(outcomes))]


def test_report_covers_every_clause_of_the_revision_and_validates() -> None:
    results = {"train.returns-self": ClauseResult("pass", "", ["t::a"])}
    results["module.order.walks"] = ClauseResult("fail", "assert 1 == 2", ["t::b"])
    report = _report(results)
    clauses = {c["id"]: c for c in report["clauses"]}
    assert len(clauses) == len(load_registry().for_revision(2))
    assert clauses["train.returns-self"]["outcome"] == "pass"
    assert clauses["module.order.walks"]["reason"] == "assert 1 == 2"
    assert clauses["apply.returns-self"]["outcome"] == "not-run"
    assert "initialize.signature" not in clauses
    assert report["summary"] == {"pass": 1, "fail": 1, "not-run": len(clauses) - 2}


def test_schema_refuses_an_unknown_outcome() -> None:
    report = _report({})
    report["clauses"][0]["outcome"] = "maybe"
    with pytest.raises(jsonschema.ValidationError, match=r"'maybe' is not one of"):
        validate_report(report)


def test_schema_requires_a_reason_for_skips() -> None:
    report = _report({})
    entry = report["clauses"][0]
    entry["outcome"] = "skip"
    del entry["reason"]
    with pytest.raises(jsonschema.ValidationError, match=r"'reason' is a required property"):
        validate_report(report)


def test_schema_pins_the_envelope_version() -> None:
    report = _report({})
    report["format_version"] = 2
    with pytest.raises(jsonschema.ValidationError, match=r"1 was expected"):
        validate_report(report)


def test_markdown_lists_counts_and_every_clause_that_did_not_pass() -> None:
    text = render_markdown(_report({"apply.returns-self": ClauseResult("xfail", "known | gap", ["t"])}, revision=2))
    assert text.startswith("# Conformance: impl 1.0 against contract revision 2")
    assert "| xfail | 1 |" in text
    assert "| `apply.returns-self` | xfail | known \\| gap |" in text
