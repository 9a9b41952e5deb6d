"""Run each marked page's examples the way a newcomer would: in a fresh venv holding only what the page installs.

A page takes part when it marks its install steps: an HTML comment ``<!-- snippet-install -->`` on the
line before a ```bash fence. Every line of that block (comments after ``#`` aside) must be a
``pip install ...`` (or ``python -m pip install ...``) command; anything else is refused, so a page
cannot make this script run arbitrary shell. The page's ```python blocks then run in order as one
program (they share names, as a reader running them one after another would), except a block marked
``<!-- not-run -->`` on the line before its fence (the convention of packages/packrt/tests/test_docs.py).

For each page the script creates a venv with ``python -m venv``, runs the page's install commands in
it with ``--find-links DIST`` added (packrt's own distributions come from the wheels ``nox -s build``
wrote; third parties from the index pip is configured with) and ``--no-compile`` (byte-compiling all
of torch and transformers up front is most of an install's CPU time; the run compiles what it
imports), and runs the blocks with the venv's python in an empty temporary directory, ``PYTHONPATH``
unset, so nothing from the checkout can stand in for an installed package. Pages whose steps begin
with another page's steps share one venv: the shorter page runs first, before the venv holds anything
more than its own steps.

``--unpacked REQUIREMENT=DIR`` (what ``nox -s docs_snippets`` passes for torch and transformers) names a
folder holding that exact requirement already unpacked (``pip install --no-deps --target DIR``, done
once a CI run); a step that asks for it gets those files hard-linked into the venv first, and pip, run
as written, finds it installed and adds only what it depends on. The venv ends up as the step makes it,
without unpacking 750 MB of torch again.

A failure names the page, the block number and the page's own line (tracebacks point into the page),
and the script exits 1. Usage: ``python docs/_run_snippets.py [--dist dist] [PAGE ...]`` (default: every
marked page among README.md and docs/**/*.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
INSTALL_MARK = "<!-- snippet-install -->"
_FENCE = re.compile(r"^(?P<mark><!-- [a-z-]+ -->\n)?```(?P<lang>[a-z]*)[^\n]*\n(?P<code>.*?)^```", re.DOTALL | re.M)
_PIP_PREFIXES: tuple[tuple[str, ...], ...] = (
    ("pip", "install"),
    ("pip3", "install"),
    ("python", "-m", "pip", "install"),
    ("python3", "-m", "pip", "install"),
)
_TIMEOUT_S = 900  # one page's install or run: a hang guard, several times a quiet machine's minute


class SnippetError(Exception):
    """A page whose marked install steps or examples cannot be run as written."""


class Block(NamedTuple):
    """One fenced python block: its number on the page (1-based), first code line, and code (the triple the
    driver program reads back from JSON)."""

    number: int
    line: int
    code: str


@dataclass(frozen=True)
class Page:
    """A page's install commands (pip arguments after ``install``) and its python blocks that run."""

    path: str
    installs: tuple[tuple[str, ...], ...]
    blocks: tuple[Block, ...]
    skipped: int


def _pip_arguments(page: str, line_no: int, line: str) -> tuple[str, ...]:
    words = tuple(shlex.split(line, comments=True))
    for prefix in _PIP_PREFIXES:
        if words[: len(prefix)] == prefix and len(words) > len(prefix):
            return words[len(prefix) :]
    raise SnippetError(
        f"{page}:{line_no}: {line.strip()!r} in a {INSTALL_MARK} block is not a 'pip install ...' command; "
        "an install block holds pip install lines only (move other commands to an unmarked block)"
    )


def read_page(path: str) -> Page:
    """The page's marked install commands and its python blocks (``<!-- not-run -->`` ones counted apart)."""
    text = (ROOT / path).read_text(encoding="utf-8")
    installs: list[tuple[str, ...]] = []
    blocks: list[Block] = []
    skipped = number = 0
    for match in _FENCE.finditer(text):
        mark = (match.group("mark") or "").strip()
        first_line = text.count("\n", 0, match.start("code")) + 1
        if match.group("lang") == "bash" and mark == INSTALL_MARK:
            for offset, line in enumerate(match.group("code").splitlines()):
                if line.strip() and not line.lstrip().startswith("#"):
                    installs.append(_pip_arguments(path, first_line + offset, line))
        elif match.group("lang") == "python":
            number += 1
            if mark == "<!-- not-run -->":
                skipped += 1
            else:
                blocks.append(Block(number, first_line, match.group("code")))
    return Page(path, tuple(installs), tuple(blocks), skipped)


def marked_pages() -> list[str]:
    """README.md and every docs/ page that marks its install steps, in path order."""
    candidates = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))]
    marked = f"{INSTALL_MARK}\n```bash"  # the mark before a fence (a page may name the mark in its text)
    return [page for page in candidates if marked in (ROOT / page).read_text(encoding="utf-8")]


# The program a page runs as: each block compiled under the page's name, padded so its line numbers are the
# page's, run in one namespace; the first failure names the page and block and ends the run with status 1.
_DRIVER = """\
import json, sys, traceback
page, blocks = sys.argv[1], json.loads(open(sys.argv[2], encoding="utf-8").read())
namespace = {"__name__": "__main__"}
for number, line, code in blocks:
    try:
        exec(compile("\\n" * (line - 1) + code, page, "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"FAILED: {page} python block {number} (line {line})", file=sys.stderr)
        sys.exit(1)
"""


