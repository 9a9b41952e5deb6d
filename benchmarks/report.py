"""Turn a pytest-benchmark JSON into the ratio table: packrt's time over numpy's and torch's, per case.

    python benchmarks/report.py RESULTS.json [--baseline BASELINE.json | --no-baseline] [--markdown OUT.md]

A case is a pytest-benchmark group; each benchmark in it carries ``extra_info["impl"]``
(``packrt`` or a ``packrt-*`` variant, ``numpy``, ``torch``). For every packrt variant in a
case the table gives its time and ``packrt / reference`` for each reference measured in the
same run (below 1 means packrt is faster). ``--stat`` picks the rounds' min (default) or
median. Comparing runs compares ratios, never absolute times, so a baseline from another
machine still says whether packrt moved relative to its references. A second table lists the
memory each weight form keeps (``extra_info["memory"]``, measured with tracemalloc). Nothing
here fails on a number: the report informs, it does not gate.

Without ``--baseline`` the newest JSON in ``benchmarks/baselines/`` is the baseline.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

BASELINES = Path(__file__).parent / "baselines"
REFERENCES = ("numpy", "torch")

Ratios = dict[tuple[str, str], dict[str, float]]  # (case, packrt impl) -> {reference: ratio}


def load(path: Path) -> dict[str, Any]:
    """A pytest-benchmark JSON, or SystemExit naming the file and what is wrong with it."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SystemExit(f"cannot read benchmark results {path}: {err}") from err
    if not isinstance(data, dict) or "benchmarks" not in data:
        raise SystemExit(f"{path} is not pytest-benchmark output (no 'benchmarks' key); write it with --benchmark-json")
    return data


def medians(data: dict[str, Any], stat: str = "min") -> dict[str, dict[str, float]]:
    """case -> impl -> seconds (``stat`` of the rounds), for every benchmark that recorded its impl."""
    cases: dict[str, dict[str, float]] = defaultdict(dict)
    for bench in data["benchmarks"]:
        extra = bench.get("extra_info", {})
        if "impl" in extra:
            cases[extra.get("case") or bench["group"]][extra["impl"]] = float(bench["stats"][stat])
    return cases


def ratios(cases: dict[str, dict[str, float]]) -> Ratios:
    """(case, packrt impl) -> reference -> packrt time / reference time."""
    out: Ratios = {}
    for case, impls in cases.items():
        for impl, seconds in impls.items():
            if impl.startswith("packrt"):
                out[case, impl] = {ref: seconds / impls[ref] for ref in REFERENCES if ref in impls}
    return out


