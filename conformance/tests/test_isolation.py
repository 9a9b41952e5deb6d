"""The suite gives the same verdict wherever it runs, and what it prints can be followed.

Run from an implementer's project whose ``pytest.ini`` turns warnings into errors, adds options
and makes xfail strict, whose ``conftest.py`` would break any run that loads it, and with a hostile
``PYTEST_ADDOPTS``: the outcomes are those of a run from an empty directory. The test paths and
locations a failure reports are real files, and its reproduction command, run as printed, fails the
same clause again. The installed wheel alone finds torch's shipped expectation file for
``--impl torch``. The suite owns its hypothesis settings.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from cli_run import run_cli

HERE = Path(__file__).parent
CONFORMANCE = HERE.parent

HOSTILE_INI = """\
[pytest]
filterwarnings =
    error
addopts = -p no:hypothesispytest --maxfail=1 -W error --strict-config
xfail_strict = true
python_files = nothing_*.py
"""
HOSTILE_CONFTEST = 'raise RuntimeError("the implementer\'s conftest.py was loaded by the conformance run")\n'
MUTANT = "mutants:StrictIgnored"
BROKEN = (
    "load_state_dict.strict.raises",
    "load_state_dict.strict.runtime-error-lists-keys",
    "load_state_dict.missing-extra-state",
)


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, **extra}
    env.pop("PYTEST_ADDOPTS", None)
    env.update(extra)
    return env


def _suite(cwd: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], Any]:
    report = cwd / "report.json"
    report.unlink(missing_ok=True)
    done = run_cli(*args, "--report-json", str(report), "-q", cwd=cwd, env=env or _env())
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads(report.read_text(encoding="utf-8"))


def _outcomes(report: Any) -> dict[str, str]:
    return {c["id"]: c["outcome"] for c in report["clauses"]}


def _hostile(tmp: Path) -> Path:
    project = tmp / "implementer"
    project.mkdir()
    (project / "pytest.ini").write_text(HOSTILE_INI)
    (project / "conftest.py").write_text(HOSTILE_CONFTEST)
    (project / "expected.txt").write_text("".join(f"{cid} a known gap of this build\n" for cid in BROKEN))
    return project


@pytest.mark.usefixtures("require_packrt")
def test_a_hostile_project_changes_no_verdict(tmp_path: Path) -> None:
    project = _hostile(tmp_path)
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "expected.txt").write_text((project / "expected.txt").read_text())
    args = ("--impl", MUTANT, "--expectations", "expected.txt", "-k", "test_load", "--max-examples", "5")
    hostile_env = _env(PYTEST_ADDOPTS="--maxfail=1 -p no:hypothesispytest -W error")
    done, hostile = _suite(project, *args, env=hostile_env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _, reference = _suite(clean, *args)
    assert _outcomes(hostile) == _outcomes(reference)
    for cid in BROKEN:
        assert _outcomes(hostile)[cid] == "xfail", "an expected failure stays expected: no XPASS, no strict failure"
    assert "XPASS" not in done.stdout
    assert not (project / ".pytest_cache").exists() and not (project / ".hypothesis").exists()


@pytest.mark.usefixtures("require_packrt")
def test_a_failure_names_real_paths_and_a_reproduction_that_works(tmp_path: Path) -> None:
    project = _hostile(tmp_path)
    done, report = _suite(project, "--impl", MUTANT, "-k", "test_load", "--max-examples", "5")
    assert done.returncode == 1
    failed = [c for c in report["clauses"] if c["outcome"] == "fail"]
    assert sorted(c["id"] for c in failed) == sorted(BROKEN)
    for clause in failed:
        for field in ("rule", "expected", "actual", "location", "reproduce"):
            assert clause.get(field), f"{clause['id']}: the report's failure lacks {field}"
        assert "Failed" not in clause["reason"].split(":")[-1], clause["reason"]
        path, _, line = clause["location"].rpartition(":")
        assert Path(path).is_file() and int(line) > 0, clause["location"]
        assert all(Path(t.partition("::")[0]).is_file() for t in clause["tests"]), clause["tests"]
    assert report["failing_tests"] == 3
    assert "3 clauses fail (3 tests)" in done.stdout
    command = failed[0]["reproduce"]
    assert f"reproduce: {command}" in done.stdout
    argv = shlex.split(command)
    assert argv[0] == "packrt-conformance"
    again = run_cli(*argv[1:], cwd=project, env=_env())
    assert again.returncode == 1, again.stdout[-3000:]
    assert f"{failed[0]['id']} (revision 2)" in again.stdout
    assert "1 passed" not in again.stdout


def _wheel(tmp: Path) -> Path:
    """A wheel of the suite: built now from this checkout, or the one ``nox -s build`` left in dist/."""
    out = tmp / "wheel"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(CONFORMANCE)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    wheels = sorted(out.glob("packrt_conformance-*.whl")) if built.returncode == 0 else []
    if not wheels:
        wheels = sorted((CONFORMANCE.parent / "dist").glob("packrt_conformance-*.whl"))
    if not wheels:
        pytest.skip(f"no wheel of the suite could be built ({built.stderr[-500:]}) and dist/ holds none")
    return wheels[-1]


@pytest.mark.usefixtures("require_torch")
def test_the_installed_wheel_alone_finds_torchs_expectations(tmp_path: Path) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(_wheel(tmp_path)) as whl:
        whl.extractall(site)
    assert (site / "packrt_conformance" / "shipped_expectations" / "torch.txt").is_file()
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("PYTEST_ADDOPTS", None)
    probe = [sys.executable, "-c", "import packrt_conformance; print(packrt_conformance.__file__)"]
    where = subprocess.check_output(probe, env=env, text=True)
    assert where.strip().startswith(str(site)), "the run must use the wheel's files"
    done, report = _suite(empty, "--impl", "torch", "--max-examples", "5", env=env)
    assert done.returncode == 0, done.stdout[-3000:]
    shipped = (site / "packrt_conformance" / "shipped_expectations" / "torch.txt").read_text().splitlines()
    listed = {line.split()[0] for line in shipped if line.strip() and not line.startswith("#")}
    assert {cid for cid, o in _outcomes(report).items() if o == "xfail"} == listed
    assert report["expectations"].endswith("torch.txt")


PROFILE_TEST = """
from hypothesis import settings

