"""Fail when a package's version does not say what changed, or a sibling range shuts a sibling out.

Run by ``nox -s release_check`` (in CI). The packages are every ``packages/*/`` and ``conformance/``
that hold a ``pyproject.toml``; each keeps a ``CHANGELOG.md`` and, once released, a ``release.toml``
with the fingerprint of what each released version shipped. The rules, per package:

1. Its sources changed since its last recorded version only with an entry under ``## Unreleased``.
   The fingerprint is a sha256 over ``src/**`` (relative paths and bytes, sorted; ``__pycache__``,
   dot-files and ``*.pyc`` left out) and the ``[project]`` keys that change what an install gets
   (``FINGERPRINTED_KEYS``: dependencies, extras, ``requires-python``, scripts, entry points). Tests,
   README and comments in ``pyproject.toml`` are not part of it. A fingerprint equal to the recorded
   one needs no entry; a different one needs at least one ``- `` entry under ``## Unreleased``.
2. The version says where the package stands. A final version (``0.2.0``) must be the CHANGELOG's
   newest ``## <version>`` heading and have a recorded fingerprint. A development or pre-release
   version (``0.3.0.dev0``) must be later than that heading and have entries under ``## Unreleased``
   (the changes it is a preview of). ``## Unreleased``, if present, is the first section and appears
   once; release headings are PEP 440 versions, newest first, with an optional ``(YYYY-MM-DD)``.
   A ``__version__ = "..."`` in a package's top-level ``__init__.py`` is that same version.
3. Every requirement on a sibling package (dependencies and every extra) is a range with an upper
   bound that admits the sibling's current version, ``packrt-core>=0.2,<0.3``; never an ``==`` pin,
   which makes two builds of one version incompatible for no reason the version shows.

Cutting a release of a package: move its ``## Unreleased`` entries under ``## <version> (<date>)``
(leaving an empty ``## Unreleased`` above), set that version in its ``pyproject.toml``, widen the
siblings' ranges that must admit it, then record what it ships:

    python tools/release_check.py                          # check every package (exit 1 on a failure)
    python tools/release_check.py --record packrt-io       # record the fingerprint of packrt-io's version
    python tools/release_check.py --record all             # every package at a final version
    python tools/release_check.py --root PATH              # another checkout (the tests' scratch trees)

``--record`` refuses a development version, a version the CHANGELOG has not cut, and a package whose
``## Unreleased`` still has entries (they would be recorded as part of the release without saying so).
Recording the same version again replaces its fingerprint: that is how a release is re-cut before it is
published, e.g. after merging changes whose entries were moved under it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
RECORD_FILE = "release.toml"
# The [project] keys whose change changes what `pip install` gives a user (the version is what we check).
FINGERPRINTED_KEYS = (
    "dependencies",
    "optional-dependencies",
    "requires-python",
    "scripts",
    "gui-scripts",
    "entry-points",
)
UNRELEASED = re.compile(r"^## Unreleased\b")
RELEASE = re.compile(r"^## (?P<version>\S+)(?: \((?P<date>\d{4}-\d{2}-\d{2})\))?\s*$")
RECORD_COMMAND = "python tools/release_check.py --record"


@dataclass(frozen=True)
class Failure:
    """One broken rule: what failed, where, expected against actual, and the fix."""

    package: str
    what: str
    where: str
    expected: str
    actual: str
    fix: str

    def __str__(self) -> str:
        return (
            f"{self.package}: {self.what}\n  where:    {self.where}\n  expected: {self.expected}\n"
            f"  actual:   {self.actual}\n  fix:      {self.fix}"
        )


@dataclass
class Changelog:
    """A CHANGELOG.md read as sections: the Unreleased entries and the released versions, newest first."""

    unreleased: list[str] | None = None  # None: no "## Unreleased" heading at all
    releases: list[Version] = field(default_factory=list)
    problems: list[tuple[str, str, str, str]] = field(default_factory=list)  # (what, expected, actual, fix)


@dataclass
class Package:
    """One distribution of the repository: its folder, name, version and requirements."""

    folder: Path
    name: str
    version: Version
    project: dict[str, Any]  # the pyproject's [project] table as tomllib reads it

    def requirements(self) -> list[tuple[str, str]]:
        """Every requirement string with where it is declared ("dependencies" or "extra 'name'")."""
        found = [("dependencies", str(line)) for line in self.project.get("dependencies", [])]
        extras: dict[str, list[str]] = self.project.get("optional-dependencies", {})
        for extra, lines in extras.items():
            found += [(f"extra '{extra}'", line) for line in lines]
        return found


def discover(root: Path) -> list[Package]:
    """The repository's packages: ``packages/*/`` and ``conformance/``, each with a pyproject.toml."""
    folders = sorted(p.parent for p in (root / "packages").glob("*/pyproject.toml"))
    if (root / "conformance" / "pyproject.toml").exists():
        folders.append(root / "conformance")
    packages = []
    for folder in folders:
        project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        packages.append(Package(folder, str(project["name"]), Version(str(project["version"])), project))
    return packages


