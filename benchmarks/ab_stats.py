"""The same-run A/B's statistics: HEAD/REV per case from paired rounds, its bootstrap interval, the flag.

Each round times both revisions back to back on the same case, so a burst of other work on the
machine lands on both halves of a round and cancels in that round's ratio. The estimate is the
interquartile mean (the mean of the middle half) of the per-round log ratios, exponentiated: a few
rounds hit by a burst that did not cancel are trimmed away instead of moving it. Its interval is a
percentile bootstrap over rounds: the rounds are resampled with replacement ``resamples`` times, the
estimate recomputed on each resample, and the central ``level`` of those estimates kept.

A case is flagged only when the whole interval lies beyond the threshold: REGRESSED when its lower
bound exceeds ``threshold`` (HEAD slower by more than that, and the data leaves no doubt of it),
improved when its upper bound is below ``1 / threshold``. An interval that straddles either bound
says the rounds cannot tell; the case is ``ok``, and the driver may time it for more rounds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
LEVEL = 0.95
TRIM = 0.25  # cut from each end before the mean: the interquartile mean


def trimmed_mean(values: np.ndarray, trim: float = TRIM) -> np.ndarray:
    """The mean of the middle ``1 - 2 * trim`` of ``values`` along the last axis (at least one value kept)."""
    ordered = np.sort(values, axis=-1)
    n = ordered.shape[-1]
    cut = min(int(n * trim), (n - 1) // 2)
    return np.asarray(ordered[..., cut : n - cut].mean(axis=-1))


@dataclass(frozen=True)
class Estimate:
    """HEAD/REV of one case: the point estimate and its bootstrap interval, from ``rounds`` paired rounds."""

    ratio: float
    low: float
    high: float
    rounds: int

    def flag(self, threshold: float) -> str:
        """``REGRESSED``, ``improved`` or ``ok`` (see the module docstring)."""
        if self.low > threshold:
            return "REGRESSED"
        if self.high < 1.0 / threshold:
            return "improved"
        return "ok"

    def undecided(self, threshold: float) -> bool:
        """Whether the interval straddles a bound, so more rounds could still decide the flag."""
        return self.low <= threshold <= self.high or self.low <= 1.0 / threshold <= self.high


def estimate(
    head: list[float], rev: list[float], pairs: list[int] | None = None, *, resamples: int = RESAMPLES, seed: int = 0
) -> Estimate:
    """HEAD/REV from per-round times (``head[i]`` and ``rev[i]`` timed in the same round i, by the worker
    pair ``pairs[i]``), with its ``LEVEL`` bootstrap interval. ValueError for unpaired or empty input.

    Rounds timed by one pair of processes share whatever that pair's processes got by chance (where the
    allocator put their arrays, which core they ran on): measured, up to 10% between one pair and the
    next with identical sources. So the estimate weighs each pair alike (the mean of the pairs'
    interquartile means of log HEAD/REV), and the bootstrap resamples pairs and, within each, rounds:
    the interval is as wide as the pairs disagree, not only as the rounds of one pair do."""
    h, r = np.asarray(head, dtype=np.float64), np.asarray(rev, dtype=np.float64)
    if h.shape != r.shape or h.ndim != 1 or h.size == 0:
        raise ValueError(f"need one HEAD and one REV time per round, got {h.shape} and {r.shape}")
    if np.any(h <= 0) or np.any(r <= 0):
        raise ValueError("a round's time is zero or negative: the clock did not advance (batch too short)")
    groups = np.zeros(h.size, dtype=np.int64) if pairs is None else np.asarray(pairs)
    if groups.shape != h.shape:
        raise ValueError(f"need one pair number per round, got {groups.shape} for {h.size} rounds")
    logs = np.log(h / r)
    clusters = [logs[groups == g] for g in np.unique(groups)]
    point = float(np.mean([trimmed_mean(c) for c in clusters]))
    rng = np.random.default_rng(seed)
    # each pair's statistic on its own resampled rounds, one per bootstrap draw: (pairs, resamples)
    within = np.stack([trimmed_mean(c[rng.integers(0, c.size, size=(resamples, c.size))]) for c in clusters])
    chosen = rng.integers(0, len(clusters), size=(resamples, len(clusters)))  # the pairs each draw takes
    boot = within[chosen, np.arange(resamples)[:, None]].mean(axis=1)
    tail = (1.0 - LEVEL) / 2 * 100
    low, high = np.percentile(boot, [tail, 100 - tail])
    return Estimate(float(np.exp(point)), float(np.exp(low)), float(np.exp(high)), int(logs.size))
