"""mkdocs hooks for the packrt site (registered in mkdocs.yml; docs/README.md explains them).

- Clause tables. ``<!-- clauses: <method> -->`` in a page becomes the table of that method's clauses
  from the registry (``packrt_conformance/clauses/*.toml``), each row carrying the anchor its clause
  ID names and linking to the clause's row in the conformance report; the report's rows link back.
  A registry method with no table in module.md, or a clause cited as ``[<clause id>]`` that the
  registry does not know, is a warning (so ``--strict`` fails).
- Citations. ``[<clause id>]`` in prose becomes a link to that clause's rule anchor in module.md.
- Generated pages: ``reports/conformance.md`` (the clause tables of the latest reports for packrt
  and torch) and ``reports/changelogs.md`` (every package's CHANGELOG.md).
- ``<!-- packrt-exports -->``: every name ``import packrt`` exposes, linked to where it is documented.
- ``<!-- benchmarks-standing -->``: the newest stored benchmark run (``benchmarks/baselines/``) as
  ``benchmarks/report.py`` summarises it: machine, peer table, every tracked ratio and its target.
- ``<!-- packrt-cli -->``: the ``packrt`` command's help and every subcommand's, printed from the
  parser the command itself uses (``packrt.cli.build_parser``), so the page cannot fall behind.
- No raw Sphinx roles: the docstrings' ``:class:`` and ``:func:`` roles become links through
  ``docs/_griffe_roles.py``; a role left as text anywhere in the built HTML is a warning (so
  ``--strict`` fails), naming the page and the role.
- Links out of docs/ to files of the repository: images are copied into the site, other files are
  shown as their repository path (the site has no source browser); a link to a missing file stays
  as it is, and mkdocs reports it.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import types
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.packrt")
ROOT = Path(__file__).resolve().parents[1]
CONTRACT_PAGE = "module.md"
REPORT_PAGE = "reports/conformance.md"
CHANGELOG_PAGE = "reports/changelogs.md"
# Reports the site shows: (implementation, revision). Fresh ones come from PACKRT_DOCS_REPORTS
# (what `nox -s docs` or `nox -s conformance` just wrote); docs/_conformance_snapshot holds a snapshot.
REPORTS = [("packrt", 2), ("packrt", 1), ("torch", 2)]
CHANGELOGS = [
    ("packrt", "packages/packrt/CHANGELOG.md"),
    ("packrt-core", "packages/packrt-core/CHANGELOG.md"),
    ("packrt-io", "packages/packrt-io/CHANGELOG.md"),
    ("packrt-hooks", "packages/packrt-hooks/CHANGELOG.md"),
    ("packrt-kernels-cpu", "packages/packrt-kernels-cpu/CHANGELOG.md"),
    ("packrt-kernels-cuda", "packages/packrt-kernels-cuda/CHANGELOG.md"),
    ("packrt-ray", "packages/packrt-ray/CHANGELOG.md"),
    ("packrt-conformance", "conformance/CHANGELOG.md"),
]
# Where the names `import packrt` re-exports are documented (the module rendered in the reference).
CANONICAL = {
    "packrt": "packrt_core",
    "packrt.nn": "packrt_core.nn",
    "packrt.nn.functional": "packrt_core.nn.functional",
    "packrt.io": "packrt_io",
    "packrt.hooks": "packrt_hooks",
    "packrt.errors": "packrt_core.errors",
    "packrt.cuda": "packrt_core.cuda",
    "packrt.models": "packrt.models",
}
# Functions that share their name with a submodule of their package: griffe sees the submodule under
# the short name, so the reference renders the function by its full path.
SHADOWED = {
    "packrt_core.tensor": "packrt_core.creation.tensor",
    "packrt_hooks.capture": "packrt_hooks.capture.capture",
    "packrt_hooks.profile": "packrt_hooks.profile.profile",
    "packrt_kernels_cpu.tolerance": "packrt_kernels_cpu.tolerance.tolerance",
    # bound by a tuple assignment, which griffe does not read: rendered where dtypes.py names them
    "packrt_core.half": "packrt_core.dtypes.half",
    "packrt_core.double": "packrt_core.dtypes.double",
    "packrt_core.long": "packrt_core.dtypes.long",
}
_CITATION = re.compile(r"\[`?([A-Za-z_][A-Za-z0-9_]*(?:\.[a-z0-9][a-z0-9-]*)+)`?\](?![(\[:])")
_MARKER = re.compile(r"<!-- clauses: ([A-Za-z_][A-Za-z0-9_]*) -->")
_FENCE = re.compile(r"(^```.*?^```[ \t]*$)", re.DOTALL | re.MULTILINE)
_LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]+)\)")
# A Sphinx role as it reaches the HTML when nothing converted it (Markdown made its backticks <code>).
_RAW_ROLE = re.compile(r":(?:py:)?[a-z]+:(?:<code>|`)[^<`]*")

_state: dict[str, Any] = {}


def _registry() -> Any:
    from packrt_conformance.clauses import load_registry

    return load_registry()


def _load_reports() -> dict[tuple[str, int], tuple[dict[str, Any], str]]:
    fresh = os.environ.get("PACKRT_DOCS_REPORTS")
    places = ([Path(fresh)] if fresh else []) + [ROOT / "reports", ROOT / "docs" / "_conformance_snapshot"]
    found: dict[tuple[str, int], tuple[dict[str, Any], str]] = {}
    for impl, revision in REPORTS:
        for place in places:
            path = place / f"conformance-{impl}-cpu-rev{revision}.json"
            if path.is_file():
                found[(impl, revision)] = (
                    json.loads(path.read_text(encoding="utf-8")),
                    path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path),
                )
                break
        else:
            log.warning("no conformance report for %s revision %d in %s", impl, revision, [str(p) for p in places])
    return found


def _revisions(clause: Any) -> str:
    revs = sorted(clause.revisions)
    if revs == [1, 2]:
        return "1, 2"
    if revs == [2]:
        return "2 (new in 2)"
    return "1 only (superseded by 2)" if clause.superseded else "1 only"


def _rel(page_uri: str, target: str) -> str:
    return posixpath.relpath(target, posixpath.dirname(page_uri) or ".")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def on_config(config: Any) -> Any:
    _state["registry"] = _registry()
    _state["reports"] = _load_reports()
    _state["tabled"] = set()
    return config


def _report_page() -> str:
    registry = _state["registry"]
    reports = _state["reports"]
    columns = [key for key in REPORTS if key in reports]
    out = [
        "# Conformance reports: packrt and torch",
        "",
        "Every clause of the contract's registry, with the outcome each implementation got in its latest",
        "report. A clause ID links to its rule in [the contract](../module.md); each rule there links back",
        "here. `skip` means the clause belongs to the other revision or needs a capability the adapter",
        "does not declare; `xfail` is a divergence recorded in the implementation's expectation file (the",
        "reason is in the notes); `superseded` is a revision-1 rule that revision 2 replaced.",
        "",
        "| report | suite | implementation | device | created | counts | source |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for impl, revision in columns:
        report, source = reports[(impl, revision)]
        counts = ", ".join(f"{k} {v}" for k, v in sorted(report["summary"].items()))
        out.append(
            f"| {impl} rev {revision} | {report['suite']['version']} | {report['implementation']['name']} "
            f"{report['implementation']['version']} | {report['device']} | {report['created']} | {counts} "
            f"| `{source}` |"
        )
    out += [
        "",
        "Regenerate them with `nox -s conformance` (all three, into `reports/`) or `nox -s docs` (the",
        "packrt ones); the site takes `reports/` first and falls back to the snapshot in",
        "`docs/_conformance_snapshot/`.",
        "",
    ]
    outcomes = {key: {c["id"]: c for c in reports[key][0]["clauses"]} for key in columns}
    by_method: dict[str, list[Any]] = {}
    for clause in registry.values():
        by_method.setdefault(clause.method, []).append(clause)
    for method, clauses in by_method.items():
        out += [f"## `{method}`", ""]
        head = " | ".join(f"{impl} rev {rev}" for impl, rev in columns)
        out += [f"| clause | revisions | {head} | notes |", "| --- | --- |" + " --- |" * len(columns) + " --- |"]
        for clause in clauses:
            cells, notes = [], []
            for key in columns:
                entry = outcomes[key].get(clause.id)
                if entry is None:
                    cells.append("not in report")
                    continue
                cells.append(entry["outcome"])
                reason = entry.get("reason", "")
                if entry["outcome"] in ("xfail", "fail", "error", "xpass") and reason:
                    notes.append(f"{key[0]}: {reason}")
            anchor = f'<a id="{clause.id}"></a>[`{clause.id}`](../{CONTRACT_PAGE}#{clause.id})'
            out.append(f"| {anchor} | {_revisions(clause)} | " + " | ".join(cells) + f" | {_cell('; '.join(notes))} |")
        out.append("")
    return "\n".join(out)


def _changelog_page() -> str:
    out = [
        "# Changelogs",
        "",
        "Each distribution keeps its own version and changelog; here they are, newest first.",
        "",
    ]
    for dist, rel in CHANGELOGS:
        text = (ROOT / rel).read_text(encoding="utf-8")
        lines = text.splitlines()
        if lines and lines[0].startswith("# "):
            lines = lines[1:]
        body = "\n".join(("#" + line) if line.startswith("#") else line for line in lines)
        out += [f"## {dist}", "", f"From `{rel}`.", "", body.strip(), ""]
    return "\n".join(out)


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, REPORT_PAGE, content=_report_page()))
    files.append(File.generated(config, CHANGELOG_PAGE, content=_changelog_page()))
    _state["files"] = files
    return files


def _clause_table(method: str, page_uri: str) -> str:
    clauses = [c for c in _state["registry"].values() if c.method == method]
    if not clauses:
        log.warning("%s: a clause table names the method %r, which has no clauses in the registry", page_uri, method)
        return ""
    _state["tabled"].add(method)
    report = _rel(page_uri, REPORT_PAGE)
    rows = ["| clause | revisions | rule |", "| --- | --- | --- |"]
    for c in clauses:
        rule = c.rule + (f" *packrt's reading:* {c.reading}" if c.reading else "")
        rows.append(f'| <a id="{c.id}"></a>[`{c.id}`]({report}#{c.id}) | {_revisions(c)} | {_cell(rule)} |')
    return "\n".join(rows)


def _benchmarks_standing() -> str:
    import importlib.util

    spec = importlib.util.spec_from_file_location("packrt_bench_report", ROOT / "benchmarks" / "report.py")
    assert spec is not None and spec.loader is not None
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    newest = report.newest_baseline()
    if newest is None:
        log.warning("benchmarks/baselines/ holds no stored run for the benchmarks page to open with")
        return ""
    return str(report.standing(report.load(newest), newest.name))


def _cli_help() -> str:
    import argparse

    from packrt.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to this width: the same help on every machine
    parser = build_parser()
    sections = [f"## `packrt`\n\n```text\n{parser.format_help()}```"]
    # argparse has no public way to list a parser's subcommands: its actions are the only record
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, sub in action.choices.items():
                sections.append(f"## `packrt {name}`\n\n```text\n{sub.format_help()}```")
    return "\n\n".join(sections)


def _exports_table(page_uri: str) -> str:
    import packrt

    rows = ["| name | documented as |", "| --- | --- |"]

    def add(module_name: str, module: types.ModuleType) -> None:
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, types.ModuleType):
                if value.__name__ in CANONICAL or value.__name__.startswith("packrt."):
                    rows.append(f"| `{module_name}.{name}` | the module below |")
                continue
            target = f"{CANONICAL[module_name]}.{name}"
            if target in SHADOWED:  # a function named like its own submodule: rendered by its full path
                target = SHADOWED[target]
            rows.append(f"| `{module_name}.{name}` | [`{target}`][{target}] |")

    add("packrt", packrt)
    for sub in ("nn", "nn.functional", "io", "hooks", "errors", "cuda", "models"):
        module = packrt
        for part in sub.split("."):
            module = getattr(module, part)
        add(f"packrt.{sub}", module)
    return "\n".join(rows)


def _rewrite_links(text: str, page: Any, files: Files) -> str:
    docs_dir = Path(_state["config"]["docs_dir"]).resolve()
    page_dir = (docs_dir / page.file.src_uri).parent

    def fix(match: re.Match[str]) -> str:
        bang, label, target = match.groups()
        if "://" in target or target.startswith(("#", "mailto:")):
            return match.group(0)
        path = target.partition("#")[0]
        resolved = (page_dir / path).resolve()
        if resolved.is_relative_to(docs_dir) or not resolved.is_relative_to(ROOT) or not resolved.exists():
            return match.group(0)
        rel = resolved.relative_to(ROOT).as_posix()
        if bang and resolved.suffix.lower() in (".png", ".svg", ".jpg", ".jpeg", ".gif"):
            uri = f"_repo/{rel}"
            if files.get_file_from_path(uri) is None:
                files.append(File.generated(_state["config"], uri, abs_src_path=str(resolved)))
            return f"![{label}]({_rel(page.file.src_uri, uri)})"
        return f"{label} (`{rel}` in the repository)" if label.strip("`") != rel else f"`{rel}` (in the repository)"

    return _LINK.sub(fix, text)


def on_pre_build(config: Any) -> None:
    _state["config"] = config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    registry = _state["registry"]
    methods = {c.method for c in registry.values()}
    uri = page.file.src_uri
    parts = _FENCE.split(markdown)
    for i in range(0, len(parts), 2):  # outside fenced code only
        text = parts[i]
        text = _MARKER.sub(lambda m: _clause_table(m.group(1), uri), text)
        if "<!-- packrt-exports -->" in text:
            text = text.replace("<!-- packrt-exports -->", _exports_table(uri))
        if "<!-- benchmarks-standing -->" in text:
            text = text.replace("<!-- benchmarks-standing -->", _benchmarks_standing())
        if "<!-- packrt-cli -->" in text:
            text = text.replace("<!-- packrt-cli -->", _cli_help())

        def cite(match: re.Match[str]) -> str:
            cid = match.group(1)
            if cid in registry:
                target = "" if uri == CONTRACT_PAGE else _rel(uri, CONTRACT_PAGE)
                return f"[[`{cid}`]]({target}#{cid})"
            if cid.split(".")[0] in methods:
                log.warning("%s cites the clause %r, which the registry does not have", uri, cid)
            return match.group(0)

        if uri != REPORT_PAGE:
            text = _CITATION.sub(cite, text)
        text = _rewrite_links(text, page, files)
        parts[i] = text
    return "".join(parts)


def on_post_build(config: Any) -> None:
    for page in sorted(Path(config["site_dir"]).rglob("*.html")):
        roles = sorted(set(_RAW_ROLE.findall(page.read_text(encoding="utf-8"))))
        if roles:
            shown = ", ".join(role.replace("<code>", "`") + "`" for role in roles[:5])
            log.warning(
                "%s shows %d raw Sphinx role(s) as text (%s): write the docstring's reference as a role "
                "docs/_griffe_roles.py reads (:class:, :func:, :meth:, :mod:, ...) or as plain `code`",
                page.relative_to(config["site_dir"]),
                len(roles),
                shown,
            )
    missing = sorted({c.method for c in _state["registry"].values()} - _state["tabled"])
    if missing:
        log.warning("module.md has no clause table for %s: add <!-- clauses: <method> --> under its rule", missing)