def fingerprint(package: Package) -> str:
    """sha256 over the package's shipped sources and install-relevant metadata (module docstring, rule 1)."""
    digest = hashlib.sha256()
    source = package.folder / "src"
    files = [
        path
        for path in source.rglob("*")
        if path.is_file()
        and path.suffix not in {".pyc", ".pyo"}
        and not any(part == "__pycache__" or part.startswith(".") for part in path.relative_to(source).parts)
    ]
    for path in sorted(files, key=lambda p: p.relative_to(source).as_posix()):
        data = path.read_bytes()
        digest.update(b"file\0" + path.relative_to(source).as_posix().encode() + b"\0")
        digest.update(len(data).to_bytes(8, "big") + data)
    metadata = {key: package.project.get(key) for key in FINGERPRINTED_KEYS}
    digest.update(b"metadata\0" + json.dumps(metadata, sort_keys=True).encode())
    return "sha256:" + digest.hexdigest()


def read_changelog(path: Path) -> Changelog:
    """The sections of a CHANGELOG.md, and what in its headings breaks rule 2's layout."""
    log = Changelog()
    section: list[str] | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if UNRELEASED.match(line):
            if log.unreleased is not None or log.releases:
                if log.releases:
                    what = f"'## Unreleased' heading at line {number}, below the release {log.releases[-1]}"
                else:
                    what = f"a second '## Unreleased' heading at line {number}"
                log.problems.append(
                    (
                        what,
                        "one '## Unreleased', above every release",
                        line,
                        "move its entries into the top '## Unreleased' (or the release they shipped in) "
                        "and delete the heading (a union merge of CHANGELOG.md can leave one behind)",
                    )
                )
            section = log.unreleased = [] if log.unreleased is None else log.unreleased
        elif line.startswith("## "):
            section = None
            match = RELEASE.match(line)
            try:
                version = Version(match["version"]) if match else None
            except InvalidVersion:
                version = None
            if version is None:
                expected = "'## Unreleased' or '## <PEP 440 version>' with an optional ' (YYYY-MM-DD)'"
                log.problems.append((f"unreadable heading at line {number}", expected, line, "rename it"))
            elif log.releases and version >= log.releases[-1]:
                expected = f"a version below {log.releases[-1]} (releases newest first)"
                log.problems.append((f"release heading out of order at line {number}", expected, line, "reorder"))
            else:
                log.releases.append(version)
        elif section is not None and re.match(r"^[-*] \S", line):
            section.append(line)
    return log


def read_records(package: Package) -> dict[str, str]:
    """version -> fingerprint from the package's release.toml (empty when it has none)."""
    path = package.folder / RECORD_FILE
    if not path.exists():
        return {}
    released: dict[str, str] = tomllib.loads(path.read_text(encoding="utf-8")).get("released", {})
    return released


def _where(package: Package, root: Path, name: str) -> str:
    return (package.folder / name).relative_to(root).as_posix()


