"""Run each marked page's examples the way a newcomer would: in a fresh venv holding only what the page installs.

A page takes part when it marks its install steps: an HTML comment ``<!-- snippet-install -->`` on the
line before a ```bash fence. Every line of that block (comments after ``#`` aside) must be a
``pip install ...`` (or ``python -m pip install ...``) command, or the checkout's build step
``python3 -m pip install nox && python3 -m nox -s build`` (packrt is not on the package index: its
wheels come from a checkout), which the ``--dist`` folder stands for: ``nox -s docs_snippets`` requires
``nox -s build``, the same command. A ``--find-links dist`` in a pip line means that folder. Anything
else in an install block is refused.

The page's other blocks then run in the page's order: its ```python blocks as one program (they share
names, as a reader running them one after another would) and its ```bash blocks with ``bash -e -o
pipefail``, the venv's ``bin`` first on ``PATH`` (``pip``, ``python`` and ``packrt`` are the venv's), in a
folder where ``dist`` is the wheels' folder. A bash block may start a server in the background: when the
block ends, everything it started is stopped. A block marked ``<!-- not-run -->`` on the line before its
fence is skipped (the convention of packages/packrt/tests/test_docs.py): the README's two top commands
are, since they run this script themselves.

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
# The checkout's build step as an install block may write it: the --dist folder is what it makes.
_BUILD_STEPS = {
    ("python3", "-m", "pip", "install", "nox", "&&", "python3", "-m", "nox", "-s", "build"),
    ("python3", "-m", "nox", "-s", "build"),
    ("nox", "-s", "build"),
}
_TIMEOUT_S = 900  # one page's install or run: a hang guard, several times a quiet machine's minute


class SnippetError(Exception):
    """A page whose marked install steps or examples cannot be run as written."""


class Block(NamedTuple):
    """One fenced block that runs: its language (``python`` or ``bash``), its number among the page's blocks
    of that language (1-based), first code line, and code (what the driver program reads back from JSON)."""

    lang: str
    number: int
    line: int
    code: str


@dataclass(frozen=True)
class Page:
    """A page's install commands (pip arguments after ``install``) and its python and bash blocks that run."""

    path: str
    installs: tuple[tuple[str, ...], ...]
    blocks: tuple[Block, ...]
    skipped: int


def _pip_arguments(page: str, line_no: int, line: str) -> tuple[str, ...] | None:
    """The pip arguments after ``install``; None for the checkout's build step (``--dist`` stands for it)."""
    words = tuple(shlex.split(line, comments=True))
    if words in _BUILD_STEPS:
        return None
    for prefix in _PIP_PREFIXES:
        if words[: len(prefix)] == prefix and len(words) > len(prefix):
            return words[len(prefix) :]
    raise SnippetError(
        f"{page}:{line_no}: {line.strip()!r} in a {INSTALL_MARK} block is not a 'pip install ...' command or "
        "the build step 'python3 -m pip install nox && python3 -m nox -s build'; an install block holds those "
        "only (move other commands to an unmarked bash block, which runs in the page's order)"
    )


def read_page(path: str) -> Page:
    """The page's marked install commands and its python and bash blocks (``<!-- not-run -->`` ones counted
    apart), in the page's order."""
    text = (ROOT / path).read_text(encoding="utf-8")
    installs: list[tuple[str, ...]] = []
    blocks: list[Block] = []
    skipped = 0
    numbers = {"python": 0, "bash": 0}
    for match in _FENCE.finditer(text):
        mark = (match.group("mark") or "").strip()
        lang = match.group("lang")
        first_line = text.count("\n", 0, match.start("code")) + 1
        if lang == "bash" and mark == INSTALL_MARK:
            for offset, line in enumerate(match.group("code").splitlines()):
                if line.strip() and not line.lstrip().startswith("#"):
                    arguments = _pip_arguments(path, first_line + offset, line)
                    if arguments is not None:
                        installs.append(arguments)
        elif lang in numbers:
            numbers[lang] += 1
            if mark == "<!-- not-run -->":
                skipped += 1
            else:
                blocks.append(Block(lang, numbers[lang], first_line, match.group("code")))
    return Page(path, tuple(installs), tuple(blocks), skipped)