def _time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _bytes(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def machine_lines(data: dict[str, Any]) -> list[str]:
    """The facts a reader needs to trust the ratios: when, cores, BLAS kernel, torch threads."""
    info = data.get("machine_info", {})
    lines = [
        f"- run: {data.get('datetime', '?')}",
        f"- cpu: {info.get('cpu', {}).get('brand_raw', info.get('processor', '?'))}, "
        f"{info.get('cpu_count', '?')} cores, benchmarks ran with {info.get('bench_threads', '?')} threads",
        f"- numpy {info.get('numpy', '?')}, BLAS: {info.get('blas', '?')}",
        f"- torch {info.get('torch', 'not installed')} ({info.get('torch_cpu_capability', '?')})",
    ]
    overrides = info.get("openblas_overrides") or {}
    if overrides:
        pairs = " ".join(f"{k}={v}" for k, v in overrides.items())
        lines.append(f"- WARNING: {pairs} was set; numpy/packrt ran an older OpenBLAS kernel")
    return lines


def ratio_table(data: dict[str, Any], baseline: dict[str, Any] | None, stat: str = "min") -> list[str]:
    """Markdown rows: one per (case, packrt variant), its ratios, and the baseline's where it has the case."""
    cases = medians(data, stat)
    now = ratios(cases)
    before = ratios(medians(baseline, stat)) if baseline else {}
    targets = {
        b["extra_info"].get("case") or b["group"]: b["extra_info"]["target_ratio_vs_torch"]
        for b in data["benchmarks"]
        if "target_ratio_vs_torch" in b.get("extra_info", {})
    }
    head = f"| case | packrt | {stat} | / numpy | / torch |"
    rule = "| --- | --- | ---: | ---: | ---: |"
    if baseline:
        head += " baseline / numpy | baseline / torch |"
        rule += " ---: | ---: |"
    rows = [head, rule]
    for case, impl in sorted(now):
        r = now[case, impl]
        cells = [case, impl, _time(cases[case][impl])]
        for ref in REFERENCES:
            cell = f"{r[ref]:.2f}" if ref in r else "-"
            if ref == "torch" and case in targets and ref in r:
                cell += f" (target <= {targets[case]})"
            cells.append(cell)
        if baseline:
            old = before.get((case, impl), {})
            cells += [f"{old[ref]:.2f}" if ref in old else "-" for ref in REFERENCES]
        rows.append("| " + " | ".join(cells) + " |")
    plain = [v for (_, impl), r in now.items() if impl == "packrt" for v in r.items()]
    for ref in REFERENCES:
        values = [v for k, v in plain if k == ref]
        if values:
            rows.append(
                f"\nGeometric mean of plain `packrt` / {ref} over {len(values)} cases: **{_geomean(values):.2f}**"
            )
    return rows


def memory_table(data: dict[str, Any]) -> list[str]:
    """Markdown rows for every benchmark that recorded ``extra_info["memory"]``."""
    rows = [
        "| case | declared weight | kept resident | kept / declared | forward peak (beyond output) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    found = False
    for bench in sorted(data["benchmarks"], key=lambda b: b["group"] or ""):
        mem = bench.get("extra_info", {}).get("memory")
        if not mem:
            continue
        found = True
        declared, kept = int(mem["weight_bytes"]), int(mem["kept_bytes"])
        rows.append(
            f"| {bench['extra_info'].get('case', bench['group'])} | {_bytes(declared)} | {_bytes(kept)} "
            f"| {kept / declared:.2f}x | {_bytes(int(mem['peak_bytes']))} |"
        )
    return rows if found else []


def render(data: dict[str, Any], baseline: dict[str, Any] | None, baseline_name: str | None, stat: str = "min") -> str:
    """The whole report as markdown."""
    parts = ["## Machine", "", *machine_lines(data), "", f"## Ratios (packrt {stat} / reference {stat})", ""]
    parts.append("Below 1.00 packrt is faster than the reference; each ratio comes from one run.")
    if baseline_name:
        parts.append(f"Baseline columns: the same ratios from `{baseline_name}`.")
    if baseline:
        ran, then = (d.get("machine_info", {}).get("bench_threads") for d in (data, baseline))
        if ran != then:
            parts.append(f"WARNING: this run used {ran} threads, the baseline {then}; ratios may not compare.")
    parts += ["", *ratio_table(data, baseline, stat)]
    mem = memory_table(data)
    if mem:
        parts += ["", "## Memory (tracemalloc)", "", *mem]
    return "\n".join(parts) + "\n"


def save_baseline(data: dict[str, Any], path: Path) -> None:
    """Store a run as a baseline without each round's raw timings (the statistics are what compare)."""
    slim = dict(
        data,
        benchmarks=[dict(b, stats={k: v for k, v in b["stats"].items() if k != "data"}) for b in data["benchmarks"]],
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(slim, indent=1, sort_keys=True) + "\n")


def newest_baseline() -> Path | None:
    found = sorted(BASELINES.glob("*.json"))
    return found[-1] if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="pytest-benchmark JSON (--benchmark-json)")
    parser.add_argument("--baseline", type=Path, help="a stored run to compare ratios with")
    parser.add_argument("--no-baseline", action="store_true", help="print this run's ratios only")
    parser.add_argument("--markdown", type=Path, help="also write the report to this file")
    parser.add_argument(
        "--save-baseline", type=Path, help="also store this run (minus raw round timings) as a baseline"
    )
    parser.add_argument(
        "--stat",
        choices=("min", "median"),
        default="min",
        help="which per-benchmark time to divide (default min: on a shared machine other work only "
        "ever adds time, so the fastest round is the steadiest estimate)",
    )
    args = parser.parse_args(argv)
    data = load(args.results)
    base_path = None if args.no_baseline else (args.baseline or newest_baseline())
    if base_path is not None and base_path.resolve() == args.results.resolve():
        base_path = None
    baseline = load(base_path) if base_path else None
    text = render(data, baseline, base_path.name if base_path else None, args.stat)
    sys.stdout.write(text)
    if args.save_baseline:
        save_baseline(data, args.save_baseline)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