def check_version(package: Package, log: Changelog, records: dict[str, str], root: Path) -> list[Failure]:
    """Rules 1 and 2: the version, the CHANGELOG's sections and the recorded fingerprint agree."""
    changelog = _where(package, root, "CHANGELOG.md")
    failures = [Failure(package.name, what, changelog, exp, act, fix) for what, exp, act, fix in log.problems]
    newest = log.releases[0] if log.releases else None
    entries = log.unreleased or []
    version = package.version
    pyproject = _where(package, root, "pyproject.toml")
    if version.is_prerelease or version.is_devrelease:
        if newest is not None and version <= newest:
            failures.append(
                Failure(
                    package.name,
                    f"development version {version} is not later than the released {newest}",
                    pyproject,
                    f"a version after {newest}",
                    str(version),
                    f"set a version after {newest} in pyproject.toml, e.g. the next minor's .dev0",
                )
            )
        if not entries:
            failures.append(
                Failure(
                    package.name,
                    f"development version {version} with nothing under '## Unreleased'",
                    changelog,
                    "at least one entry under '## Unreleased' (what this version previews)",
                    "none",
                    f"describe the changes under '## Unreleased', or go back to the released {newest}",
                )
            )
        return failures  # its entries are required above, so rule 1 holds whatever the fingerprint
    if newest != version:
        failures.append(
            Failure(
                package.name,
                f"version {version} is not the CHANGELOG's newest release",
                f"{pyproject}, {changelog}",
                f"'## {version} (<date>)' as the newest release heading",
                f"newest release heading: {newest or 'none'}",
                f"cut {version} in the CHANGELOG (move '## Unreleased' entries under '## {version} (<date>)'), "
                f"then {RECORD_COMMAND} {package.name}",
            )
        )
        return failures
    return failures + _check_fingerprint(package, version, entries, records, root)


def _check_fingerprint(
    package: Package, newest: Version, entries: list[str], records: dict[str, str], root: Path
) -> list[Failure]:
    """Rule 1: a change since the last recorded release is described under '## Unreleased'."""
    recorded = records.get(str(newest))
    if recorded is None:
        return [
            Failure(
                package.name,
                f"released version {newest} has no recorded fingerprint",
                _where(package, root, RECORD_FILE),
                f"a fingerprint for {newest} under [released]",
                f"recorded: {', '.join(records) or 'nothing'}",
                f"{RECORD_COMMAND} {package.name} (at the commit that cuts {newest})",
            )
        ]
    now = fingerprint(package)
    if now == recorded or entries:
        return []
    return [
        Failure(
            package.name,
            f"its sources changed since {newest} without an '## Unreleased' entry",
            _where(package, root, "CHANGELOG.md"),
            f"an entry under '## Unreleased' (src/ or dependencies differ from {newest}'s {recorded[:19]}...)",
            f"no entry; fingerprint now {now[:19]}...",
            "describe the change under '## Unreleased' (or, re-cutting an unpublished release, move it under "
            f"'## {newest}' and run {RECORD_COMMAND} {package.name})",
        )
    ]


VERSION_ATTRIBUTE = re.compile(r"^__version__ = [\"'](?P<version>[^\"']+)[\"']", re.MULTILINE)


def check_version_attribute(package: Package, root: Path) -> list[Failure]:
    """Rule 2, in the code: a ``__version__`` written in a top-level ``__init__.py`` is the pyproject's."""
    failures = []
    for init in sorted((package.folder / "src").glob("*/__init__.py")):
        match = VERSION_ATTRIBUTE.search(init.read_text(encoding="utf-8"))
        if match and match["version"] != str(package.version):
            failures.append(
                Failure(
                    package.name,
                    "its __version__ is not its pyproject version",
                    init.relative_to(root).as_posix(),
                    f'__version__ = "{package.version}"',
                    match.group(0),
                    f'write __version__ = "{package.version}" (pyproject.toml\'s version)',
                )
            )
    return failures


def check_siblings(package: Package, versions: dict[NormalizedName, Version], root: Path) -> list[Failure]:
    """Rule 3: each requirement on a sibling is a bounded range that admits the sibling's version."""
    failures = []
    pyproject = _where(package, root, "pyproject.toml")
    for declared, line in package.requirements():
        try:
            requirement = Requirement(line)
        except InvalidRequirement as err:
            failures.append(
                Failure(package.name, f"unreadable requirement in {declared}", pyproject, "PEP 508", line, str(err))
            )
            continue
        sibling = canonicalize_name(requirement.name)
        if sibling not in versions:
            continue
        current = versions[sibling]
        # a development version sorts below its release, so a range admitting it starts at it
        series = str(current) if current.is_prerelease else f"{current.major}.{current.minor}"
        upper = f"{current.major}.{current.minor + 1}" if current.major == 0 else f"{current.major + 1}"
        suggested = f"{requirement.name}{_extras(requirement)}>={series},<{upper}"
        operators = {spec.operator for spec in requirement.specifier}
        where = f"{pyproject}, {declared}"
        if operators & {"==", "==="}:
            what = f"pins sibling {requirement.name} with == (two builds of one version then disagree)"
            failures.append(Failure(package.name, what, where, "a range", line, f"write '{suggested}'"))
        elif not requirement.specifier.contains(current, prereleases=True):
            what = f"its range on {requirement.name} does not admit {requirement.name}'s version {current}"
            expected = f"a range containing {current}"
            failures.append(Failure(package.name, what, where, expected, line, f"write '{suggested}'"))
        elif not operators & {"<", "<=", "~="}:
            what = f"its range on {requirement.name} has no upper bound"
            failures.append(
                Failure(package.name, what, where, f"an upper bound ({suggested})", line, f"write '{suggested}'")
            )
    return failures


