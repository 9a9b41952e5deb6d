"""tools/release_check.py, rule by rule: on a small scratch tree of two packages, and on this repository.

The scratch tree holds ``alpha`` (0.2.0, released and recorded) and ``beta`` (0.1.0, which requires
``alpha>=0.2,<0.3``), laid out as the repository lays out its packages. Each test breaks one promise
there and expects the check to name the package and the fix, or keeps it and expects a pass.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import release_check
from release_check import Failure, RecordRefusedError, check, record

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(release_check.__file__)

PYPROJECT = """[project]
name = "{name}"
version = "{version}"
dependencies = [
    "numpy>=2.0",{requires}
]

[project.optional-dependencies]
test = ["pytest>=8"]{extra}
"""

CHANGELOG = """# Changelog: {name}

## Unreleased

## {version} (2026-12-06)

- The first release.
"""


def _write_package(root: Path, name: str, version: str, requires: str = "") -> None:
    folder = root / "packages" / name
    (folder / "src" / name).mkdir(parents=True)
    (folder / "src" / name / "__init__.py").write_text(f'"""{name}."""\n\n__version__ = "{version}"\n')
    (folder / "src" / name / "core.py").write_text("def answer() -> int:\n    return 42\n")
    requirement = f'\n    "{requires}",' if requires else ""
    (folder / "pyproject.toml").write_text(PYPROJECT.format(name=name, version=version, requires=requirement, extra=""))
    (folder / "CHANGELOG.md").write_text(CHANGELOG.format(name=name, version=version))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Two released packages whose versions, changelogs, fingerprints and ranges agree."""
    _write_package(tmp_path, "alpha", "0.2.0")
    _write_package(tmp_path, "beta", "0.1.0", requires="alpha>=0.2,<0.3")
    record(tmp_path, "alpha")
    record(tmp_path, "beta")
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _add_unreleased_entry(root: Path, package: str, entry: str = "- `answer` returns 43.") -> None:
    _edit(root / "packages" / package / "CHANGELOG.md", "## Unreleased\n", f"## Unreleased\n\n{entry}\n")


def _only(failures: list[Failure]) -> Failure:
    assert len(failures) == 1, "\n\n".join(map(str, failures))
    return failures[0]


def test_a_tree_whose_versions_say_what_changed_passes(tree: Path) -> None:
    assert check(tree) == []


def test_a_source_change_without_an_unreleased_entry_fails_naming_the_package(tree: Path) -> None:
    _edit(tree / "packages" / "alpha" / "src" / "alpha" / "core.py", "42", "43")
    failure = _only(check(tree))
    assert failure.package == "alpha"
    assert "sources changed since 0.2.0 without an '## Unreleased' entry" in failure.what
    assert failure.where == "packages/alpha/CHANGELOG.md"
    assert "## Unreleased" in failure.fix


def test_an_unreleased_entry_for_the_change_makes_the_check_pass_again(tree: Path) -> None:
    _edit(tree / "packages" / "alpha" / "src" / "alpha" / "core.py", "42", "43")
    _add_unreleased_entry(tree, "alpha")
    assert check(tree) == []


def test_a_new_source_file_is_a_source_change(tree: Path) -> None:
    (tree / "packages" / "alpha" / "src" / "alpha" / "extra.py").write_text("X = 1\n")
    assert _only(check(tree)).package == "alpha"


def test_a_dependency_change_is_a_source_change(tree: Path) -> None:
    _edit(tree / "packages" / "beta" / "pyproject.toml", '"numpy>=2.0"', '"numpy>=2.1"')
    assert _only(check(tree)).package == "beta"


def test_tests_readme_bytecode_and_pyproject_comments_are_not_sources(tree: Path) -> None:
    folder = tree / "packages" / "alpha"
    (folder / "tests").mkdir()
    (folder / "tests" / "test_core.py").write_text("def test_answer() -> None:\n    pass\n")
    (folder / "README.md").write_text("# alpha\n")
    (folder / "src" / "alpha" / "__pycache__").mkdir()
    (folder / "src" / "alpha" / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"\0")
    _edit(folder / "pyproject.toml", '"numpy>=2.0",', '"numpy>=2.0",  # why: the arrays')
    assert check(tree) == []


