"""How the demo times things: side by side, in one process, and said in words.

A time in milliseconds says more about the machine (its cores, what else runs on it) than about
packrt, so the demo prints no speed alone. :func:`race` runs packrt and a reference in turn, round by
round, with the same inputs and the same thread count, the order rotated each round (a burst of other
work slows both sides, not one), after one untimed warm-up call of each (first-call packing and kernel
compilation are not the steady state). Each side's fastest round counts, as in the benchmarks: other work
on the machine only ever adds time. :meth:`Race.line` then gives the ratio together with the threads, the
machine's 1-minute load and a sentence saying how to read it.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import packrt

LEVEL = 0.1  # ratios within 10% of 1 read as "level": one run on a shared machine does not resolve less
ROUND_S = 0.2  # a call shorter than this runs in a burst filling it (see race)


def machine_load() -> float | None:
    """The 1-minute load average (runnable processes), or None where the platform has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def same_threads(torch: ModuleType | None) -> int:
    """packrt's CPU thread count, also given to torch when it is there, so both sides compute on as many."""
    threads = packrt.get_num_threads()
    if torch is not None:
        torch.set_num_threads(threads)
    return threads


@dataclass(frozen=True)
class Race:
    """Seconds per call of each contestant in its fastest round, in the order given to :func:`race`."""

    best: dict[str, float]  # seconds per call in each contestant's fastest round
    rounds: int
    threads: int
    load: float | None

    def ratio(self, name: str, against: str) -> float:
        """``name``'s time over ``against``'s: below 1, ``name`` was faster."""
        return self.best[name] / self.best[against]

    def conditions(self) -> str:
        """The threads, the load and the cores the times were taken under."""
        cores = os.cpu_count() or 1
        load = "n/a" if self.load is None else f"{self.load:.1f}"
        return f"{self.threads} thread(s) each, 1-minute load {load} on {cores} core(s)"

    def reading(self, ratio: float) -> str:
        """A plain word for a ratio, with a warning when the machine was busier than its cores."""
        word = "level" if abs(ratio - 1) <= LEVEL else "packrt faster here" if ratio < 1 else "packrt slower here"
        cores = os.cpu_count() or 1
        if self.load is not None and self.load > cores:
            word += f" (the machine was busy, load {self.load:.1f} > {cores} cores: the ratio is rough)"
        return word

    def line(self, what: str, reference: str, name: str = "packrt") -> str:
        """One sentence: ``name``'s time as a multiple of ``reference``'s, the conditions, the reading."""
        r = self.ratio(name, reference)
        possessive = f"{reference}'" if reference.endswith("s") else f"{reference}'s"
        rounds = f"{self.rounds} interleaved round{'' if self.rounds == 1 else 's'}"
        return (
            f"{name} took {r:.2f}x {possessive} time for {what} (fastest of {rounds}, "
            f"{self.conditions()}): {self.reading(r)}"
        )


def race(
    calls: dict[str, Callable[[], object]],
    rounds: int,
    threads: int,
    round_s: float = ROUND_S,
    cap: Callable[[], object] | None = None,
) -> Race:
    """Time each call in ``rounds`` rounds, the calls taking turns within each round and the order rotated
    from round to round, after one untimed call of each.

    Each turn starts with one untimed call that lets the thread pools settle after the other side's turn
    (its idle workers still spinning, or this side's asleep); then the timed call, or for a call shorter
    than ``round_s`` enough of them back to back to fill ``round_s``, as a program calling it in a loop
    would. Without the settling call each call pays for the switch, and the side that runs second looks
    slower than it is. ``cap``, when given, runs before every turn: :func:`same_threads` again,
    since a numba launch can reset the OpenMP thread count torch shares with it."""
    burst: dict[str, int] = {}
    for name, call in calls.items():
        start = time.perf_counter()
        call()
        took = time.perf_counter() - start
        burst[name] = 0 if took >= round_s else math.ceil(round_s / max(took, 1e-6))
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            call, n = calls[name], burst[name]
            if cap is not None:
                cap()
            call()  # settles the pools; untimed
            start = time.perf_counter()
            for _ in range(max(n, 1)):
                call()
            times[name].append((time.perf_counter() - start) / max(n, 1))
    return Race({name: min(t) for name, t in times.items()}, rounds, threads, machine_load())


def quiet_progress_bars(transformers: ModuleType) -> None:
    """Turn transformers' (and huggingface_hub's) progress bars off unless stderr, where they draw, is a
    terminal: in a log or a pipe they are noise between the demo's lines."""
    if not sys.stderr.isatty():
        transformers.utils.logging.disable_progress_bar()


__all__ = ["LEVEL", "Race", "machine_load", "quiet_progress_bars", "race", "same_threads"]
