"""Turn a pytest-benchmark JSON into the ratio table: packrt's time over numpy's and torch's, per case.

    python benchmarks/report.py RESULTS.json [--baseline BASELINE.json | --no-baseline] [--markdown OUT.md]
        [--plot OUT.png] [--compare] [--save-baseline PATH]
    python benchmarks/report.py RUN1.json RUN2.json RUN3.json ... --write-margins benchmarks/margins.json

A case is a pytest-benchmark group; each benchmark in it carries ``extra_info["impl"]``
(``packrt`` or a ``packrt-*`` variant, ``numpy``, ``torch``). For every packrt variant in a
case the table gives its time and ``packrt / reference`` for each reference measured in the
same run (below 1 means packrt is faster). ``--stat`` picks the rounds' min (default) or
median. Comparing runs compares ratios, never absolute times, so a baseline from another
machine still says whether packrt moved relative to its references. A second table lists the
memory each weight form keeps (``extra_info["memory"]``, measured with tracemalloc).

The report opens with a summary of the *tracked* ratios (every whole-model case and a chosen set
of kernel cases, listed in ``margins.json``): this run's ratio, the baseline's, their change
(now / baseline, above 1 is worse) and a flag. ``--compare`` turns it into a gate: the exit
status is 1 when any tracked ratio worsened by more than its margin. The margins are data,
derived from repeated runs of the unchanged tree with ``--write-margins`` (see ``derive_margins``).

Without ``--baseline`` the newest run in ``benchmarks/baselines/`` (by its recorded time) made on the
same kind of CPU (vendor, family, model, the vector extensions the kernels use: :func:`cpu_kind`) is the
baseline. A ratio against torch or a peer is a property of the CPU as much as of packrt (oneMKL and
OpenBLAS rank differently on AMD and Intel), so ``--compare`` never sets runs from two kinds of CPU
against each other: it says so and skips the gate.
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
MARGINS = Path(__file__).parent / "margins.json"
REFERENCES = ("numpy", "torch")
# The peer engines of the "peer-*" cases (benchmarks/peers.py), by precision: packrt (fp32) is divided by
# the faster fp32 peer, packrt-int8 by the faster int8 peer; that ratio is tracked as reference "best-peer".
PEERS_BY_PRECISION = {"packrt": ("ort-fp32", "ct2-fp32"), "packrt-int8": ("ort-int8", "ct2-int8")}
PEERS = tuple(peer for group in PEERS_BY_PRECISION.values() for peer in group)
BEST_PEER = "best-peer"
# Kernel cases tracked next to every whole-model case ("model-*", packrt / torch): one per kind of
# kernel, each against the reference it is meant to match, all fp32 (half precision adds ml_dtypes noise).
_KERNEL_AGAINST: dict[str, tuple[str, str]] = {  # case -> (implementation, reference)
    "matmul-fp32-512": ("packrt", "numpy"),
    "linear-fp32-1x1024->1024": ("packrt", "torch"),
    "linear-fp32-32x1024->1024": ("packrt", "torch"),
    "linear-fp32-64x1024->1024": ("packrt", "torch"),
    "conv2d-3x3-fp32-8x32x32x32->64": ("packrt-packed", "torch"),
    "sdpa-full-fp32-4x8x128x64": ("packrt", "torch"),
    "elementwise-add-fp32-512x1024+1024": ("packrt", "numpy"),
    "reduce-sum-fp32-1024x1024": ("packrt", "numpy"),
    "module-call-overhead": ("packrt", "torch"),
    "nn-linear-packed-fp32-8x1024->1024": ("packrt", "torch"),
}
KERNEL_TRACKED: tuple[tuple[str, str, str], ...] = tuple((case, *against) for case, against in _KERNEL_AGAINST.items())
# Margin = clamp(NOISE_FACTOR * spread + MARGIN_FLOOR, MIN_MARGIN, MAX_MARGIN), spread = max/min - 1 of
# the case's ratio over repeated runs. A comparison sets one run against another, so its change can
# reach the whole spread; doubling it covers the spread the few runs did not happen to show. The
# cap keeps a 1.5x regression a failure on every tracked case, however noisy.
NOISE_FACTOR, MARGIN_FLOOR, MIN_MARGIN, MAX_MARGIN = 2.0, 0.05, 0.10, 0.45

Tracked = tuple[str, str, str]  # (case, packrt impl, reference)

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
        if "impl" in extra and "missing" not in extra:  # a missing engine has a reason, not a time
            cases[extra.get("case") or bench["group"]][extra["impl"]] = float(bench["stats"][stat])
    return cases


def best_peer(impls: dict[str, float], impl: str) -> str | None:
    """The fastest peer of ``impl``'s precision that ran in this case (None when none did)."""
    ran = [peer for peer in PEERS_BY_PRECISION.get(impl, ()) if peer in impls]
    return min(ran, key=lambda peer: impls[peer]) if ran else None


