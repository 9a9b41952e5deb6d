"""The coverage check: untested clauses, unknown clause names and repeated IDs all fail it."""

from __future__ import annotations

from pathlib import Path

import pytest

from packrt_conformance.check import check, main, marked_clause_ids

CLAUSES = """method = "m"
[[clause]]
id = "m.one"
revisions = [2]
rule = "First."
[[clause]]
id = "m.two"
revisions = [1, 2]
rule = "Second."
"""


def _tree(tmp_path: Path, clauses: str, tests: str) -> tuple[Path, Path]:
    cdir, sdir = tmp_path / "clauses", tmp_path / "suite"
    cdir.mkdir()
    sdir.mkdir()
    (cdir / "m.toml").write_text(clauses, encoding="utf-8")
    (sdir / "test_m.py").write_text(tests, encoding="utf-8")
    return cdir, sdir


def test_shipped_registry_and_suite_agree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main() == 0
    assert "ok:" in capsys.readouterr().out


def test_complete_coverage_passes(tmp_path: Path) -> None:
    tests = 'import pytest\n@pytest.mark.clause("m.one", "m.two")\ndef test_x(): pass\n'
    result = check(*_tree(tmp_path, CLAUSES, tests))
    assert result.ok, result.problems
    assert result.clauses == 2
    assert result.tests_marks == 2


def test_clause_without_test_fails(tmp_path: Path) -> None:
    tests = 'import pytest\n@pytest.mark.clause("m.one")\ndef test_x(): pass\n'
    result = check(*_tree(tmp_path, CLAUSES, tests))
    assert result.problems == ["clause 'm.two' has no test: add @pytest.mark.clause('m.two') to a suite test"]


def test_test_naming_unknown_clause_fails(tmp_path: Path) -> None:
    tests = (
        "import pytest\n"
        '@pytest.mark.clause("m.one", "m.two")\ndef test_x(): pass\n'
        'P = [pytest.param(1, marks=pytest.mark.clause("m.three"))]\n'
    )
    result = check(*_tree(tmp_path, CLAUSES, tests))
    assert result.problems == ["test_m.py:4: test names unknown clause 'm.three'"]


def test_repeated_id_fails(tmp_path: Path) -> None:
    clauses = CLAUSES + '[[clause]]\nid = "m.one"\nrevisions = [2]\nrule = "Again."\n'
    tests = 'import pytest\n@pytest.mark.clause("m.one", "m.two")\ndef test_x(): pass\n'
    result = check(*_tree(tmp_path, clauses, tests))
    assert result.problems == ["clause ID 'm.one' is defined 2 times (in m.toml)"]


def test_non_literal_clause_argument_is_flagged(tmp_path: Path) -> None:
    tests = 'import pytest\nCID = "m.one"\n@pytest.mark.clause(CID, "m.two")\ndef test_x(): pass\n'
    cdir, sdir = _tree(tmp_path, CLAUSES, tests)
    assert marked_clause_ids(sdir / "test_m.py") == [("<non-literal>", 3), ("m.two", 3)]
    assert "test_m.py:3: test names unknown clause '<non-literal>'" in check(cdir, sdir).problems


def test_hook_registry_cases_mark_the_rules_clause_of_both_registries(tmp_path: Path) -> None:
    clauses = "".join(
        f'[[clause]]\nid = "{method}.removes"\nrevisions = [2]\nrule = "Removed."\n'
        for method in ("register_forward_hook", "register_forward_pre_hook")
    )
    tests = (
        "import pytest\n"
        "from packrt_conformance.suite._support import hook_registry_cases\n"
        'P = [*hook_registry_cases("removes"), *hook_registry_cases(RULE)]\n'
    )
    cdir, sdir = _tree(tmp_path, 'method = "m"\n' + clauses, tests)
    assert marked_clause_ids(sdir / "test_m.py") == [
        ("register_forward_hook.removes", 3),
        ("register_forward_pre_hook.removes", 3),
        ("<non-literal>", 3),
    ]
    assert check(cdir, sdir).problems == ["test_m.py:3: test names unknown clause '<non-literal>'"]


def test_a_clause_param_case_marks_its_literal_clause_id(tmp_path: Path) -> None:
    tests = (
        "import pytest\n"
        "from packrt_conformance.suite._support import clause_param\n"
        'P = [clause_param("m.one", 1, "m.two"), clause_param(CID, 2)]\n'
    )
    cdir, sdir = _tree(tmp_path, CLAUSES, tests)
    assert marked_clause_ids(sdir / "test_m.py") == [("m.one", 3), ("<non-literal>", 3)]
    assert check(cdir, sdir).problems == [
        "test_m.py:3: test names unknown clause '<non-literal>'",
        "clause 'm.two' has no test: add @pytest.mark.clause('m.two') to a suite test",
    ]
