"""The coverage check: every clause has a test, every test names real clauses, no ID repeats.

``python -m packrt_conformance.check`` exits 1 and lists the problems when the shipped registry
and the shipped suite disagree. Clause IDs are read statically from ``pytest.mark.clause("...")``
calls, from the first argument of ``clause_param("...", ...)`` cases, and as ``<method>.<rule>`` for
both hook registries from ``hook_registry_cases("<rule>")``, in the suite's ``test_*.py`` files
(literal strings only, so the check needs no implementation and imports nothing it checks).
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from packrt_conformance.clauses import RegistryError, load_registry, parse_file

__all__ = ["CheckResult", "check", "main", "marked_clause_ids"]


@dataclass(frozen=True)
class CheckResult:
    """The problems found; the check passes when the list is empty."""

    problems: list[str]
    clauses: int
    tests_marks: int

    @property
    def ok(self) -> bool:
        return not self.problems


def _is_clause_mark(func: ast.expr) -> bool:
    # pytest.mark.clause(...) or mark.clause(...)
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "clause"
        and (
            (isinstance(func.value, ast.Attribute) and func.value.attr == "mark")
            or (isinstance(func.value, ast.Name) and func.value.id == "mark")
        )
    )


def _is_clause_param(func: ast.expr) -> bool:
    # clause_param("id", *values): the suite's one-case helper (suite/_support.py)
    return isinstance(func, ast.Name) and func.id == "clause_param"


def _is_edge_cases(func: ast.expr) -> bool:
    # cases("method"): the edge matrix's cases (suite/_edges.py), marked with that method's clauses
    return isinstance(func, ast.Name) and func.id == "cases"


def _is_hook_registry_cases(func: ast.expr) -> bool:
    # hook_registry_cases("rule"): one case per hook registry (suite/_support.py), each marked <method>.<rule>
    return isinstance(func, ast.Name) and func.id == "hook_registry_cases"


def _hook_registry_clause_ids(rule: str) -> list[str]:
    from packrt_conformance.suite._support import HOOK_REGISTRIES  # the suite's own names, no implementation

    return [f"{method}.{rule}" for method in HOOK_REGISTRIES]


def _edge_clause_ids(method: str) -> list[str]:
    from packrt_conformance.suite._edges import EDGES  # the suite's own table, no implementation

    edges = EDGES.get(method)
    if edges is None:
        return [f"<unknown edge method {method!r}>"]
    return [edges.clause] + ([edges.split[0]] if edges.split else [])


def marked_clause_ids(path: Path) -> list[tuple[str, int]]:
    """(clause ID, line) for every ``pytest.mark.clause`` argument, ``clause_param`` ID, the clauses
    of every ``cases("<method>")`` edge matrix and the two registries' clauses of every
    ``hook_registry_cases("<rule>")`` in one test file.

    A non-literal argument is reported as the ID ``<non-literal>`` so the check can flag it.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if _is_clause_mark(node.func):
            ids = node.args
        elif _is_clause_param(node.func):
            ids = node.args[:1]
        elif _is_edge_cases(node.func) and node.args and isinstance(node.args[0], ast.Constant):
            found.extend((cid, node.lineno) for cid in _edge_clause_ids(str(node.args[0].value)))
            continue
        elif _is_hook_registry_cases(node.func):
            rule = node.args[0] if node.args else None
            if isinstance(rule, ast.Constant) and isinstance(rule.value, str):
                found.extend((cid, node.lineno) for cid in _hook_registry_clause_ids(rule.value))
            else:
                found.append(("<non-literal>", node.lineno))
            continue
        else:
            continue
        for arg in ids:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((arg.value, node.lineno))
            else:
                found.append(("<non-literal>", node.lineno))
    return found


def _raw_ids(clause_dir: Path) -> list[tuple[str, str]]:
    ids: list[tuple[str, str]] = []
    for path in sorted(clause_dir.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for raw in data.get("clause", []):
            if isinstance(raw, dict) and isinstance(raw.get("id"), str):
                ids.append((raw["id"], path.name))
    return ids


def check(clause_dir: Path, suite_dir: Path) -> CheckResult:
    """Compare the registry in ``clause_dir`` with the tests in ``suite_dir``."""
    problems: list[str] = []
    raw = _raw_ids(clause_dir)
    for cid, count in Counter(cid for cid, _ in raw).items():
        if count > 1:
            files = sorted({f for c, f in raw if c == cid})
            problems.append(f"clause ID {cid!r} is defined {count} times (in {', '.join(files)})")
    for path in sorted(clause_dir.glob("*.toml")):
        try:
            parse_file(path)
        except RegistryError as err:
            problems.append(f"invalid clause file: {err}")
    known = {cid for cid, _ in raw}
    tested: set[str] = set()
    marks = 0
    for path in sorted(suite_dir.glob("test_*.py")):
        for cid, line in marked_clause_ids(path):
            marks += 1
            if cid not in known:
                problems.append(f"{path.name}:{line}: test names unknown clause {cid!r}")
            tested.add(cid)
    for cid in sorted(known - tested):
        problems.append(f"clause {cid!r} has no test: add @pytest.mark.clause({cid!r}) to a suite test")
    return CheckResult(problems=problems, clauses=len(known), tests_marks=marks)


def main(argv: list[str] | None = None) -> int:
    """Check the shipped registry against the shipped suite; print problems; return 0 or 1."""
    del argv
    package = Path(__file__).parent
    result = check(package / "clauses", package / "suite")
    for problem in result.problems:
        print(problem, file=sys.stderr)
    if result.ok:
        registry = load_registry()
        rev1, rev2 = len(registry.for_revision(1)), len(registry.for_revision(2))
        marks = result.tests_marks
        print(f"ok: {result.clauses} clauses ({rev1} in revision 1, {rev2} in revision 2), {marks} marks")
        return 0
    print(f"{len(result.problems)} problem(s)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