def ratios(cases: dict[str, dict[str, float]]) -> Ratios:
    """(case, packrt impl) -> reference -> packrt time / reference time. References: numpy, torch, each
    peer engine that ran, and ``best-peer`` (the fastest peer of the packrt variant's precision)."""
    out: Ratios = {}
    for case, impls in cases.items():
        for impl, seconds in impls.items():
            if impl.startswith("packrt"):
                refs = REFERENCES + PEERS
                out[case, impl] = {ref: seconds / impls[ref] for ref in refs if ref in impls}
                best = best_peer(impls, impl)
                if best is not None:
                    out[case, impl][BEST_PEER] = seconds / impls[best]
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
        f"- packrt's GEMMs: {info.get('packrt_gemm', 'numpy (not recorded)')}",
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
    targets = _targets(data)
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


def _engine_rows(data: dict[str, Any], case: str) -> list[dict[str, Any]]:
    return [b for b in data["benchmarks"] if (b.get("extra_info", {}).get("case") or b.get("group")) == case]


def peers_table(data: dict[str, Any], stat: str = "min") -> list[str]:
    """Per peer case: every engine's time (tokens/s for a decode), its max abs diff to transformers (or how
    many greedy tokens agree), packrt over it; engines that did not run, with the reason; then packrt /
    torch and packrt / best peer of each precision."""
    cases = medians(data, stat)
    names = sorted(
        {c for c in cases if c.startswith("peer-")}
        | {
            b["extra_info"]["case"]
            for b in data["benchmarks"]
            if str(b.get("extra_info", {}).get("case", "")).startswith("peer-")
        }
    )
    if not names:
        return []
    rows = [
        "| case | engine | "
        + stat
        + " | tokens/s | max abs diff / tokens agreeing | packrt / engine | packrt-int8 / engine |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    summary = [
        "",
        "| case | packrt / torch | packrt / best fp32 peer | packrt-int8 / best int8 peer |",
        "| --- | ---: | --- | --- |",
    ]
    for case in names:
        impls = cases.get(case, {})
        for bench in sorted(_engine_rows(data, case), key=lambda b: b["extra_info"]["impl"]):
            extra = bench["extra_info"]
            impl = extra["impl"]
            if "missing" in extra:
                rows.append(f"| {case} | {impl} | missing: {extra['missing']} | | | | |")
                continue
            seconds = impls[impl]
            tokens = extra.get("tokens")
            rate = f"{tokens / seconds:.1f}" if tokens else "-"
            if "tokens_agreeing" in extra:
                check = f"{extra['tokens_agreeing']}/{tokens}"
            else:
                check = f"{extra['max_abs_diff']:.2g}" if "max_abs_diff" in extra else "(reference)"
            over = [
                f"{impls[packrt] / seconds:.2f}" if packrt in impls and packrt != impl else "-"
                for packrt in ("packrt", "packrt-int8")
            ]
            rows.append(f"| {case} | {impl} | {_time(seconds)} | {rate} | {check} | {over[0]} | {over[1]} |")
        cells = []
        for impl in ("packrt", "packrt-int8"):
            best = best_peer(impls, impl)
            cells.append(f"{impls[impl] / impls[best]:.2f} ({best})" if impl in impls and best else "-")
        torch_ratio = f"{impls['packrt'] / impls['torch']:.2f}" if {"packrt", "torch"} <= impls.keys() else "-"
        summary.append(f"| {case} | {torch_ratio} | {cells[0]} | {cells[1]} |")
    return rows + summary


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


