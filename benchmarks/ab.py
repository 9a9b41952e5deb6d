"""Same-run A/B: packrt's kernel cases at another revision (REV) and at this working tree (HEAD), timed in
alternating rounds on this machine, reported as HEAD/REV per case with a bootstrap interval.

    python benchmarks/ab.py                      # against the merge base with main (HEAD~1 on main)
    python benchmarks/ab.py --against v0.1.0     # any git revision
    python benchmarks/ab.py --quick              # the --quick selection (kernel_cases.py), fewer rounds
    python benchmarks/ab.py --quick --changed-only --confirm   # CI's gate (nox -s benchmarks_ab)
    nox -s benchmarks -- --against REV [--quick] # the same from nox

REV's ``packages/*/src`` are extracted once per commit (``git archive``) under ``.benchmarks/ab/<sha>``
and reused. Two worker processes (``ab_worker.py``) import packrt, one from REV's sources, one from
HEAD's; every pool is pinned to one thread. Each round asks both, back to back and in alternating
order, to time every case for the same number of calls, in process CPU time. ``ab_stats`` turns the
paired rounds into HEAD/REV and its interval and flags a case only when the whole interval lies
beyond the threshold. ``--changed-only`` times only the cases whose code differs between the two trees
(kernel_cases.KernelCase.model says which packages that is); ``--confirm`` times each REGRESSED case again on
new workers and keeps the flag only when the second run agrees. Exit status: 0 none REGRESSED, 1 some case
REGRESSED, 2 the A/B could not run (a case's result wrong on either side, a worker failing). A case one side
cannot build is listed as missing, not judged. Statistics and how to read a flag: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import ab_stats
import kernel_cases

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
CACHE = ROOT / ".benchmarks" / "ab"
THRESHOLD = 1.10
# Worker pairs: rounds go to each in turn (ab_stats.estimate says why). Their number is the bootstrap's
# sample size for the between-pair part of the noise; with 4, an A/A run of SiLU read 0.829 (0.737-0.919),
# an interval too narrow for what 8 pairs then showed (0.97-1.07 between pairs).
PAIRS = 6
ROUNDS, QUICK_ROUNDS, MAX_ROUNDS, EXTRA_ROUNDS = 36, 24, 72, 12  # multiples of PAIRS: each pair as many rounds
BATCH_S, BATCHES = 0.004, 3
# The same conditions as `nox -s benchmarks` (benchmarks/README.md), and one thread for every pool but numba's:
# a kernel case is one kernel on one core (the worker caps numba's pool at 1), so nothing waits on a
# descheduled second thread, except in a case made for two threads (KernelCase.threads), which numba's pool
# of two then runs.
WORKER_ENV = {
    "NUMBA_NUM_THREADS": "2" if (os.cpu_count() or 1) >= 2 else "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "GOMP_SPINCOUNT": "20000",
    "OPENBLAS_THREAD_TIMEOUT": "20",
    "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824",
}
WORKER_UNSET = ("PYTHONPATH", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


class ABError(RuntimeError):
    """The A/B could not run (a revision that does not resolve, a worker that failed, a wrong result)."""


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise ABError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def default_against() -> str:
    """The merge base of HEAD with main, or HEAD~1 where HEAD is that base (on main itself)."""
    try:
        base = git("merge-base", "HEAD", "main")
    except ABError:
        return "HEAD~1"
    return "HEAD~1" if base == git("rev-parse", "HEAD") else base


def materialise(rev: str, cache: Path = CACHE) -> tuple[str, Path]:
    """(commit, a folder holding that commit's ``packages/*/src``), extracted once per commit and reused."""
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    folder = cache / sha
    if not (folder / ".complete").exists():
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", sha, "packages"], capture_output=True
        )
        if archive.returncode != 0:
            raise ABError(f"git archive {sha} packages failed: {archive.stderr.decode().strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            wanted = [m for m in tar.getmembers() if len(Path(m.name).parts) > 3 and Path(m.name).parts[2] == "src"]
            tar.extractall(folder, members=wanted, filter="data")
        (folder / ".complete").touch()  # last: a folder without it is from an extraction that was cut off
    return sha, folder


def source_dirs(tree: Path) -> list[str]:
    """Every ``packages/*/src`` of a tree (what the worker puts first on its path)."""
    found = sorted(str(p) for p in (tree / "packages").glob("*/src") if p.is_dir())
    if not found:
        raise ABError(f"{tree} has no packages/*/src: not a packrt tree")
    return found


KERNEL_PACKAGES = frozenset({"packrt-base", "packrt-kernels-cpu"})  # all a kernel case's code comes from


def changed_packages(head_tree: Path, rev_tree: Path) -> set[str]:
    """The packages whose ``src`` differs between the two trees: a file added, removed or edited
    (numba's and Python's caches left out)."""

    def files(tree: Path) -> dict[Path, Path]:
        found = {}
        for src in tree.glob("packages/*/src"):
            for path in src.rglob("*"):
                if path.is_file() and "__pycache__" not in path.parts:
                    found[path.relative_to(tree)] = path
        return found

    head, rev = files(head_tree), files(rev_tree)
    differ = head.keys() ^ rev.keys()
    differ |= {p for p in head.keys() & rev.keys() if head[p].read_bytes() != rev[p].read_bytes()}
    return {path.parts[1] for path in differ}


def touched(cases: list[kernel_cases.KernelCase], changed: set[str]) -> list[kernel_cases.KernelCase]:
    """The cases a change to the ``changed`` packages can slow: a whole-model case when any package's
    sources changed, a kernel case when the kernels' own packages (:data:`KERNEL_PACKAGES`) did."""
    return [c for c in cases if changed and (c.model or changed & KERNEL_PACKAGES)]


class Side:
    """A worker process importing packrt from one tree's sources."""

    def __init__(self, label: str, tree: Path) -> None:
        self.label, self.tree = label, tree
        env = {k: v for k, v in os.environ.items() if k not in WORKER_UNSET}
        env.update(WORKER_ENV)
        env["PYTHONPATH"] = os.pathsep.join([*source_dirs(tree), str(BENCHMARKS)])
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCHMARKS / "ab_worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            cwd=str(BENCHMARKS),
        )

    def send(self, op: str, **fields: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise ABError(
                f"the {self.label} worker ({self.tree}) exited (status {self.proc.wait()}); its stderr is above"
            )
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise ABError(f"the {self.label} worker ({self.tree}) failed:\n{answer['error']}")
        return answer

    def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        self.send(op, **fields)
        return self.receive()

    def close(self) -> None:
        """End the worker: its stdin closed, it leaves its loop; killed if it has not within 30 s."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _both(sides: list[Side], op: str, **fields: Any) -> list[dict[str, Any]]:
    """The same request to several workers at once (set-up work overlaps; never used for timing)."""
    for side in sides:
        side.send(op, **fields)
    return [side.receive() for side in sides]


Pair = tuple[Side, Side]  # (HEAD, REV)


def _launch(workers: list[Side], names: list[str], check: bool) -> list[dict[str, Any]]:
    """Each worker's packrt verified to come from its tree, then the cases built (and checked)."""
    for side, hello in zip(workers, _both(workers, "hello"), strict=True):
        expected = Path(side.tree).resolve()
        if not Path(hello["packrt_kernels_cpu"]).resolve().is_relative_to(expected):
            raise ABError(f"the {side.label} worker imported packrt from {hello['packrt_kernels_cpu']}, not {expected}")
    answers = _both(workers, "build", cases=names, check=check)
    wrong = {f"{w.label} {n}": why for w, a in zip(workers, answers, strict=True) for n, why in a["wrong"].items()}
    if wrong:
        lines = "\n".join(f"  {k}: {v}" for k, v in wrong.items())
        raise ABError(f"a kernel's result is wrong, so its time means nothing:\n{lines}")
    return answers


def _start(
    head_tree: Path, rev_tree: Path, names: list[str], pairs: int
) -> tuple[list[Pair], list[str], dict[str, str]]:
    """The worker pairs started and the cases built on every worker, checked on the first pair's:
    (pairs, the cases both sides have, the missing ones with why). The first pair builds alone, so a
    revision whose kernels are not in numba's on-disk cache yet compiles them once, not in every pair."""
    for tree in (head_tree, rev_tree):
        source_dirs(tree)  # both trees checked before any worker starts
    started: list[Pair] = []
    try:
        started.append((Side("HEAD", head_tree), Side("REV", rev_tree)))
        answers = _launch(list(started[0]), names, check=True)
        started += [(Side("HEAD", head_tree), Side("REV", rev_tree)) for _ in range(pairs - 1)]
        _launch([side for pair in started[1:] for side in pair], names, check=False)
    except BaseException:
        _close(started)
        raise
    missing = {
        n: f"{w.label}: {why}" for w, a in zip(started[0], answers, strict=True) for n, why in a["missing"].items()
    }
    return started, [n for n in names if n not in missing], missing


def _close(started: list[Pair]) -> None:
    for pair in started:
        for side in pair:
            side.close()


Times = dict[str, dict[str, list[float]]]  # case -> {"HEAD": per round, "REV": per round, "pair": per round}


def _round(pairs: list[Pair], cases: list[str], inner: dict[str, int], number: int, times: Times) -> None:
    """One round on one worker pair: each case timed by both sides back to back, which side goes first
    alternating by round and by case. Round ``number`` runs on pair ``number % len(pairs)``."""
    index = number % len(pairs)
    pair = pairs[index]
    for i, name in enumerate(cases):
        for side in pair if (number + i) % 2 == 0 else pair[::-1]:
            answer = side.ask("time", case=name, inner=inner[name], batches=BATCHES)
            ordered = sorted(answer["times"])
            times[name][side.label].append(ordered[len(ordered) // 2])  # the round's median batch
        times[name]["pair"].append(index)


def _estimate(t: dict[str, list[float]]) -> ab_stats.Estimate:
    return ab_stats.estimate(t["HEAD"], t["REV"], [int(p) for p in t["pair"]])


def run_ab(
    head_tree: Path,
    rev_tree: Path,
    names: list[str],
    rounds: int,
    threshold: float,
    max_rounds: int = MAX_ROUNDS,
    pairs: int = PAIRS,
) -> dict[str, Any]:
    """Time ``names`` at both trees and return the results (per case: times, estimate, flag)."""
    began = time.perf_counter()
    started, cases, missing = _start(head_tree, rev_tree, names, pairs)
    try:
        inner = {}
        for name in cases:  # the same number of calls per batch on both sides, from the faster one's call
            single = min(a["seconds"] for a in _both(list(started[0]), "calibrate", case=name))
            inner[name] = max(1, math.ceil(BATCH_S / max(single, 1e-7)))
        times: Times = {n: {"HEAD": [], "REV": [], "pair": []} for n in cases}

        for number in range(rounds):
            _round(started, cases, inner, number, times)
        done = rounds
        while done < max_rounds:  # more rounds only for the cases whose interval still straddles a bound
            undecided = [n for n in cases if _estimate(times[n]).undecided(threshold)]
            if not undecided:
                break
            for number in range(done, done + EXTRA_ROUNDS):
                _round(started, undecided, inner, number, times)
            done += EXTRA_ROUNDS
    finally:
        _close(started)
    results = {}
    for name in cases:
        est = _estimate(times[name])
        results[name] = {
            "head_s": _median(times[name]["HEAD"]),
            "rev_s": _median(times[name]["REV"]),
            "ratio": est.ratio,
            "low": est.low,
            "high": est.high,
            "rounds": est.rounds,
            "calls_per_batch": inner[name],
            "flag": est.flag(threshold),
            "times": times[name],
        }
    return {
        "threshold": threshold,
        "pairs": pairs,
        "cases": results,
        "missing": missing,
        "wall_s": time.perf_counter() - began,
    }


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def render(result: dict[str, Any], head_name: str, rev_name: str) -> list[str]:
    """The report: one row per case, then the missing cases and the verdict."""
    t = result["threshold"]
    lines = [
        f"A/B: HEAD = {head_name}, REV = {rev_name}; process CPU time per call, one thread (two for a -2t case), "
        f"{BATCHES} batches a round",
        f"flag: REGRESSED when the {ab_stats.LEVEL:.0%} interval's lower bound > {t:.2f}, "
        f"improved when its upper bound < {1 / t:.2f}; {result['pairs']} worker pairs",
        "",
        "| case | REV | HEAD | HEAD/REV | 95% interval | rounds | flag |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in result["cases"].items():
        lines.append(
            f"| {name} | {_us(r['rev_s'])} | {_us(r['head_s'])} | {r['ratio']:.3f} | "
            f"{r['low']:.3f} - {r['high']:.3f} | {r['rounds']} | {r['flag']} |"
        )
    for name, why in result["missing"].items():
        lines.append(f"| {name} | missing on {why} | | | | | not judged |")
    flagged = [n for n, r in result["cases"].items() if r["flag"] == "REGRESSED"]
    lines.append("")
    lines.append(f"REGRESSED: {', '.join(flagged)}" if flagged else "no case REGRESSED")
    lines.append(f"(A/B wall time {result['wall_s']:.0f} s)")
    return lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--against",
        nargs="?",
        metavar="REV",
        help="git revision for REV (default, also for a bare --against: merge base with main, HEAD~1 on main)",
    )
    which.add_argument(
        "--against-tree", type=Path, metavar="DIR", help="a packrt tree (packages/*/src) for REV instead of a revision"
    )
    parser.add_argument("--tree", type=Path, default=ROOT, help="the packrt tree for HEAD (default: this working tree)")
    parser.add_argument("--quick", action="store_true", help=f"the --quick kernel cases and {QUICK_ROUNDS} rounds")
    parser.add_argument("--cases", help="comma-separated kernel case names (kernel_cases.py) instead of all")
    parser.add_argument(
        "--rounds", type=int, help=f"rounds for every case (default {ROUNDS}, {QUICK_ROUNDS} with --quick)"
    )
    parser.add_argument("--max-rounds", type=int, default=MAX_ROUNDS, help="rounds at most for a case still undecided")
    parser.add_argument(
        "--pairs", type=int, default=PAIRS, help=f"HEAD/REV worker pairs the rounds rotate over (default {PAIRS})"
    )
    parser.add_argument("--threshold", type=float, default=THRESHOLD, help="HEAD/REV beyond which a case is flagged")
    parser.add_argument(
        "--changed-only",
        action="store_true",
        help="only the cases whose packages' sources differ between the two trees (none: nothing is timed)",
    )
    parser.add_argument(
        "--confirm",
        action="store_true",
        help="time the REGRESSED cases again on new workers; a case stays REGRESSED only when both runs say so",
    )
    parser.add_argument("--json", type=Path, help="also write the results (per-round times included) here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.pairs < 1:
        print(f"--pairs must be at least 1, got {args.pairs}", file=sys.stderr)
        return 2
    if args.threshold <= 1.0:
        print(f"--threshold must be above 1 (a ratio HEAD/REV), got {args.threshold}", file=sys.stderr)
        return 2
    head_tree = args.tree.resolve()
    try:
        cases = kernel_cases.select(args.cases.split(",") if args.cases else None, args.quick)
        if args.against_tree is not None:
            rev_tree, rev_name = args.against_tree.resolve(), str(args.against_tree)
        else:
            rev = args.against or default_against()
            sha, rev_tree = materialise(rev)
            rev_name = f"{rev} ({sha[:10]})"
        if args.changed_only:
            changed = changed_packages(head_tree, rev_tree)
            cases = touched(cases, changed)
            print(f"packages changed against {rev_name}: {', '.join(sorted(changed)) or 'none'}")
            if not cases:
                print("no case's code changed: nothing to time")
                return 0
        names = [c.name for c in cases]
        rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
        max_rounds = max(args.max_rounds, rounds)
        result = run_ab(head_tree, rev_tree, names, rounds, args.threshold, max_rounds, args.pairs)
        head_name = "working tree" if head_tree == ROOT else str(args.tree)
        print("\n".join(render(result, head_name, rev_name)))
        flagged = [n for n, r in result["cases"].items() if r["flag"] == "REGRESSED"]
        if args.confirm and flagged:
            print(f"\nconfirming on new workers: {', '.join(flagged)}")
            again = run_ab(head_tree, rev_tree, flagged, rounds, args.threshold, max_rounds, args.pairs)
            print("\n".join(render(again, head_name, rev_name)))
            for name, second in again["cases"].items():  # the verdict is the second run's: flagged twice
                result["cases"][name]["first_flag"] = result["cases"][name]["flag"]
                result["cases"][name]["flag"] = second["flag"]
            result["confirmation"] = again
    except (ABError, KeyError) as err:
        print(f"ab: {err}", file=sys.stderr)
        return 2
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    confirmed = [n for n, r in result["cases"].items() if r["flag"] == "REGRESSED"]
    if args.confirm and flagged:
        print(f"\nREGRESSED in both runs: {', '.join(confirmed)}" if confirmed else "\nno case REGRESSED twice")
    return 1 if confirmed else 0


if __name__ == "__main__":
    sys.exit(main())
