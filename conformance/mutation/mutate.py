"""Mutation testing of packrt against the conformance suite (``nox -s conformance_mutants``).

An AST mutator over packrt's implementation files: it reads them as text and syntax trees (it imports
nothing of packrt), lists every mutation site, draws a seeded sample, and runs the installed suite
against each mutant in a fresh subprocess with the mutated package first on ``PYTHONPATH``. A mutant
is *killed* when a suite run fails (revision 2, then revision 1), *survived* when both pass, and
*equivalent* when ``equivalent.toml`` (beside this file) records why no conforming behaviour changes.

Results go to a JSON file: every sampled mutant with its outcome, the survivors, and the kill rate
of the non-equivalent mutants run. Mutant IDs are stable: a hash of the file, the enclosing function,
the operator, the original source of the node and its occurrence there (not of line numbers).

    python conformance/mutation/mutate.py --root . --sample 300 --seed 14 --budget-s 1200 --out reports/mutants.json
"""

from __future__ import annotations

import argparse
import ast
import copy
import datetime as _dt
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
EQUIVALENT = HERE / "equivalent.toml"

#: (source root under the repository, import package, file inside the package) of every mutated file.
TARGETS: tuple[tuple[str, str, str], ...] = (
    ("packages/packrt-core/src", "packrt_core", "nn/module.py"),
    ("packages/packrt-core/src", "packrt_core", "nn/state.py"),
    ("packages/packrt-core/src", "packrt_core", "nn/moves.py"),
    ("packages/packrt-core/src", "packrt_core", "nn/residency.py"),
    ("packages/packrt-core/src", "packrt_core", "nn/packed.py"),
    ("packages/packrt-core/src", "packrt_core", "nn/linear.py"),
    ("packages/packrt-core/src", "packrt_core", "publication.py"),
    ("packages/packrt-hooks/src", "packrt_hooks", "registry.py"),
    ("packages/packrt-hooks/src", "packrt_hooks", "call.py"),
)

_SWAP_COMPARE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_SWAP_BINOP: dict[type[ast.operator], type[ast.operator]] = {ast.Add: ast.Sub, ast.Sub: ast.Add}
#: Functions whose body only builds text or copies (reprs, messages, pickling): not contract behaviour.
_SKIP_FUNCTIONS = {"__repr__", "__getstate__", "__setstate__", "__deepcopy__", "__copy__", "describe_hook", "__dir__"}


@dataclass(frozen=True)
class Site:
    """One mutation: the ``index``-th candidate node of ``file`` and what it becomes."""

    id: str
    file: str
    line: int
    function: str
    operator: str
    original: str
    mutated: str
    index: int


def _unparse(node: ast.AST) -> str:
    return " ".join(ast.unparse(node).split())