def _extras(requirement: Requirement) -> str:
    return f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""


def check(root: Path) -> list[Failure]:
    """Every rule over every package under ``root``."""
    packages = discover(root)
    versions = {canonicalize_name(p.name): p.version for p in packages}
    failures = []
    for package in packages:
        changelog = package.folder / "CHANGELOG.md"
        if changelog.exists():
            failures += check_version(package, read_changelog(changelog), read_records(package), root)
        else:
            where = _where(package, root, "CHANGELOG.md")
            fix = "write one: '# Changelog: <name>', then '## Unreleased' with what the package does"
            failures.append(Failure(package.name, "no CHANGELOG.md", where, "a CHANGELOG.md", "none", fix))
        failures += check_version_attribute(package, root)
        failures += check_siblings(package, versions, root)
    return failures


class RecordRefusedError(ValueError):
    """``--record`` would write a fingerprint that does not describe a cut release."""


def record(root: Path, name: str) -> str:
    """Write the fingerprint of package ``name``'s current version into its release.toml; returns a summary."""
    by_name = {canonicalize_name(p.name): p for p in discover(root)}
    package = by_name.get(canonicalize_name(name))
    if package is None:
        raise RecordRefusedError(f"--record {name}: no such package under {root} (known: {', '.join(sorted(by_name))})")
    log = read_changelog(package.folder / "CHANGELOG.md")
    version = package.version
    changelog = _where(package, root, "CHANGELOG.md")
    if version.is_prerelease or version.is_devrelease:
        raise RecordRefusedError(
            f"--record {name}: {version} is a development version; set the release's version in pyproject.toml first"
        )
    if not log.releases or log.releases[0] != version:
        newest = log.releases[0] if log.releases else "none"
        raise RecordRefusedError(
            f"--record {name}: {changelog}'s newest release is {newest}, not {version}; "
            f"cut '## {version} (<date>)' there first"
        )
    if log.unreleased:
        raise RecordRefusedError(
            f"--record {name}: {changelog} still has {len(log.unreleased)} entries under '## Unreleased'; "
            f"move those {version} ships under '## {version}' first"
        )
    records = read_records(package)
    records[str(version)] = fingerprint(package)
    lines = [
        f"# What each released version of {package.name} shipped: a sha256 over src/ and the install-relevant",
        "# [project] keys (tools/release_check.py). Written by `python tools/release_check.py --record "
        f"{package.name}`; do not edit.",
        "",
        "[released]",
    ]
    lines += [f'"{v}" = "{records[v]}"' for v in sorted(records, key=Version, reverse=True)]
    (package.folder / RECORD_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f"{package.name} {version}: {records[str(version)]}"


def main(argv: list[str] | None = None) -> int:
    """Check every package (exit 1 with the failures), or record fingerprints with ``--record``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository checkout (default: this one)")
    parser.add_argument(
        "--record", nargs="+", metavar="PACKAGE", help="record these packages' fingerprints ('all': every final one)"
    )
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    if args.record:
        names = args.record
        if names == ["all"]:
            names = [p.name for p in discover(root) if not (p.version.is_prerelease or p.version.is_devrelease)]
        refused = 0
        for name in names:  # every package's answer, not only the first refusal's
            try:
                print(f"recorded {record(root, name)}")
            except RecordRefusedError as err:
                print(f"release_check: {err}", file=sys.stderr)
                refused += 1
        return 2 if refused else 0
    failures = check(root)
    for failure in failures:
        print(f"release_check: {failure}\n", file=sys.stderr)
    if failures:
        print(f"release_check: {len(failures)} failure(s)", file=sys.stderr)
        return 1
    print(f"release_check: {len(discover(root))} packages: versions, changelogs, fingerprints and sibling ranges agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
