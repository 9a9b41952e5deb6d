"""A scratch copy of this tree's package sources with a known slowdown seeded into chosen functions: what
the A/B gate's own test (test_ab.py) runs it against, and a way to see what the gate catches.

    python benchmarks/ab_seed.py /tmp/seeded packrt_kernels_cpu.fused:gelu [--factor 0.3]
    python benchmarks/ab_seed.py /tmp/seeded packrt_kernels_cpu.float_tiles:gemm --when "args[0].shape[0] % 8 == 1"
    python benchmarks/ab_seed.py /tmp/seeded packrt.models.decoder_blocks:DecoderLayer.forward
    python benchmarks/ab.py --against-tree . --tree /tmp/seeded

Each seeded function (``module:function``) or method (``module:Class.method``) is wrapped, at the end of
its module's source, in a busy-wait of ``factor`` times the CPU time the call itself took on this thread
(so time the machine gives to other work is not counted): a ``factor`` of 0.3 makes that function 30%
slower, whatever the machine. ``--when`` limits the slowdown to the calls for which a Python expression
over the call's ``args`` and ``kwargs`` holds (one row class of a GEMM, say). Callers that look the
function up in its module at call time (``fused.gelu(...)``) get the slow one; code that bound it
earlier does not, exactly as with a real edit of the function. A method is replaced on its class, so
every instance, made before or after, gets it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def wrapper_source(function: str, factor: float, when: str = "True") -> str:
    """Source appended to a module: ``function`` (a name, or ``Class.method``) rebound to a copy that
    busy-waits ``factor`` x its CPU time on the calls where ``when`` holds."""
    tag = function.replace(".", "_")
    return f"""

# Seeded by benchmarks/ab_seed.py: {function} made {factor:.0%} slower where {when}, a busy-wait of
# {factor}x the CPU time of the call itself on this thread.
import time as _seed_time

_seed_{tag} = {function}


def _seeded_{tag}(*args, **kwargs):
    if not ({when}):  # asked first: a call left alone pays one test, not the clock reads
        return _seed_{tag}(*args, **kwargs)
    start = _seed_time.thread_time()
    out = _seed_{tag}(*args, **kwargs)
    until = _seed_time.thread_time() + {factor} * (_seed_time.thread_time() - start)
    while _seed_time.thread_time() < until:
        pass
    return out


{function} = _seeded_{tag}
"""


def module_file(tree: Path, module: str) -> Path:
    """The source file of ``module`` (dotted, e.g. ``packrt_kernels_cpu.fused``) among ``tree``'s packages."""
    relative = Path(*module.split(".")).with_suffix(".py")
    found = [src / relative for src in tree.glob("packages/*/src") if (src / relative).is_file()]
    if len(found) != 1:
        raise ValueError(f"module {module} is not one file under {tree}/packages/*/src (found {len(found)})")
    return found[0]


def scratch_tree(where: Path, seeds: list[str], factor: float = 0.3, source: Path = ROOT, when: str = "True") -> Path:
    """Copy ``source``'s ``packages/*/src`` to ``where`` and seed each ``module:function`` (or
    ``module:Class.method``) of ``seeds``, on the calls where ``when`` holds."""
    try:
        compile(when, "--when", "eval")
    except SyntaxError as err:
        raise ValueError(f"--when {when!r} is not a Python expression over args and kwargs: {err.msg}") from err
    for src in source.glob("packages/*/src"):
        shutil.copytree(src, where / "packages" / src.parent.name / "src", ignore=shutil.ignore_patterns("__pycache__"))
    for seed in seeds:
        module, _, function = seed.partition(":")
        path = module_file(where, module)
        text = path.read_text()
        owner, _, method = function.rpartition(".")
        names = [owner, method] if owner else [method]
        if not all(name.isidentifier() for name in names) or f"def {method}(" not in text:
            raise ValueError(f"{seed}: {path} defines no function {function!r} to seed")
        if owner and f"class {owner}(" not in text and f"class {owner}:" not in text:
            raise ValueError(f"{seed}: {path} defines no class {owner!r} to seed a method of")
        path.write_text(text + wrapper_source(function, factor, when))
    return where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("where", type=Path, help="an empty or new folder for the scratch copy")
    parser.add_argument("seeds", nargs="*", help="module:function to slow down, e.g. packrt_kernels_cpu.fused:gelu")
    parser.add_argument("--factor", type=float, default=0.3, help="the slowdown (0.3: 30%% slower)")
    parser.add_argument("--when", default="True", help="only the calls where this expression over args, kwargs holds")
    args = parser.parse_args(argv)
    if args.where.exists() and any(args.where.iterdir()):
        print(f"{args.where} is not empty: give a new folder for the scratch copy", file=sys.stderr)
        return 2
    try:
        scratch_tree(args.where, args.seeds, args.factor, when=args.when)
    except ValueError as err:
        print(f"ab_seed: {err}", file=sys.stderr)
        return 2
    where = "" if args.when == "True" else f" where {args.when}"
    print(f"{args.where}: {', '.join(args.seeds) or 'nothing'} seeded {args.factor:.0%} slower{where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
