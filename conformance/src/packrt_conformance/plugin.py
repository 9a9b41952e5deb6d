"""The pytest plugin that runs the suite against an implementation.

Load it with ``-p packrt_conformance.plugin`` (the ``packrt-conformance`` command does). Options:
``--impl`` (adapter ``module:object`` or entry-point name), ``--revision``, ``--device``,
``--expectations``, ``--report-json``, ``--report-md``, ``--max-examples``. A test names the clauses it checks with
``@pytest.mark.clause("id", ...)`` and receives the adapter through the ``impl`` fixture.

Rules the plugin enforces: a test whose clauses all belong to the other revision is skipped with
that reason; a test needing a capability the adapter does not declare is skipped naming it (it
never passes); a run on a CUDA device whose adapter reports no CUDA device skips every test
with that reason; a clause listed in the expectation file runs as an expected failure; a superseded
revision-1 clause that fails is recorded as ``superseded``, not failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

from packrt_conformance import __version__
from packrt_conformance.adapter import Adapter, AdapterError
from packrt_conformance.adapters import load_adapter
from packrt_conformance.clauses import CAPABILITIES, Clause, Registry, load_registry
from packrt_conformance.expectations import Expectations, ExpectationsError, load_expectations
from packrt_conformance.report import ClauseResult, build_report, count_line, render_markdown

# The suite's helper modules hold assertions too: rewritten, a failing one prints the values it
# compared (the test_*.py modules themselves are rewritten as pytest collects them).
# (Already imported, as when a caller's own process loaded the suite's tables first, it stays as it is.)
if "packrt_conformance.suite" not in sys.modules:
    pytest.register_assert_rewrite("packrt_conformance.suite")

__all__ = ["DEFAULT_MAX_EXAMPLES", "HYPOTHESIS_PROFILE", "ConformanceState", "shipped_expectations"]

#: Examples per property test unless ``--max-examples`` says otherwise.
DEFAULT_MAX_EXAMPLES = 100
#: The hypothesis profile the suite loads: its own, whatever profile the environment registered.
HYPOTHESIS_PROFILE = "packrt-conformance"
_LIMIT = 600  # characters of an expected / actual value kept in a report


def shipped_expectations(spec: str | None) -> Path | None:
    """The expectation file shipped in the package for an entry-point name (``torch``), if any."""
    if not spec or ":" in spec or not re.fullmatch(r"[A-Za-z0-9_.-]+", spec):
        return None
    path = Path(str(resources.files("packrt_conformance"))) / "shipped_expectations" / f"{spec}.txt"
    return path if path.is_file() else None


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _load_hypothesis_profile(max_examples: int | None) -> None:
    """No deadline (a loaded machine must not fail a conforming implementation), a stated example
    count, derandomized under CI, and nothing written into the directory the run starts from (no
    example database; hypothesis's caches go to a directory of the suite's own under the temp dir)."""
    set_hypothesis_home_dir(str(Path(tempfile.gettempdir()) / "packrt-conformance-hypothesis"))
    settings.register_profile(
        HYPOTHESIS_PROFILE,
        deadline=None,
        max_examples=max_examples if max_examples is not None else DEFAULT_MAX_EXAMPLES,
        derandomize=_ci(),
        database=None,
        print_blob=False,
    )
    settings.load_profile(HYPOTHESIS_PROFILE)


@dataclass
class ConformanceState:
    """Everything one run shares: the registry, the adapter, the revision, the outcomes."""

    registry: Registry
    adapter: Adapter | None
    spec: str | None
    revision: int
    expectations: Expectations
    results: dict[str, ClauseResult] = field(default_factory=dict)
    xpassed: list[str] = field(default_factory=list)
    failing_tests: set[str] = field(default_factory=set)

    @property
    def device_skip(self) -> str | None:
        """Why no test can run on the requested device, or None when it answers."""
        adapter = self.adapter
        if adapter is None or not adapter.device.startswith("cuda") or "cuda" in adapter.capabilities:
            return None
        return (
            f"device {adapter.device!r} requested but adapter {adapter.name!r} reports no CUDA device "
            "(capability 'cuda' missing); run on a machine with a GPU, or with --device cpu"
        )

    def header(self) -> str:
        """The run header line: implementation and version, suite version, revision, device."""
        if self.adapter is None:
            return f"packrt-conformance {__version__}: no implementation selected (--impl)"
        a = self.adapter
        return (
            f"packrt-conformance {__version__}: implementation {a.name} {a.version} ({self.spec}), "
            f"contract revision {self.revision}, device {a.device}"
        )


STATE = pytest.StashKey[ConformanceState]()
LAST_COMPARE = pytest.StashKey[tuple[str, Any, Any]]()
ITEM_CLAUSES = pytest.StashKey[list[Clause]]()
ITEM_SUPERSEDED = pytest.StashKey[bool]()


OPTION_GROUP = ("packrt-conformance", "Module contract conformance")


def add_options(add: Callable[..., object]) -> None:
    """Declare the suite's own options through ``add``: pytest's ``group.addoption`` for a run, or
    argparse's ``add_argument`` for ``packrt-conformance --help`` (the two take the same arguments)."""
    add("--impl", metavar="SPEC", help="adapter to test: module:object or an entry-point name (e.g. torch)")
    add("--revision", type=int, choices=(1, 2), help="contract revision (default: the adapter's)")
    add("--device", help="device the adapter places tensors on, e.g. cpu or cuda (default: the adapter's)")
    add(
        "--expectations",
        type=Path,
        metavar="FILE",
        help="file of '<clause id> <reason>' expected failures (default: the file shipped for an entry-point name)",
    )
    add(
        "--no-shipped-expectations",
        action="store_true",
        help="do not use the expectation file the suite ships for --impl <name>",
    )
    add("--report-json", type=Path, metavar="PATH", help="write the per-clause JSON report here")
    add("--report-md", type=Path, metavar="PATH", help="write a markdown summary here")
    add("--max-examples", type=int, metavar="N", help="hypothesis examples per property test")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser.getgroup(*OPTION_GROUP).addoption)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(*ids): the contract clauses this test checks")
    registry = load_registry()
    spec: str | None = config.getoption("--impl")
    adapter: Adapter | None = None
    if spec:
        try:
            adapter = load_adapter(spec, config.getoption("--device"))
        except AdapterError as err:
            raise pytest.UsageError(str(err)) from err
    revision = config.getoption("--revision") or (adapter.revision if adapter else 2)
    if adapter is not None:
        if revision not in adapter.revisions:
            raise pytest.UsageError(
                f"--revision {revision}: adapter {adapter.name!r} supports {sorted(adapter.revisions)} only"
            )
        adapter.set_revision(revision)
    exp_path: Path | None = config.getoption("--expectations")
    if exp_path is None and not config.getoption("--no-shipped-expectations"):
        exp_path = shipped_expectations(spec)
    expectations = Expectations(entries={})
    if exp_path is not None:
        try:
            expectations = load_expectations(exp_path)
        except ExpectationsError as err:
            raise pytest.UsageError(str(err)) from err
        for cid in expectations.unknown(registry):
            config.issue_config_time_warning(
                UserWarning(f"{exp_path}: entry {cid!r} matches no clause of the registry; remove or fix it"),
                stacklevel=2,
            )
    _load_hypothesis_profile(config.getoption("--max-examples"))
    config.stash[STATE] = ConformanceState(registry, adapter, spec, revision, expectations)
    _summary_paths_real(config)