def flops_table(data: dict[str, Any], stat: str = "min") -> list[str]:
    """Achieved GFLOP/s of every benchmark that recorded ``extra_info["flops"]``, with its CPU/wall ratio.

    A one-thread row above the machine's one-core peak, or with CPU/wall near 2, ran on more than one core.
    """
    rows = ["| case | impl | threads | GFLOP/s | CPU / wall |", "| --- | --- | ---: | ---: | ---: |"]
    found = [b for b in data["benchmarks"] if b.get("extra_info", {}).get("flops")]
    for bench in sorted(found, key=lambda b: (b["extra_info"].get("case", ""), b["extra_info"].get("impl", ""))):
        extra = bench["extra_info"]
        gflops = float(extra["flops"]) / float(bench["stats"][stat]) / 1e9
        cpu = extra.get("cpu_per_wall")
        rows.append(
            f"| {extra.get('case', bench['group'])} | {extra.get('impl', '?')} | {extra.get('threads', '?')} "
            f"| {gflops:.1f} | {'-' if cpu is None else f'{cpu:.2f}'} |"
        )
    return rows if found else []


def _targets(data: dict[str, Any], key: str = "target_ratio_vs_torch") -> dict[str, float]:
    return {
        b["extra_info"].get("case") or b["group"]: float(b["extra_info"][key])
        for b in data["benchmarks"]
        if key in b.get("extra_info", {})
    }


def _peer_targets(data: dict[str, Any]) -> dict[tuple[str, str], float]:
    """(case, packrt impl) -> the issue's packrt / best-peer target, where one is set."""
    return {
        (b["extra_info"]["case"], b["extra_info"]["impl"]): float(b["extra_info"]["target_ratio_vs_peer"])
        for b in data["benchmarks"]
        if "target_ratio_vs_peer" in b.get("extra_info", {})
    }


def default_tracked(now: Ratios) -> list[Tracked]:
    """What a run tracks: every whole-model case against torch, every peer case against torch and its best
    peer (``best-peer``), plus KERNEL_TRACKED where the run has it."""
    models = [(case, impl, "torch") for (case, impl), r in now.items() if case.startswith("model-") and "torch" in r]
    peer_cases = [
        (case, impl, ref)
        for (case, impl), r in now.items()
        if case.startswith("peer-")
        for ref in ("torch", BEST_PEER)
        if ref in r and not (ref == "torch" and impl != "packrt")
    ]
    kernels = [t for t in KERNEL_TRACKED if t[2] in now.get((t[0], t[1]), {})]
    return sorted(models) + sorted(peer_cases) + list(kernels)


def load_margins(path: Path = MARGINS) -> dict[Tracked, float]:
    """(case, impl, reference) -> margin (a fraction: 0.25 lets a ratio grow by 25% before --compare fails)."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SystemExit(f"cannot read the margins {path}: {err}; derive them with --write-margins") from err
    return {(t["case"], t["impl"], t["ref"]): float(t["margin"]) for t in stored["tracked"]}


def derive_margins(runs: list[dict[str, Any]], stat: str = "min") -> dict[str, Any]:
    """Margins from repeated runs of one tree: each tracked case's spread (max/min - 1) and the margin it gets."""
    per_run = [ratios(medians(run, stat)) for run in runs]
    tracked = default_tracked(per_run[0])
    entries = []
    for case, impl, ref in tracked:
        seen = [r[case, impl][ref] for r in per_run if ref in r.get((case, impl), {})]
        if len(seen) < len(runs):
            continue  # not in every run: its noise is unknown, so it is not tracked
        spread = max(seen) / min(seen) - 1
        margin = min(MAX_MARGIN, max(MIN_MARGIN, NOISE_FACTOR * spread + MARGIN_FLOOR))
        entries.append(
            {
                "case": case,
                "impl": impl,
                "ref": ref,
                "ratios": [round(v, 4) for v in seen],
                "spread": round(spread, 4),
                "margin": round(margin, 3),
                "capped": NOISE_FACTOR * spread + MARGIN_FLOOR > MAX_MARGIN,
            }
        )
    return {
        "method": (
            f"margin = clamp({NOISE_FACTOR} * spread + {MARGIN_FLOOR}, {MIN_MARGIN}, {MAX_MARGIN}); spread = "
            f"max/min - 1 of the ratio ({stat} statistic) over {len(runs)} runs of the unchanged tree"
        ),
        "runs": [run.get("datetime", "?") for run in runs],
        "tracked": entries,
    }