def _skip_ranges(tree: ast.Module) -> set[int]:
    """ids of nodes the mutator leaves alone: docstrings, raise statements (messages), f-strings,
    ``__all__``, TYPE_CHECKING blocks and the text-only functions."""
    skip: set[int] = set()

    def drop(node: ast.AST) -> None:
        skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            drop(first)
        if isinstance(node, ast.Raise | ast.JoinedStr):
            drop(node)
        if isinstance(node, ast.FunctionDef) and node.name in _SKIP_FUNCTIONS:
            drop(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in _unparse(node.test):
            drop(node)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            drop(node)
    return skip


def _candidates(tree: ast.Module) -> Iterator[tuple[ast.AST, str, str, str]]:
    """(node, enclosing function, operator, mutated source) for every site, in a fixed order."""
    skip = _skip_ranges(tree)
    stack: list[tuple[ast.AST, str]] = [(tree, "<module>")]
    while stack:
        node, func = stack.pop(0)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            func = node.name if func == "<module>" else f"{func}.{node.name}"
        stack.extend((child, func) for child in ast.iter_child_nodes(node))
        if id(node) in skip:
            continue
        yield from ((node, func, op, src) for op, src in _mutations(node))


def _mutations(node: ast.AST) -> Iterator[tuple[str, str]]:
    """(operator name, mutated source of the node) for each way the node can be mutated (the node
    types the two families below take are disjoint: a node is mutated one way at most)."""
    yield from _operator_mutations(node)
    yield from _statement_and_constant_mutations(node)


def _operator_mutations(node: ast.AST) -> Iterator[tuple[str, str]]:
    """A comparison, boolean or arithmetic operator swapped, a ``not`` or a ``reversed`` dropped."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _SWAP_COMPARE:
        new = copy.deepcopy(node)
        new.ops = [_SWAP_COMPARE[type(node.ops[0])]()]
        yield "compare", _unparse(new)
    elif isinstance(node, ast.BoolOp):
        new_b = copy.deepcopy(node)
        new_b.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield "boolop", _unparse(new_b)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "drop-not", _unparse(node.operand)
    elif isinstance(node, ast.BinOp) and type(node.op) in _SWAP_BINOP:
        new_o = copy.deepcopy(node)
        new_o.op = _SWAP_BINOP[type(node.op)]()
        yield "binop", _unparse(new_o)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "reversed" and node.args:
        yield "drop-reversed", _unparse(node.args[0])


def _statement_and_constant_mutations(node: ast.AST) -> Iterator[tuple[str, str]]:
    """A boolean or integer constant changed, a return value replaced by None, a call statement or an
    augmented assignment dropped."""
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield "bool-constant", repr(not node.value)
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield "int-constant", repr(node.value + 1)
    elif isinstance(node, ast.Return) and node.value is not None and _unparse(node.value) != "None":
        yield "return-none", "return None"
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        yield "drop-call", "pass"
    elif isinstance(node, ast.AugAssign):
        yield "drop-augassign", "pass"


def list_sites(root: Path) -> list[Site]:
    """Every mutation site of the target files, each with its stable ID."""
    sites: list[Site] = []
    for src, package, rel in TARGETS:
        path = root / src / package / rel
        tree = ast.parse(path.read_text(encoding="utf-8"))
        seen: dict[str, int] = {}
        for index, (node, func, op, mutated) in enumerate(_candidates(tree)):
            original = _unparse(node)
            key = f"{package}/{rel}:{func}:{op}:{original}->{mutated}"
            seen[key] = seen.get(key, 0) + 1
            digest = hashlib.sha1(f"{key}#{seen[key]}".encode()).hexdigest()[:12]
            line = getattr(node, "lineno", 0)
            sites.append(Site(digest, f"{package}/{rel}", line, func, op, original, mutated, index))
    return sites


def mutated_source(root: Path, site: Site) -> str:
    """The source of ``site.file`` with that one mutation applied."""
    package, _, rel = site.file.partition("/")
    src = next(s for s, p, r in TARGETS if p == package and r == rel)
    tree = ast.parse((root / src / site.file).read_text(encoding="utf-8"))
    target, _, op, new_src = list(_candidates(tree))[site.index]
    if new_src == "pass":
        replacement: ast.AST = ast.Pass()
    elif op == "return-none":
        replacement = ast.Return(value=ast.Constant(None))
    else:
        replacement = ast.parse(new_src, mode="eval").body
    ast.copy_location(replacement, target)

    class Swap(ast.NodeTransformer):
        def generic_visit(self, node: ast.AST) -> ast.AST:
            if node is target:
                return replacement
            return super().generic_visit(node)

    return ast.unparse(ast.fix_missing_locations(Swap().visit(tree)))


def load_equivalent(path: Path = EQUIVALENT, table: str = "mutant") -> dict[str, str]:
    """Mutant ID -> why the mutant changes no behaviour the contract (or the suite) can see; with
    ``table="device_only"``, the real faults only a run on a second device (a GPU) can show, and
    which clauses kill them there. Those stay counted as survivors on a CPU-only run."""
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return {str(m["id"]): str(m["reason"]) for m in data.get(table, [])}


def _suite(env: dict[str, str], cwd: Path, revision: int, timeout: float) -> int:
    cmd = [sys.executable, "-m", "packrt_conformance.cli", "--impl", "packrt", "--revision", str(revision)]
    cmd += ["-x", "-q", "--max-examples", "10", "-p", "no:randomly"]
    try:
        done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return -1
    return done.returncode


def run_mutant(root: Path, site: Site, timeout: float) -> tuple[str, float]:
    """Run the suite against one mutant in a scratch copy of its package; (outcome, seconds)."""
    start = time.monotonic()
    package, _, rel = site.file.partition("/")
    src = next(s for s, p, r in TARGETS if p == package and r == rel)
    with tempfile.TemporaryDirectory(prefix=f"mutant-{site.id}-") as tmp:
        work = Path(tmp)
        shutil.copytree(root / src / package, work / package, ignore=shutil.ignore_patterns("__pycache__"))
        (work / package / rel).write_text(mutated_source(root, site), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(work), os.environ.get("PYTHONPATH")]))}
        env.pop("PYTEST_ADDOPTS", None)
        outcome = "survived"
        for revision in (2, 1):
            code = _suite(env, work, revision, timeout)
            if code != 0:
                outcome = "timeout" if code == -1 else "killed"
                break
    return outcome, round(time.monotonic() - start, 2)


def _preflight(root: Path) -> None:
    """The unmutated packrt passes both revisions, and a package on PYTHONPATH shadows the installed one."""
    for revision in (2, 1):
        if _suite(dict(os.environ), root, revision, 600) != 0:
            raise SystemExit(f"the suite fails unmutated packrt (revision {revision}): fix that first")
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(root / TARGETS[0][0] / "packrt_core", Path(tmp) / "packrt_core")
        env = {**os.environ, "PYTHONPATH": tmp}
        probe = [sys.executable, "-c", "import packrt_core; print(packrt_core.__file__)"]
        where = subprocess.check_output(probe, env=env, text=True).strip()
        if not where.startswith(tmp):
            raise SystemExit(f"a package on PYTHONPATH does not shadow the installed packrt_core ({where})")


def stale_ids(sites: list[Site], path: Path = EQUIVALENT) -> list[str]:
    """IDs ``equivalent.toml`` records (any table) that name no current site: the code under them
    changed or moved, so the record no longer classifies anything and should be re-read or removed."""
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    current = {s.id for s in sites}
    recorded = [str(m["id"]) for table in data.values() if isinstance(table, list) for m in table]
    return sorted({mid for mid in recorded if mid not in current})


def draw_seed(given: int | None) -> int:
    """``given``, or a fresh seed: each run samples anew unless asked, so nobody tunes the suite to
    one sample (the seed is printed and recorded, so any sample can be rerun)."""
    return given if given is not None else random.SystemRandom().randrange(1, 2**31)


def kill_rates(entries: list[dict[str, Any]]) -> tuple[float, int, float, int]:
    """(rate, count) over every non-equivalent mutant run, and over the contract-relevant ones: those
    less the survivors ``equivalent.toml``'s ``[[outside_contract]]`` table records (a change no page
    describes: packrt's own API, diagnostics, messages). Killed and timed-out mutants count as killed;
    equivalent and not-run ones count in neither."""
    killed = sum(1 for e in entries if e["outcome"] in ("killed", "timeout"))
    survived = [e for e in entries if e["outcome"] == "survived"]
    outside = sum(1 for e in survived if str(e.get("classified", "")).startswith("outside the contract"))
    decided = killed + len(survived)
    relevant = decided - outside
    return (killed / decided if decided else 1.0), decided, (killed / relevant if relevant else 1.0), relevant


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=HERE.parents[1], help="the repository root")
    parser.add_argument("--sample", type=int, default=300, help="mutants drawn per run")
    parser.add_argument("--seed", type=int, default=None, help="sample seed (default: a fresh one each run, printed)")
    parser.add_argument("--budget-s", type=float, default=1200.0, help="stop starting mutants after this long")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="one suite run longer than this is killed")
    parser.add_argument("--jobs", type=int, default=max(1, os.cpu_count() or 1))
    parser.add_argument("--ids", nargs="*", default=None, help="run exactly these mutant IDs (no sampling)")
    parser.add_argument("--list", action="store_true", help="list the sites and exit")
    parser.add_argument("--out", type=Path, required=False)
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    sites = list_sites(root)
    if args.list:
        for s in sites:
            print(f"{s.id} {s.file}:{s.line} {s.function} {s.operator}: {s.original} -> {s.mutated}")
        return 0
    today = _dt.date.today()
    seed: int | None = None if args.ids else draw_seed(args.seed)
    stale = stale_ids(sites)
    if stale:
        print(f"equivalent.toml records {len(stale)} IDs no site has any more (re-read or remove them):", *stale)
    if not args.ids:
        print(f"seed {seed}: {min(args.sample, len(sites))} of {len(sites)} sites (rerun this sample: --seed {seed})")
    if args.ids:
        chosen = [s for s in sites if s.id in set(args.ids)]
    else:
        chosen = random.Random(seed).sample(sites, min(args.sample, len(sites)))
    equivalent = load_equivalent()
    device_only = load_equivalent(table="device_only")
    outside = load_equivalent(table="outside_contract")
    _preflight(root)
    deadline = time.monotonic() + args.budget_s
    results: dict[str, dict[str, Any]] = {}

    def one(site: Site) -> None:
        entry: dict[str, Any] = asdict(site)
        if site.id in equivalent:
            entry.update(outcome="equivalent", reason=equivalent[site.id])
        elif time.monotonic() > deadline:
            entry.update(outcome="not-run", reason="the run's time budget was spent")
        else:
            outcome, seconds = run_mutant(root, site, args.timeout_s)
            entry.update(outcome=outcome, seconds=seconds)
            if outcome == "survived" and site.id in device_only:
                entry["classified"] = f"device only: {device_only[site.id]}"
            elif outcome == "survived" and site.id in outside:
                entry["classified"] = f"outside the contract: {outside[site.id]}"
        results[site.id] = entry
        print(f"{entry['outcome']:>10} {site.id} {site.file}:{site.line} {site.operator}: {site.original!r:.60}")

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, chosen))
    ordered = [results[s.id] for s in chosen]
    counts: dict[str, int] = {}
    for entry in ordered:
        counts[entry["outcome"]] = counts.get(entry["outcome"], 0) + 1
    rate, decided, contract_rate, relevant = kill_rates(ordered)
    report = {
        "format": "packrt-conformance-mutants",
        "format_version": 1,
        "date": today.isoformat(),
        "seed": seed,
        "sites": len(sites),
        "sample": len(chosen),
        "budget_s": args.budget_s,
        "files": [f"{p}/{r}" for _, p, r in TARGETS],
        "counts": counts,
        "kill_rate_non_equivalent": round(rate, 4),
        "kill_rate_contract_relevant": round(contract_rate, 4),
        "contract_relevant": relevant,
        "survivors": [e for e in ordered if e["outcome"] == "survived"],
        "unclassified_survivors": [e["id"] for e in ordered if e["outcome"] == "survived" and "classified" not in e],
        "stale_classifications": stale,
        "mutants": ordered,
    }
    out: Path = args.out or root / "reports" / f"conformance-mutants-{today.isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    unclassified = len(report["unclassified_survivors"])
    print(f"{f'seed {seed}' if seed is not None else f'{len(chosen)} chosen IDs'}; {counts}; report {out}")
    print(f"kill rate: {rate:.1%} of {decided} non-equivalent mutants, ", end="")
    print(f"{contract_rate:.1%} of {relevant} contract-relevant")
    print(f"{unclassified} survivors not reviewed yet: kill each with a test or record it in equivalent.toml")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