def _summary_paths_real(config: pytest.Config) -> None:
    """The summary's test paths: relative to the current directory when the suite lies under it,
    otherwise the suite file's real path (never a climb such as ``../../venv/...``)."""
    base = config.cwd_relative_nodeid
    cwd = Path(config.invocation_params.dir).resolve()

    def real(nodeid: Any) -> Any:
        # pytest hands a structured node ID (a dataclass with a path) or, in older releases, a string.
        structured = dataclasses.is_dataclass(nodeid) and hasattr(nodeid, "path")
        path, sep, rest = (str(nodeid.path), "", "") if structured else str(nodeid).partition("::")
        full = (config.rootpath / path).resolve()
        if not path or not full.exists():
            return base(nodeid)
        shown = str(full.relative_to(cwd) if full.is_relative_to(cwd) else full)
        return dataclasses.replace(nodeid, path=shown) if structured else f"{shown}{sep}{rest}"

    config.cwd_relative_nodeid = real  # type: ignore[method-assign]


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = config.stash.get(STATE, None)
    if state is None:
        return None
    s = settings()  # the profile in force
    lines = [
        state.header(),
        f"hypothesis: profile {HYPOTHESIS_PROFILE}, max_examples={s.max_examples}, deadline={s.deadline}, "
        f"derandomize={s.derandomize}",
    ]
    if state.expectations.entries:
        lines.append(f"expectations: {state.expectations.source} ({len(state.expectations.entries)} entries)")
    return lines