def test_profile():
    s = settings()
    print("PROFILE", s.deadline, s.max_examples, s.derandomize, s.database)
"""


@pytest.mark.parametrize(("ci", "derandomized"), [("true", True), ("", False)])
def test_the_suite_owns_its_hypothesis_settings(pytester: pytest.Pytester, ci: str, derandomized: bool) -> None:
    pytester.makepyfile(test_profile=PROFILE_TEST)
    pytester.makeconftest(
        "from hypothesis import settings\n"
        "settings.register_profile('theirs', deadline=200, max_examples=3)\n"
        "settings.load_profile('theirs')\n"
    )
    os.environ["CI"] = ci
    try:
        result = pytester.runpytest_subprocess("-p", "packrt_conformance.plugin", "-s")
    finally:
        os.environ.pop("CI", None)
    result.stdout.fnmatch_lines([f"*PROFILE None 100 {derandomized} None*"])
    result.stdout.fnmatch_lines(["hypothesis: profile packrt-conformance, max_examples=100, deadline=None*"])


def test_a_bare_assertion_reports_the_values_and_the_summary_real_paths(tmp_path: Path) -> None:
    # An adapter whose helpers defeat meta_init fails a bare `assert not impl.has_storage(...)`.
    args = [
        "--impl",
        "broken_adapters:DevicePinned",
        "-q",
        "-k",
        "test_meta_init_module_receives_values_through_assign",
    ]
    done = run_cli(*args, cwd=tmp_path, env=_env())
    assert done.returncode == 1, done.stdout[-3000:]
    expected = next(ln for ln in done.stdout.splitlines() if ln.startswith("expected: "))
    actual = next(ln for ln in done.stdout.splitlines() if ln.startswith("actual: "))
    assert "assert not impl.has_storage(m.proj.weight)" in expected
    assert actual.startswith("actual: assert not True, where True = has_storage(")
    failed = [ln for ln in done.stdout.splitlines() if ln.startswith("FAILED ")]
    assert len(failed) == 1
    path = failed[0].removeprefix("FAILED ").partition("::")[0]
    assert not path.startswith(".."), failed[0]
    assert Path(path).is_absolute() and Path(path).is_file(), failed[0]