def compare(
    data: dict[str, Any], baseline: dict[str, Any] | None, margins: dict[Tracked, float], stat: str = "min"
) -> list[dict[str, Any]]:
    """One row per tracked ratio: now, baseline, change (now / baseline), margin, flag (REGRESSED fails --compare)."""
    now = ratios(medians(data, stat))
    before = ratios(medians(baseline, stat)) if baseline else {}
    targets = _targets(data)
    peer_targets = _peer_targets(data)
    rows = []
    for key, margin in sorted(margins.items()):
        case, impl, ref = key
        ratio = now.get((case, impl), {}).get(ref)
        base = before.get((case, impl), {}).get(ref)
        change = ratio / base if ratio is not None and base is not None else None
        if ratio is None:
            flag = "not run"
        elif change is None:
            flag = "new"
        elif change > 1 + margin:
            flag = "REGRESSED"
        elif change < 1 / (1 + margin):
            flag = "improved"
        else:
            flag = "ok"
        target = targets.get(case) if ref == "torch" else peer_targets.get((case, impl)) if ref == BEST_PEER else None
        rows.append(
            {"case": case, "impl": impl, "ref": ref, "ratio": ratio, "baseline": base, "change": change}
            | {"margin": margin, "flag": flag, "target": target}
        )
    return rows