@pytest.fixture(scope="session")
def impl(request: pytest.FixtureRequest) -> Adapter:
    """The adapter of the implementation under test."""
    state = request.config.stash[STATE]
    if state.adapter is None:
        raise pytest.UsageError("conformance tests need an implementation: pass --impl module:object or a name")
    return state.adapter


@pytest.fixture(scope="session")
def revision(request: pytest.FixtureRequest) -> int:
    """The contract revision this run holds the implementation to."""
    return request.config.stash[STATE].revision


def _classify(item: pytest.Item, state: ConformanceState) -> None:
    ids = [a for mark in item.iter_markers("clause") for a in mark.args]
    if not ids:
        return
    unknown = [cid for cid in ids if cid not in state.registry]
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: marker names unknown clause(s) {unknown}; fix the ID")
    clauses = [state.registry[cid] for cid in ids if state.registry[cid].applies_to(state.revision)]
    item.stash[ITEM_CLAUSES] = clauses
    mark, superseded = _run_marker(ids, clauses, state)
    item.stash[ITEM_SUPERSEDED] = superseded
    if mark is not None:
        item.add_marker(mark)


def _run_marker(
    ids: list[str], clauses: list[Clause], state: ConformanceState
) -> tuple[pytest.MarkDecorator | None, bool]:
    """How this run takes a test of ``clauses`` (those of its clause ``ids`` that apply to the run's
    revision): skipped (another revision's, no device, a capability the adapter lacks), an allowed
    failure (superseded, or an expected failure the adapter declares), or run as is (None); and
    whether it is superseded."""
    if not clauses:
        revs = sorted({r for cid in ids for r in state.registry[cid].revisions})
        why = f"clause {', '.join(ids)} belongs to revision {revs}; this run checks revision {state.revision}"
        return pytest.mark.skip(reason=why), False
    if state.device_skip is not None:
        return pytest.mark.skip(reason=state.device_skip), False
    have = state.adapter.capabilities if state.adapter else frozenset()
    missing = sorted({cap for c in clauses for cap in c.capabilities} - have)
    if missing:
        name = state.adapter.name if state.adapter else "(none)"
        what = "; ".join(f"{m}: {CAPABILITIES[m]}" for m in missing)
        return pytest.mark.skip(reason=f"needs capability {missing} that adapter {name!r} lacks ({what})"), False
    if all(c.superseded for c in clauses):
        return pytest.mark.xfail(reason="superseded by revision 2", strict=False), True
    expected = [(c.id, r) for c in clauses if (r := state.expectations.reason(c.id)) is not None]
    if expected:
        why = "; ".join(f"{cid}: {r}" for cid, r in expected)
        return pytest.mark.xfail(reason=f"expected failure ({why})", strict=False), False
    return None, False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[STATE]
    for item in items:
        _classify(item, state)


def _skip_reason(rep: pytest.TestReport) -> str:
    if isinstance(rep.longrepr, tuple):
        return str(rep.longrepr[2]).removeprefix("Skipped: ")
    return str(rep.longrepr)