def marked_pages() -> list[str]:
    """README.md and every docs/ page that marks its install steps, in path order."""
    candidates = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))]
    marked = f"{INSTALL_MARK}\n```bash"  # the mark before a fence (a page may name the mark in its text)
    return [page for page in candidates if marked in (ROOT / page).read_text(encoding="utf-8")]


# The program a page runs as. Python blocks: compiled under the page's name, padded so their line numbers
# are the page's, run in one namespace. Bash blocks: bash -e -o pipefail in a session of their own, which is
# ended (SIGTERM, then SIGKILL) when the block returns, so a server a block left in the background stops.
# The first failure names the page and block and ends the run with status 1.
_DRIVER = """\
import json, os, signal, subprocess, sys, time, traceback
page, blocks = sys.argv[1], json.loads(open(sys.argv[2], encoding="utf-8").read())
timeout = float(sys.argv[3])
namespace = {"__name__": "__main__"}

def stop(group):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            return
        time.sleep(2)

def run_bash(code):
    sys.stdout.flush()
    shell = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", code], start_new_session=True)
    try:
        status = shell.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        status = f"still running after {timeout:.0f} s"
    finally:
        stop(shell.pid)
    if status != 0:
        raise RuntimeError(f"bash exited {status}")

for lang, number, line, code in blocks:
    try:
        if lang == "bash":
            run_bash(code)
        else:
            exec(compile("\\n" * (line - 1) + code, page, "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"FAILED: {page} {lang} block {number} (line {line})", file=sys.stderr)
        sys.exit(1)
"""


def _env(venv: Path | None = None) -> dict[str, str]:
    """The environment a step runs in; with ``venv``, the one a reader gets after activating it."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", os.defpath)])
    return env


def _run(command: list[str], what: str, cwd: Path, venv: Path | None = None) -> None:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=_env(venv), capture_output=True, text=True, timeout=_TIMEOUT_S)
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


def run_page(page: Page, venv: Path, work: Path, dist: Path) -> None:
    """Run the page's blocks in ``venv`` from ``work/run`` (empty but for ``dist``, the wheels' folder);
    SnippetError on a failure."""
    program = work / "_blocks.json"
    program.write_text(json.dumps(page.blocks), encoding="utf-8")
    driver = work / "_driver.py"
    driver.write_text(_DRIVER, encoding="utf-8")
    run_dir = work / "run"
    run_dir.mkdir()
    (run_dir / "dist").symlink_to(dist, target_is_directory=True)  # `--find-links dist`, as in a checkout
    command = [str(venv / "bin" / "python"), str(driver), page.path, str(program), str(_TIMEOUT_S)]
    kinds = " and ".join(sorted({block.lang for block in page.blocks}))
    _run(command, f"{page.path}'s {kinds} blocks", run_dir, venv)


def run_all(paths: list[str], dist: Path, unpacked: dict[str, Path] | None = None, scratch: Path | None = None) -> int:
    """Install and run every page (pages sharing a prefix of steps share a venv); 0 when all ran."""
    pages = sorted((read_page(path) for path in paths), key=lambda p: len(p.installs))
    for page in pages:
        if not page.installs or not page.blocks:
            raise SnippetError(f"{page.path}: marked pages need install steps and at least one block to run")
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
                    pip_arguments = [
                        str(dist) if arguments[i - 1 : i] == ("--find-links",) and word == "dist" else word
                        for i, word in enumerate(arguments)
                    ]
                    command = [
                        str(python),
                        "-m",
                        "pip",
                        "install",
                        "-q",
                        "--no-compile",
                        "--find-links",
                        str(dist),
                        *pip_arguments,
                    ]
                    _run(command, f"{page.path}: pip install {shlex.join(arguments)}", Path(base))
                venvs.append((page.installs, venv))
                work = Path(base) / f"page{index}"
                work.mkdir()
                run_page(page, venv, work, dist)
            except (SnippetError, subprocess.TimeoutExpired) as err:
                failures.append(f"{page.path}: {err}")
                print(f"FAIL {page.path} ({time.perf_counter() - started:.0f} s)\n{err}", file=sys.stderr)
                continue
            skipped = f", {page.skipped} marked not-run" if page.skipped else ""
            print(
                f"ok   {page.path}: {len(page.blocks)} blocks ran{skipped} after {len(page.installs)} install "
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