def test_a_sibling_range_that_excludes_the_siblings_version_fails(tree: Path) -> None:
    _edit(tree / "packages" / "beta" / "pyproject.toml", "alpha>=0.2,<0.3", "alpha>=0.3,<0.4")
    _add_unreleased_entry(tree, "beta", "- Requires alpha 0.3.")  # the dependency change itself is described
    failure = _only(check(tree))
    assert failure.package == "beta"
    assert "does not admit alpha's version 0.2.0" in failure.what
    assert failure.actual == "alpha>=0.3,<0.4"
    assert failure.where == "packages/beta/pyproject.toml, dependencies"
    assert failure.fix == "write 'alpha>=0.2,<0.3'"


def test_a_sibling_range_in_an_extra_is_held_to_the_same_rule(tree: Path) -> None:
    _edit(tree / "packages" / "beta" / "pyproject.toml", 'test = ["pytest>=8"]', 'test = ["pytest>=8", "alpha[x]<0.2"]')
    _add_unreleased_entry(tree, "beta", "- The test extra requires alpha.")
    failure = _only(check(tree))
    assert failure.where == "packages/beta/pyproject.toml, extra 'test'"
    assert failure.fix == "write 'alpha[x]>=0.2,<0.3'"


def test_a_sibling_pinned_with_double_equals_fails_though_it_admits_the_version(tree: Path) -> None:
    _edit(tree / "packages" / "beta" / "pyproject.toml", "alpha>=0.2,<0.3", "alpha==0.2.0")
    _add_unreleased_entry(tree, "beta", "- Pins alpha.")
    failure = _only(check(tree))
    assert "pins sibling alpha with ==" in failure.what
    assert failure.fix == "write 'alpha>=0.2,<0.3'"


def test_a_sibling_range_without_an_upper_bound_fails(tree: Path) -> None:
    _edit(tree / "packages" / "beta" / "pyproject.toml", "alpha>=0.2,<0.3", "alpha>=0.2")
    _add_unreleased_entry(tree, "beta", "- Any alpha from 0.2.")
    assert "has no upper bound" in _only(check(tree)).what


def test_a_final_version_the_changelog_has_not_cut_fails(tree: Path) -> None:
    _edit(tree / "packages" / "alpha" / "pyproject.toml", 'version = "0.2.0"', 'version = "0.3.0"')
    _edit(tree / "packages" / "alpha" / "src" / "alpha" / "__init__.py", '"0.2.0"', '"0.3.0"')
    _edit(tree / "packages" / "beta" / "pyproject.toml", "alpha>=0.2,<0.3", "alpha>=0.3,<0.4")
    _add_unreleased_entry(tree, "beta", "- Requires alpha 0.3.")
    failure = _only(check(tree))
    assert failure.package == "alpha"
    assert failure.what == "version 0.3.0 is not the CHANGELOG's newest release"


def test_a_package_without_a_changelog_fails(tree: Path) -> None:
    (tree / "packages" / "beta" / "CHANGELOG.md").unlink()
    failure = _only(check(tree))
    assert (failure.package, failure.what) == ("beta", "no CHANGELOG.md")


def test_a_cut_release_needs_its_recorded_fingerprint(tree: Path) -> None:
    (tree / "packages" / "alpha" / "release.toml").unlink()
    failure = _only(check(tree))
    assert failure.what == "released version 0.2.0 has no recorded fingerprint"
    assert failure.fix.startswith("python tools/release_check.py --record alpha")


def test_a_development_version_is_later_than_the_release_and_has_unreleased_entries(tree: Path) -> None:
    pyproject = tree / "packages" / "alpha" / "pyproject.toml"
    _edit(pyproject, 'version = "0.2.0"', 'version = "0.2.0.dev0"')
    _edit(tree / "packages" / "alpha" / "src" / "alpha" / "__init__.py", '"0.2.0"', '"0.2.0.dev0"')
    whats = [f.what for f in check(tree) if f.package == "alpha"]  # beta's range now shuts it out too
    assert whats == [
        "development version 0.2.0.dev0 is not later than the released 0.2.0",
        "development version 0.2.0.dev0 with nothing under '## Unreleased'",
    ]
    _edit(pyproject, 'version = "0.2.0.dev0"', 'version = "0.3.0.dev0"')
    _edit(tree / "packages" / "alpha" / "src" / "alpha" / "__init__.py", '"0.2.0.dev0"', '"0.3.0.dev0"')
    _add_unreleased_entry(tree, "alpha")
    assert _only(check(tree)).fix == "write 'alpha>=0.3.0.dev0,<0.4'"  # beta's range: from the dev version on
    _edit(tree / "packages" / "beta" / "pyproject.toml", "alpha>=0.2,<0.3", "alpha>=0.3.0.dev0,<0.4")
    _add_unreleased_entry(tree, "beta", "- Requires alpha 0.3.")
    assert check(tree) == []


