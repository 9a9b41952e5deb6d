"""The pytest plugin, run in a subprocess against a torch-free fake adapter.

Checks the harness rules: revision and capability skips (never passes), expected failures and
XPASS, superseded clauses, unknown clause names, failure output naming the clause, and the reports.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from packrt_conformance import __version__
from packrt_conformance.plugin import _expected_actual
from packrt_conformance.report import validate_report

HERE = Path(__file__).parent

SUITE = """
import pytest

@pytest.mark.clause("train.returns-self")
def test_passes(impl):
    assert impl.name == "fake"

@pytest.mark.clause("apply.returns-self")
def test_fails(impl):
    assert 1 == 2, "expected 1, got 2"

@pytest.mark.clause("initialize.signature")
def test_rev1_only(impl):
    assert False

@pytest.mark.clause("load_state_dict.pack.eager")
def test_needs_packing(impl):
    assert True

@pytest.mark.clause("register_forward_hook.prepend")
def test_has_capability(impl, revision):
    assert revision == 2
"""


@pytest.fixture(autouse=True)
def _fake_adapter_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # The subprocess must import fake_adapter before collection starts, hence PYTHONPATH.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _run(p: pytest.Pytester, *args: str, impl: str = "fake_adapter:ADAPTER") -> pytest.RunResult:
    return p.runpytest_subprocess("-p", "packrt_conformance.plugin", "--impl", impl, *args)


def test_outcomes_follow_revision_capability_and_failure(suite: pytest.Pytester) -> None:
    result = _run(suite, "-rs", "--report-json", "out.json", "--report-md", "out.md")
    result.assert_outcomes(passed=2, failed=1, skipped=2)
    out = result.stdout.str()
    assert (
        f"packrt-conformance {__version__}: implementation fake 9.9 (fake_adapter:ADAPTER), contract revision 2, "
        "device cpu" in out
    )
    assert "clause initialize.signature belongs to revision [1]; this run checks revision 2" in out
    assert "needs capability ['packing'] that adapter 'fake' lacks" in out
    result.stdout.fnmatch_lines(
        [
            "*broken contract clause*",
            "apply.returns-self (revision 2): apply returns the very module it was called on.",
            "reproduce: packrt-conformance --impl fake_adapter:ADAPTER --revision 2 -k 'test_fails'",
        ]
    )
    report = json.loads((suite.path / "out.json").read_text())
    validate_report(report)
    outcomes = {c["id"]: c["outcome"] for c in report["clauses"]}
    assert outcomes["train.returns-self"] == "pass"
    assert outcomes["apply.returns-self"] == "fail"
    assert outcomes["load_state_dict.pack.eager"] == "skip"
    assert outcomes["named_modules.recurse"] == "not-run"
    assert report["implementation"]["name"] == "fake"
    assert "| fail | 1 |" in (suite.path / "out.md").read_text()


def test_expected_failure_is_xfail_and_a_passing_entry_is_xpass(suite: pytest.Pytester) -> None:
    suite.path.joinpath("exp.txt").write_text("apply.returns-self known gap\ntrain.returns-self stale entry\n")
    result = _run(suite, "--expectations", "exp.txt", "--report-json", "out.json")
    result.assert_outcomes(passed=1, skipped=2, xfailed=1, xpassed=1)
    result.stdout.fnmatch_lines(["*XPASS*test_passes*listed as an expected failure but passes*"])
    outcomes = {c["id"]: c for c in json.loads((suite.path / "out.json").read_text())["clauses"]}
    assert outcomes["apply.returns-self"]["outcome"] == "xfail"
    assert "known gap" in outcomes["apply.returns-self"]["reason"]
    assert outcomes["train.returns-self"]["outcome"] == "xpass"


def test_stale_expectation_entry_warns(suite: pytest.Pytester) -> None:
    suite.path.joinpath("exp.txt").write_text("no.such-clause gone\n")
    result = _run(suite, "--expectations", "exp.txt", "-k", "test_passes")
    result.stdout.fnmatch_lines(["*entry 'no.such-clause' matches no clause of the registry*"])


def test_revision_1_records_superseded_failures(suite: pytest.Pytester) -> None:
    result = _run(suite, "--revision", "1", "--report-json", "out.json")
    result.assert_outcomes(skipped=4, xfailed=1)
    outcomes = {c["id"]: c["outcome"] for c in json.loads((suite.path / "out.json").read_text())["clauses"]}
    assert outcomes["initialize.signature"] == "superseded"


def test_unknown_clause_in_a_marker_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad='import pytest\n@pytest.mark.clause("no.such")\ndef test_x(impl): pass\n')
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "marker names unknown clause(s) ['no.such']" in result.stderr.str()


def test_unknown_adapter_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass\n")
    result = _run(pytester, impl="nothing-here")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no adapter entry point of that name*"])


def test_cuda_run_without_a_gpu_skips_every_test_with_the_reason(suite: pytest.Pytester) -> None:
    result = _run(suite, "--device", "cuda", "-rs", "--report-json", "out.json", impl="fake_adapter:DeviceFakeAdapter")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=5)
    result.stdout.fnmatch_lines(
        [
            f"packrt-conformance {__version__}: implementation fake 9.9 (fake_adapter:DeviceFakeAdapter), "
            "contract revision 2, device cuda",
            "*device 'cuda' requested but adapter 'fake' reports no CUDA device (capability 'cuda' missing)*",
        ]
    )
    report = json.loads((suite.path / "out.json").read_text())
    assert report["device"] == "cuda"
    assert {c["outcome"] for c in report["clauses"]} == {"skip", "not-run"}
    assert "no CUDA device" in {c["id"]: c for c in report["clauses"]}["train.returns-self"]["reason"]


def test_cuda_run_where_a_gpu_answers_runs_the_tests(suite: pytest.Pytester) -> None:
    result = _run(suite, "--device", "cuda:0", "--report-json", "out.json", impl="fake_adapter:gpu_fake")
    result.assert_outcomes(passed=2, failed=1, skipped=2)
    result.stdout.fnmatch_lines(
        ["reproduce: packrt-conformance --impl fake_adapter:gpu_fake --revision 2 --device cuda:0 *"]
    )
    assert json.loads((suite.path / "out.json").read_text())["device"] == "cuda:0"


def test_device_the_adapter_cannot_take_is_a_usage_error(suite: pytest.Pytester) -> None:
    result = _run(suite, "--device", "cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*adapter 'fake' runs on 'cpu' and takes no device argument*"])


def _failure_of(block: Any) -> pytest.ExceptionInfo[BaseException]:
    try:
        block()
    except AssertionError as err:
        return pytest.ExceptionInfo.from_exception(err)
    raise AssertionError("the block did not fail")


def test_a_message_mismatch_reports_the_regex_and_the_message_it_met() -> None:
    def mismatch() -> None:
        with pytest.raises(ValueError, match="empty"):
            raise ValueError("the name is blank")

    expected, actual, _ = _expected_actual(_failure_of(mismatch), None)
    assert (expected, actual) == ("message matching 'empty'", "'the name is blank'")


def test_an_identity_failure_tells_two_alike_objects_apart_by_id() -> None:
    left, right = [1], [1]
    expected, actual, _ = _expected_actual(_failure_of(lambda: _assert_is(left, right)), ("is", left, right))
    assert expected == f"is [1] (id {id(right):#x})"
    assert actual == f"[1] (id {id(left):#x})"


def _assert_is(left: Any, right: Any) -> None:
    assert left is right
