"""Rebuild the rational fits the compiled kernels evaluate instead of a scalar libm call:
``erf`` for the exact GELU (``_numba_kernels._ERF_P`` / ``_ERF_Q``) and ``tanh`` for the tanh GELU
(``_TANH_P`` / ``_TANH_Q``).

Both functions are odd, so each is fitted as ``f(z) ~ z P(z^2) / Q(z^2)`` on ``[0, clamp]`` with
``Q(0) = 1``, ``clamp`` being where ``f`` rounds to 1.0 in float32. Each round solves the linearised
least-squares problem ``P(t) - (f(z)/z) Q(t) = 0`` weighted by ``z / |Q_previous(t)|`` (so it measures
``f``'s absolute error) and by Lawson's weights, which grow where the error is largest and drive the
fit towards the minimax one. Prints the coefficients and the largest error of ``f`` evaluated in
float32 the way the kernels do (clamp, two Horner polynomials, one division, clamp to [-1, 1]).

    python packages/packrt-kernels-cpu/tools/fit_rational.py [erf|tanh]
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import NamedTuple

import numpy as np


class Target(NamedTuple):
    function: Callable[[float], float]
    clamp: float  # |z| past which f(z) rounds to +-1.0 in float32
    degrees: tuple[int, int]  # of P and of Q, in t = z^2


TARGETS = {
    "erf": Target(math.erf, 3.92, (5, 5)),
    "tanh": Target(math.tanh, 9.0, (4, 4)),
}


def fit(target: Target, rounds: int = 200, points: int = 20000) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q) coefficients, constant term first."""
    z = np.linspace(0.0, target.clamp, points + 1)[1:]
    exact = np.array([target.function(v) for v in z])
    ratio, t = exact / z, z * z
    n_p, n_q = target.degrees
    powers_p = np.stack([t**k for k in range(n_p + 1)], axis=1)
    powers_q = -np.stack([ratio * t**k for k in range(1, n_q + 1)], axis=1)
    system = np.concatenate([powers_p, powers_q], axis=1)
    lawson = np.full_like(t, 1.0 / t.size)
    q = np.ones(1)
    for _ in range(rounds):
        scale = np.sqrt(lawson) * z / np.abs(np.polyval(q[::-1], t))
        solution, *_ = np.linalg.lstsq(system * scale[:, None], ratio * scale, rcond=None)
        p, q = solution[: n_p + 1], np.concatenate([[1.0], solution[n_p + 1 :]])
        error = np.abs(z * np.polyval(p[::-1], t) / np.polyval(q[::-1], t) - exact)
        lawson = lawson * error
        lawson /= lawson.sum()
    return p, q


def float32_error(target: Target, p: np.ndarray, q: np.ndarray) -> float:
    """The largest |f error| over [-1.5 clamp, 1.5 clamp] with the kernels' float32 clamp and Horner evaluation."""
    x = np.linspace(-1.5 * target.clamp, 1.5 * target.clamp, 600001, dtype=np.float32)
    z = np.clip(x, np.float32(-target.clamp), np.float32(target.clamp))
    t = z * z
    num, den = np.zeros_like(t), np.zeros_like(t)
    for c in p[::-1].astype(np.float32):
        num = num * t + c
    for c in q[::-1].astype(np.float32):
        den = den * t + c
    approx = np.clip(z * num / den, np.float32(-1.0), np.float32(1.0))
    exact = np.array([target.function(float(v)) for v in x])
    return float(np.abs(approx - exact).max())


if __name__ == "__main__":
    for name in sys.argv[1:] or list(TARGETS):
        target = TARGETS[name]
        p, q = fit(target)
        print(f"{name}: P", [float(f"{c:.11g}") for c in p])
        print(f"{name}: Q", [float(f"{c:.11g}") for c in q[1:]])
        print(f"{name}: largest float32 error: {float32_error(target, p, q):.2e}")