def _outcome(rep: pytest.TestReport, superseded: bool) -> tuple[str, str] | None:
    wasxfail = getattr(rep, "wasxfail", None)
    if rep.when == "setup":
        if rep.skipped and wasxfail is None:
            return "skip", _skip_reason(rep)
        if rep.failed:
            return "error", f"setup failed: {rep.longreprtext.splitlines()[-1] if rep.longreprtext else ''}"
        if rep.skipped:
            return ("superseded" if superseded else "xfail"), str(wasxfail)
        return None
    if rep.when == "teardown":
        return ("error", "teardown failed") if rep.failed else None
    if wasxfail is not None:
        if rep.skipped:
            return ("superseded" if superseded else "xfail"), str(wasxfail)
        return ("pass", "") if superseded else ("xpass", f"passes although listed: {wasxfail}")
    if rep.passed:
        return "pass", ""
    if rep.skipped:
        return "skip", _skip_reason(rep)
    last = rep.longreprtext.strip().splitlines()[-1] if rep.longreprtext.strip() else "failed"
    return "fail", last


def pytest_assertrepr_compare(config: pytest.Config, op: str, left: Any, right: Any) -> None:
    """Remember the failing comparison (the suite writes ``assert actual == expected``); the
    explanation itself stays pytest's."""
    config.stash[LAST_COMPARE] = (op, left, right)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= _LIMIT else text[: _LIMIT - 3] + "..."


def _expected_actual(excinfo: pytest.ExceptionInfo[BaseException] | None, compare: Any) -> tuple[str, str, str]:
    """(expected, actual, one-line message) of a failed test, read from its exception."""
    if excinfo is None:
        return "", "", "failed"
    exc = excinfo.value
    text = str(exc)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    if text.startswith("DID NOT RAISE"):
        return f"raises {text.removeprefix('DID NOT RAISE').strip()}", "no exception was raised", first
    if isinstance(exc, AssertionError):
        if text.startswith("Regex pattern did not match"):
            # pytest < 9 writes "Regex: ... / Input: ...", pytest 9 "Expected regex: ... / Actual message: ...".
            found = re.findall(r"^\s*(Regex|Input|Expected regex|Actual message): (.*)$", text, re.MULTILINE)
            got: dict[str, str] = dict(found)
            regex = got.get("Expected regex", got.get("Regex", "?"))
            return f"message matching {regex}", got.get("Actual message", got.get("Input", "?")), first
        if "ACTUAL:" in text and "DESIRED:" in text:  # numpy.testing
            actual = text.split("ACTUAL:", 1)[1].split("DESIRED:", 1)[0]
            return _short(text.split("DESIRED:", 1)[1]), _short(actual), first
        if compare is not None:
            op, left, right = compare
            if op == "==":
                return _short(right), _short(left), first
            if op in ("in", "not in"):
                return f"{op} the value, {_short(left)}", _short(right), first
            if op in ("is", "is not"):  # two objects may print alike: their ids tell them apart
                return f"{op} {_short(right)} (id {id(right):#x})", f"{_short(left)} (id {id(left):#x})", first
            return f"{op} {_short(right)}", _short(left), first
        return _bare_assertion(excinfo, text, first)
    return "no exception", _short(f"{type(exc).__name__}: {text}"), f"{type(exc).__name__}: {first}"


def _bare_assertion(excinfo: pytest.ExceptionInfo[BaseException], text: str, first: str) -> tuple[str, str, str]:
    """An assertion with no comparison and no message: the asserted source is what was expected, the
    values pytest's rewriting found (its ``where`` lines) are what came instead."""
    statement = ""
    if excinfo.traceback:
        with contextlib.suppress(Exception):  # no source (a compiled or vanished file): go without
            statement = " ".join(str(excinfo.traceback[-1].statement).split())
    expected = f"{statement} (to hold)" if statement.startswith("assert") else "the assertion to hold"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    values = [ln.lstrip("+ ").strip() for ln in lines[1:] if ln.lstrip("+ ").startswith(("where", "and"))]
    actual = lines[0] if lines else first
    if values:
        actual = f"{actual}, {'; '.join(values)}"
    return expected, _short(actual), first


