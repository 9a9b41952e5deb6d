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

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from packrt_conformance import __version__
from packrt_conformance.adapter import Adapter, AdapterError
from packrt_conformance.adapters import load_adapter
from packrt_conformance.clauses import CAPABILITIES, Clause, Registry, load_registry
from packrt_conformance.expectations import Expectations, ExpectationsError, load_expectations
from packrt_conformance.report import ClauseResult, build_report, render_markdown

__all__ = ["ConformanceState"]


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
ITEM_CLAUSES = pytest.StashKey[list[Clause]]()
ITEM_SUPERSEDED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("packrt-conformance", "Module contract conformance")
    group.addoption("--impl", help="adapter to test: module:object or an entry-point name (e.g. torch)")
    group.addoption("--revision", type=int, choices=(1, 2), help="contract revision (default: the adapter's)")
    group.addoption("--device", help="device the adapter places tensors on, e.g. cpu or cuda (default: the adapter's)")
    group.addoption("--expectations", type=Path, help="file of '<clause id> <reason>' expected failures")
    group.addoption("--report-json", type=Path, help="write the per-clause JSON report here")
    group.addoption("--report-md", type=Path, help="write a markdown summary here")
    group.addoption("--max-examples", type=int, help="hypothesis examples per property test")


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
    max_examples: int | None = config.getoption("--max-examples")
    if max_examples is not None:
        settings.register_profile("packrt-conformance", parent=settings.default, max_examples=max_examples)
        settings.load_profile("packrt-conformance")
    config.stash[STATE] = ConformanceState(registry, adapter, spec, revision, expectations)


def pytest_report_header(config: pytest.Config) -> str | None:
    state = config.stash.get(STATE, None)
    return state.header() if state is not None else None


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
    item.stash[ITEM_SUPERSEDED] = False
    if not clauses:
        revs = sorted({r for cid in ids for r in state.registry[cid].revisions})
        why = f"clause {', '.join(ids)} belongs to revision {revs}; this run checks revision {state.revision}"
        item.add_marker(pytest.mark.skip(reason=why))
        return
    if (no_device := state.device_skip) is not None:
        item.add_marker(pytest.mark.skip(reason=no_device))
        return
    have = state.adapter.capabilities if state.adapter else frozenset()
    missing = sorted({cap for c in clauses for cap in c.capabilities} - have)
    if missing:
        name = state.adapter.name if state.adapter else "(none)"
        what = "; ".join(f"{m}: {CAPABILITIES[m]}" for m in missing)
        item.add_marker(pytest.mark.skip(reason=f"needs capability {missing} that adapter {name!r} lacks ({what})"))
        return
    if all(c.superseded for c in clauses):
        item.stash[ITEM_SUPERSEDED] = True
        item.add_marker(pytest.mark.xfail(reason="superseded by revision 2", strict=False))
        return
    expected = [(c.id, r) for c in clauses if (r := state.expectations.reason(c.id)) is not None]
    if expected:
        why = "; ".join(f"{cid}: {r}" for cid, r in expected)
        item.add_marker(pytest.mark.xfail(reason=f"expected failure ({why})", strict=False))


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
    for clause in clauses:
        state.results.setdefault(clause.id, ClauseResult()).record(outcome, reason, item.nodeid)
    if outcome == "xpass":
        state.xpassed.append(item.nodeid)
    if outcome in ("fail", "error"):
        lines = [f"{c.id} (revision {state.revision}): {c.rule}" for c in clauses]
        lines += [f"  reading: {c.reading}" for c in clauses if c.reading]
        device = f" --device {state.adapter.device}" if state.adapter and state.adapter.device != "cpu" else ""
        lines.append(
            f"reproduce: packrt-conformance --impl {state.spec} --revision {state.revision}{device} -k '{item.name}'"
        )
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
        f"device {state.adapter.device}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    )
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
    )
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if md_path:
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(render_markdown(report), encoding="utf-8")