def _num(value: float | None, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def summary_table(rows: list[dict[str, Any]]) -> list[str]:
    """The tracked ratios as markdown, one row per (case, packrt impl, reference), in case order."""
    out = [
        "| case | ratio | baseline ratio | change | margin | flag | target |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        impl = "" if row["impl"] == "packrt" else f" {row['impl']}"
        target = row["target"]
        if target is None or row["ratio"] is None:
            met = "-"
        else:
            met = f"<= {target}: {'met' if row['ratio'] <= target else 'MISSED'}"
        out.append(
            f"| {row['case']}{impl} / {row['ref']} | {_num(row['ratio'])} | {_num(row['baseline'])} "
            f"| {_num(row['change'], '.2f')}x | {row['margin']:.0%} | {row['flag']} | {met} |"
        )
    return out


def plot(history: list[tuple[str, dict[str, Any]]], tracked: list[Tracked], path: Path, stat: str = "min") -> None:
    """A PNG of each tracked ratio across the runs in ``history`` (label, run), oldest first; two panels. The
    runs should be of one kind of CPU (:func:`same_kind_history`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [ratios(medians(run, stat)) for _, run in history]
    labels = [label for label, _ in history]
    whole = ("model-", "peer-")
    panels = [("whole models (packrt / torch, / best peer)", [t for t in tracked if t[0].startswith(whole)])]
    panels.append(("kernel cases", [t for t in tracked if not t[0].startswith(whole)]))
    fig, axes = plt.subplots(1, 2, figsize=(16, 7), sharey=True)
    for ax, (title, keys) in zip(axes, panels, strict=True):
        for case, impl, ref in keys:
            ys = [r.get((case, impl), {}).get(ref, float("nan")) for r in series]
            name = case if impl == "packrt" else f"{case} {impl}"
            ax.plot(range(len(labels)), ys, marker="o", label=f"{name} / {ref}")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(0.0, -0.18), ncol=2)
    axes[0].set_ylabel(f"packrt / reference ({stat}); below 1 packrt is faster")
    fig.suptitle("tracked ratios across stored baselines")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def standing(data: dict[str, Any], name: str, stat: str = "min") -> str:
    """Where one run leaves packrt, for a reader rather than a gate: the machine, the peer table, and every
    tracked ratio with its target (no baseline columns: this is a position, not a change)."""
    rows = compare(data, None, {key: 0.0 for key in default_tracked(ratios(medians(data, stat)))}, stat)
    table = ["| case | packrt / reference | target |", "| --- | ---: | --- |"]
    for row in rows:
        impl = "" if row["impl"] == "packrt" else f" {row['impl']}"
        target = row["target"]
        met = "-" if target is None else f"<= {target}: {'met' if row['ratio'] <= target else 'missed'}"
        table.append(f"| {row['case']}{impl} / {row['ref']} | {_num(row['ratio'])} | {met} |")
    parts = [f"From `{name}` (`benchmarks/baselines/`), the newest stored run:", "", *machine_lines(data), ""]
    peer_rows = peers_table(data, stat)
    if peer_rows:
        parts += ["Against the engines people would use instead, on the same machine in the same run:", ""]
        parts += [*peer_rows, ""]
    parts += [f"Every tracked ratio ({stat} of the rounds; below 1.00 packrt is faster):", "", *table]
    return "\n".join(parts) + "\n"


def render(
    data: dict[str, Any],
    baseline: dict[str, Any] | None,
    baseline_name: str | None,
    stat: str = "min",
    summary: list[dict[str, Any]] | None = None,
) -> str:
    """The whole report as markdown: the tracked summary first (when given), then machine, ratios, memory."""
    parts = []
    if summary is not None:
        parts += ["## Tracked ratios", ""]
        parts.append(
            f"packrt / reference ({stat}); change = ratio / baseline ratio (above 1 is worse); a change above "
            f"1 + margin is REGRESSED and fails `--compare`. Baseline: `{baseline_name or 'none'}`."
        )
        parts += ["", *summary_table(summary), ""]
    parts += ["## Machine", "", *machine_lines(data), "", f"## Ratios (packrt {stat} / reference {stat})", ""]
    parts.append("Below 1.00 packrt is faster than the reference; each ratio comes from one run.")
    if baseline_name:
        parts.append(f"Baseline columns: the same ratios from `{baseline_name}`.")
    if baseline:
        ran, then = (d.get("machine_info", {}).get("bench_threads") for d in (data, baseline))
        if ran != then:
            parts.append(f"WARNING: this run used {ran} threads, the baseline {then}; ratios may not compare.")
    parts += ["", *ratio_table(data, baseline, stat)]
    peer_rows = peers_table(data, stat)
    if peer_rows:
        parts += ["", "## Peers: ONNX Runtime and CTranslate2 (benchmarks/test_peers.py)", "", *peer_rows]
    flops = flops_table(data, stat)
    if flops:
        parts += ["", "## Achieved GFLOP/s (and process CPU time over wall time)", "", *flops]
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


def stored_baselines() -> list[Path]:
    """The stored runs, oldest first by the time each was run (its JSON's ``datetime``), not by file name:
    names sort by what they say, which is not when they were made."""

    def run_time(path: Path) -> str:
        try:
            return str(json.loads(path.read_text()).get("datetime", ""))
        except (OSError, json.JSONDecodeError):
            return ""

    return sorted(BASELINES.glob("*.json"), key=lambda path: (run_time(path), path.name))


# The vector extensions that decide which GEMM and kernel code runs (oneMKL, OpenBLAS, numba and torch
# all dispatch on them): two CPUs that differ here are different machines for a ratio.
_KIND_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")


def cpu_kind(data: dict[str, Any]) -> str:
    """The kind of CPU a run was made on: vendor, family, model and the vector extensions the kernels
    dispatch on, from pytest-benchmark's ``machine_info`` ('unknown' when the run recorded none)."""
    cpu = data.get("machine_info", {}).get("cpu", {})
    if not cpu:
        return "unknown"
    flags = set(cpu.get("flags", ()))
    isa = ",".join(flag for flag in _KIND_FLAGS if flag in flags) or "no avx2"
    vendor = cpu.get("vendor_id_raw", "?")
    return (
        f"{cpu.get('brand_raw', '?')} ({vendor} family {cpu.get('family', '?')} model {cpu.get('model', '?')}; {isa})"
    )


def newest_baseline(kind: str | None = None) -> Path | None:
    """The newest stored run, or the newest made on a CPU of ``kind`` when one is given."""
    found = [path for path in stored_baselines() if kind is None or cpu_kind(load(path)) == kind]
    return found[-1] if found else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+", help="pytest-benchmark JSON (--benchmark-json)")
    parser.add_argument("--baseline", type=Path, help="a stored run to compare ratios with")
    parser.add_argument("--no-baseline", action="store_true", help="print this run's ratios only")
    parser.add_argument("--markdown", type=Path, help="also write the report to this file")
    parser.add_argument("--plot", type=Path, help="also draw the tracked ratios across the stored baselines (PNG)")
    parser.add_argument(
        "--save-baseline", type=Path, help="also store this run (minus raw round timings) as a baseline"
    )
    parser.add_argument("--margins", type=Path, default=MARGINS, help="the tracked cases and their margins")
    parser.add_argument(
        "--compare", action="store_true", help="exit 1 when a tracked ratio worsened by more than its margin"
    )
    parser.add_argument(
        "--write-margins",
        type=Path,
        help="derive the margins from the given results (3 or more runs of one tree) and write them here",
    )
    parser.add_argument(
        "--stat",
        choices=("min", "median"),
        default="min",
        help="which per-benchmark time to divide (default min: on a shared machine other work only "
        "ever adds time, so the fastest round is the steadiest estimate)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.write_margins:
        if len(args.results) < 3:
            parser.error(f"--write-margins needs 3 or more runs to measure noise, got {len(args.results)}")
        return _write_margins(args.results, args.write_margins, args.stat)
    if len(args.results) != 1:
        parser.error("give one results file (several only with --write-margins)")
    results = args.results[0]
    data = load(results)
    kind = cpu_kind(data)
    base_path, baseline = _baseline(args, results, kind)
    if args.compare or args.margins.exists():
        margins = load_margins(args.margins)
    else:  # no margins derived yet: show what would be tracked, at the widest margin
        margins = dict.fromkeys(default_tracked(ratios(medians(data, args.stat))), MAX_MARGIN)
    summary = compare(data, baseline, margins, args.stat)
    text = render(data, baseline, base_path.name if base_path else None, args.stat, summary)
    sys.stdout.write(text)
    _write_outputs(args, data, text, sorted(margins))
    if not args.compare:
        return 0
    if baseline is None and not args.no_baseline and stored_baselines():
        sys.stderr.write(
            f"--compare skipped: no stored baseline ran on this kind of CPU ({kind}); store this run as one with "
            "--save-baseline benchmarks/baselines/<date>-<cpu>-<cores>.json (from a tree you trust)\n"
        )
        return 0
    if baseline is not None and cpu_kind(baseline) != kind:
        return 0  # said when the baseline was read: ratios from another CPU are not a verdict on this run
    return _gate(summary, baseline is not None)


def _baseline(args: argparse.Namespace, results: Path, kind: str) -> tuple[Path | None, dict[str, Any] | None]:
    """The baseline file and its data (``--baseline``, else the newest stored one of this CPU kind; never
    the results file itself); a note on stderr when it ran on another kind of CPU."""
    base_path = None if args.no_baseline else (args.baseline or newest_baseline(kind))
    if base_path is not None and base_path.resolve() == results.resolve():
        base_path = None
    baseline = load(base_path) if base_path else None
    if baseline is not None and cpu_kind(baseline) != kind:
        sys.stderr.write(
            f"baseline {base_path} ran on another kind of CPU ({cpu_kind(baseline)}; this run: {kind}): its "
            "ratios are shown for reference, but --compare does not judge this run against them\n"
        )
    return base_path, baseline


def _write_outputs(args: argparse.Namespace, data: dict[str, Any], text: str, tracked: list[Tracked]) -> None:
    """``--save-baseline``, ``--markdown`` and ``--plot``: each asked-for file written."""
    if args.save_baseline:
        save_baseline(data, args.save_baseline)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
    if args.plot:
        plot(same_kind_history(data), tracked, args.plot, args.stat)


def same_kind_history(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The stored runs made on the kind of CPU ``data`` ran on, oldest first, then ``data`` ("this run"): what
    one line of the plot may join (a ratio moves with the CPU kind, so runs of two kinds are not one series)."""
    kind = cpu_kind(data)
    history = [(path.stem, run) for path in stored_baselines() if cpu_kind(run := load(path)) == kind]
    return [*history, ("this run", data)]


def _write_margins(results: list[Path], target: Path, stat: str) -> int:
    """``--write-margins``: the margins derived from several runs of one tree, written to ``target``."""
    derived = derive_margins([load(p) for p in results], stat)
    target.write_text(json.dumps(derived, indent=1) + "\n")
    for entry in derived["tracked"]:
        print(f"{entry['case']} {entry['impl']}/{entry['ref']}: spread {entry['spread']:.1%} -> {entry['margin']:.0%}")
    return 0


def _gate(summary: list[dict[str, Any]], has_baseline: bool) -> int:
    """``--compare``'s exit status: 1 when a tracked ratio worsened past its margin, 2 without a baseline."""
    if not has_baseline:
        sys.stderr.write("--compare needs a baseline (benchmarks/baselines/ is empty or --no-baseline)\n")
        return 2
    regressed = [row for row in summary if row["flag"] == "REGRESSED"]
    for row in regressed:
        sys.stderr.write(
            f"REGRESSED: {row['case']} {row['impl']} / {row['ref']} {row['baseline']:.3f} -> {row['ratio']:.3f} "
            f"({row['change']:.2f}x, margin {row['margin']:.0%})\n"
        )
    return 1 if regressed else 0


if __name__ == "__main__":
    raise SystemExit(main())