def _reproduce(state: ConformanceState, item: pytest.Item) -> str:
    device = f" --device {state.adapter.device}" if state.adapter and state.adapter.device != "cpu" else ""
    return f"packrt-conformance --impl {state.spec} --revision {state.revision}{device} -k '{item.name}'"


def _location(item: pytest.Item) -> str:
    """The test's real file (absolute) and line, whatever directory the run started from."""
    path, line, _ = item.location
    where = Path(str(item.path)).resolve() if hasattr(item, "path") else Path(path).resolve()
    return f"{where}:{(line or 0) + 1}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if LAST_COMPARE in item.config.stash:  # a fresh test starts with no remembered comparison
        del item.config.stash[LAST_COMPARE]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    result = yield
    rep: pytest.TestReport = result.get_result()
    clauses = item.stash.get(ITEM_CLAUSES, None)
    if not clauses:
        return
    state = item.config.stash[STATE]
    got = _outcome(rep, item.stash.get(ITEM_SUPERSEDED, False))
    if got is None:
        return
    outcome, reason = got
    test = f"{Path(str(item.path)).resolve()}::{item.name}"
    detail: dict[str, str] = {}
    if outcome in ("fail", "error"):
        compare = item.config.stash.get(LAST_COMPARE, None)
        expected, actual, message = _expected_actual(call.excinfo, compare)
        detail = {
            "expected": expected,
            "actual": actual,
            "location": _location(item),
            "reproduce": _reproduce(state, item),
        }
        reason = f"{message} (expected {expected}; actual {actual})" if expected else message
        if outcome == "error":
            reason = f"{'setup' if rep.when == 'setup' else rep.when} failed: {reason}"
    for clause in clauses:
        state.results.setdefault(clause.id, ClauseResult()).record(outcome, reason, test, detail)
    if outcome == "xpass":
        state.xpassed.append(test)
    if outcome in ("fail", "error"):
        state.failing_tests.add(test)
        lines = [f"{c.id} (revision {state.revision}): {c.rule}" for c in clauses]
        lines += [f"  reading: {c.reading}" for c in clauses if c.reading]
        lines += [f"expected: {detail['expected']}", f"actual: {detail['actual']}", f"test: {detail['location']}"]
        lines.append(f"reproduce: {detail['reproduce']}")
        rep.sections.append(("broken contract clause", "\n".join(lines)))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or state.adapter is None or not state.results:
        return
    counts: dict[str, int] = {}
    for res in state.results.values():
        counts[res.outcome] = counts.get(res.outcome, 0) + 1
    terminalreporter.section("packrt-conformance")
    terminalreporter.write_line(
        f"{state.adapter.name} {state.adapter.version}, revision {state.revision}, "
        f"device {state.adapter.device}: clauses " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    )
    terminalreporter.write_line(count_line(counts, len(state.failing_tests)) + "; pytest's line below counts tests")
    for nodeid in state.xpassed:
        terminalreporter.write_line(f"XPASS {nodeid}: listed as an expected failure but passes; remove the entry")


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    state = config.stash.get(STATE, None)
    json_path: Path | None = config.getoption("--report-json")
    md_path: Path | None = config.getoption("--report-md")
    if state is None or state.adapter is None or not (json_path or md_path):
        return
    adapter = state.adapter
    report = build_report(
        registry=state.registry,
        results=state.results,
        revision=state.revision,
        implementation={
            "name": adapter.name,
            "version": adapter.version,
            "adapter": state.spec or "",
            "capabilities": sorted(adapter.capabilities),
        },
        device=adapter.device,
        suite_version=__version__,
        expectations=state.expectations.source if state.expectations.entries else None,
        failing_tests=len(state.failing_tests),
    )
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if md_path:
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(render_markdown(report), encoding="utf-8")