def _env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(command: list[str], what: str, cwd: Path) -> None:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=_TIMEOUT_S)
    if done.returncode != 0:
        raise SnippetError(f"{what} exited {done.returncode}:\n{done.stdout[-4000:]}{done.stderr[-8000:]}")
    print(f"     {what} ({time.perf_counter() - started:.0f} s)", flush=True)


def _link_unpacked(python: Path, folder: Path) -> None:
    """Hard-link the unpacked files in ``folder`` (package folders and dist-info) into the venv of ``python``."""
    query = [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    site = Path(subprocess.run(query, capture_output=True, text=True, check=True, env=_env()).stdout.strip())
    for entry in folder.iterdir():
        target = site / entry.name
        if entry.name in {".complete", "bin"} or target.exists():
            continue
        if entry.is_dir():
            shutil.copytree(entry, target, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(entry), str(target))


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system (--scratch elsewhere): a copy, slower but the same files
        shutil.copy2(source, target)


def run_page(page: Page, python: Path, work: Path) -> None:
    """Run the page's blocks with ``python`` in ``work`` (an empty directory); SnippetError on a failure."""
    program = work / "_blocks.json"
    program.write_text(json.dumps(page.blocks), encoding="utf-8")
    driver = work / "_driver.py"
    driver.write_text(_DRIVER, encoding="utf-8")
    run_dir = work / "run"
    run_dir.mkdir()
    _run([str(python), str(driver), page.path, str(program)], f"{page.path}'s python blocks", run_dir)


def run_all(paths: list[str], dist: Path, unpacked: dict[str, Path] | None = None, scratch: Path | None = None) -> int:
    """Install and run every page (pages sharing a prefix of steps share a venv); 0 when all ran."""
    pages = sorted((read_page(path) for path in paths), key=lambda p: len(p.installs))
    for page in pages:
        if not page.installs or not page.blocks:
            raise SnippetError(f"{page.path}: marked pages need install steps and at least one python block to run")
    shared = unpacked or {}
    failures: list[str] = []
    if scratch is not None:
        scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="packrt-snippets-", dir=scratch) as base:
        venvs: list[tuple[tuple[tuple[str, ...], ...], Path]] = []  # (steps installed, venv), one per distinct road
        for index, page in enumerate(pages):
            started = time.perf_counter()
            reuse = [(steps, venv) for steps, venv in venvs if page.installs[: len(steps)] == steps]
            steps, venv = max(reuse, key=lambda pair: len(pair[0])) if reuse else ((), Path(base) / f"venv{index}")
            if not reuse:
                _run([sys.executable, "-m", "venv", str(venv)], f"python -m venv {venv}", Path(base))
            else:
                venvs.remove((steps, venv))
            python = venv / "bin" / "python"
            try:
                for arguments in page.installs[len(steps) :]:
                    for requirement in arguments:
                        if requirement in shared:
                            _link_unpacked(python, shared[requirement])
                            print(f"     {requirement}: hard-linked from {shared[requirement]}")
                    command = [
                        str(python),
                        "-m",
                        "pip",
                        "install",
                        "-q",
                        "--no-compile",
                        "--find-links",
                        str(dist),
                        *arguments,
                    ]
                    _run(command, f"{page.path}: pip install {shlex.join(arguments)}", Path(base))
                venvs.append((page.installs, venv))
                work = Path(base) / f"page{index}"
                work.mkdir()
                run_page(page, python, work)
            except (SnippetError, subprocess.TimeoutExpired) as err:
                failures.append(f"{page.path}: {err}")
                print(f"FAIL {page.path} ({time.perf_counter() - started:.0f} s)\n{err}", file=sys.stderr)
                continue
            skipped = f", {page.skipped} marked not-run" if page.skipped else ""
            print(
                f"ok   {page.path}: {len(page.blocks)} python blocks ran{skipped} after {len(page.installs)} install "
                f"steps ({time.perf_counter() - started:.0f} s)"
            )
    print(f"{len(pages) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docs/_run_snippets.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dist", type=Path, default=ROOT / "dist", help="the wheels packrt installs from (nox -s build)"
    )
    parser.add_argument(
        "--unpacked",
        action="append",
        default=[],
        metavar="REQUIREMENT=DIR",
        help="a requirement already unpacked in DIR (pip install --no-deps --target DIR), hard-linked when a step asks",
    )
    parser.add_argument(
        "--scratch", type=Path, help="where the venvs are made (default: the system's temporary folder)"
    )
    parser.add_argument("pages", nargs="*", help="pages relative to the repository root (default: every marked page)")
    args = parser.parse_args(argv)
    if not any(args.dist.glob("packrt-*.whl")):
        print(f"error: {args.dist} holds no packrt wheel; run `nox -s build` first", file=sys.stderr)
        return 2
    paths = args.pages or marked_pages()
    if not paths:
        print(f"error: no page marks its install steps with {INSTALL_MARK}", file=sys.stderr)
        return 2
    unpacked: dict[str, Path] = {}
    for item in args.unpacked:
        requirement, equals, folder = item.rpartition("=")  # "torch==2.13.0=DIR": the last "=" ends the requirement
        if not equals or not Path(folder).is_dir():
            print(f"error: --unpacked {item!r} must be REQUIREMENT=DIR with DIR an existing folder", file=sys.stderr)
            return 2
        unpacked[requirement] = Path(folder).resolve()
    try:
        return run_all(paths, args.dist.resolve(), unpacked, args.scratch and args.scratch.resolve())
    except SnippetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