def test_an_unreleased_heading_below_a_release_fails(tree: Path) -> None:
    # what a union merge of CHANGELOG.md can leave: a branch's old heading under the release cut meanwhile
    _edit(tree / "packages" / "alpha" / "CHANGELOG.md", "- The first release.\n", "## Unreleased (0.2.0.dev0)\n\n- x\n")
    failure = _only(check(tree))
    assert failure.what == "'## Unreleased' heading at line 7, below the release 0.2.0"


def test_a_dunder_version_that_disagrees_with_the_pyproject_fails(tree: Path) -> None:
    _edit(tree / "packages" / "alpha" / "src" / "alpha" / "__init__.py", '"0.2.0"', '"0.1.0"')
    _add_unreleased_entry(tree, "alpha", "- A wrong __version__.")
    failure = _only(check(tree))
    assert failure.where == "packages/alpha/src/alpha/__init__.py"
    assert failure.expected == '__version__ = "0.2.0"'


def test_record_refuses_while_unreleased_has_entries(tree: Path) -> None:
    _add_unreleased_entry(tree, "alpha")
    with pytest.raises(
        RecordRefusedError, match=r"still has 1 entries under '## Unreleased'; move those 0\.2\.0 ships"
    ):
        record(tree, "alpha")


def test_record_refuses_a_development_version(tree: Path) -> None:
    _edit(tree / "packages" / "alpha" / "pyproject.toml", 'version = "0.2.0"', 'version = "0.3.0.dev0"')
    with pytest.raises(RecordRefusedError, match=r"--record alpha: 0\.3\.0\.dev0 is a development version"):
        record(tree, "alpha")


def test_rerecording_a_release_takes_in_the_changes_moved_under_it(tree: Path) -> None:
    _edit(tree / "packages" / "alpha" / "src" / "alpha" / "core.py", "42", "43")
    _edit(tree / "packages" / "alpha" / "CHANGELOG.md", "- The first release.\n", "- The first release.\n- 43.\n")
    assert _only(check(tree)).package == "alpha"
    assert release_check.main(["--root", str(tree), "--record", "all"]) == 0
    assert check(tree) == []


def test_the_command_exits_1_and_prints_each_failure(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(tree / "packages" / "alpha" / "src" / "alpha" / "core.py", "42", "43")
    assert release_check.main(["--root", str(tree)]) == 1
    err = capsys.readouterr().err
    assert "release_check: alpha: its sources changed since 0.2.0" in err
    assert "  fix:" in err
    assert err.rstrip().endswith("release_check: 1 failure(s)")


def test_this_repository_passes_the_check() -> None:
    failures = check(ROOT)
    assert failures == [], "\n\n".join(map(str, failures))


def test_a_seeded_unversioned_change_in_a_copy_of_this_repository_fails(tmp_path: Path) -> None:
    """What CI relies on: the real packages, one source byte changed and no entry, fail the command."""
    ignore = shutil.ignore_patterns("tests", "benchmarks", "__pycache__", "*.pyc")
    for folder in [*sorted((ROOT / "packages").iterdir()), ROOT / "conformance"]:
        if (folder / "pyproject.toml").exists():
            shutil.copytree(folder, tmp_path / folder.relative_to(ROOT), ignore=ignore)
    released = [p for p in release_check.discover(tmp_path) if not p.version.is_prerelease]
    assert released, "no package of this repository is at a released version"
    package = released[0]
    seeded = sorted((package.folder / "src").glob("*/__init__.py"))[0]
    seeded.write_text(seeded.read_text() + "\n# a change no changelog mentions\n")
    log = package.folder / "CHANGELOG.md"
    text = log.read_text()
    start = text.index("## Unreleased")
    end = text.index("\n## ", start + 1)
    log.write_text(text[:start] + "## Unreleased\n" + text[end:])  # whatever it held, now nothing
    run = subprocess.run([sys.executable, str(SCRIPT), "--root", str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"release_check: {package.name}: its sources changed since {package.version}" in run.stderr
    assert "release_check: 1 failure(s)" in run.stderr, run.stderr
