"""Rebuild the rational erf fit the compiled exact GELU uses (``_numba_kernels._ERF_P`` / ``_ERF_Q``).

erf(z) ~ z P(z^2) / Q(z^2) on [0, 3.92], P of degree 5 and Q of degree 5 with Q(0) = 1. Each round
solves the linearised least-squares problem ``P(t) - (erf(z)/z) Q(t) = 0`` weighted by
``z / |Q_previous(t)|`` (so it measures erf's absolute error) and by Lawson's weights, which
grow where the error is largest and drive the fit towards the minimax one. Prints the
coefficients and the largest error of erf evaluated in float32 the way the kernel does.

    python packages/packrt-kernels-cpu/tools/fit_erf.py
"""

from __future__ import annotations

import math

import numpy as np

CLAMP = 3.92  # erf(3.92) rounds to 1.0 in float32
DEGREES = (5, 5)


def fit(rounds: int = 200, points: int = 20000) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q) coefficients, constant term first."""
    z = np.linspace(0.0, CLAMP, points + 1)[1:]
    erf = np.array([math.erf(v) for v in z])
    ratio, t = erf / z, z * z
    n_p, n_q = DEGREES
    powers_p = np.stack([t**k for k in range(n_p + 1)], axis=1)
    powers_q = -np.stack([ratio * t**k for k in range(1, n_q + 1)], axis=1)
    system = np.concatenate([powers_p, powers_q], axis=1)
    lawson = np.full_like(t, 1.0 / t.size)
    q = np.ones(1)
    for _ in range(rounds):
        scale = np.sqrt(lawson) * z / np.abs(np.polyval(q[::-1], t))
        solution, *_ = np.linalg.lstsq(system * scale[:, None], ratio * scale, rcond=None)
        p, q = solution[: n_p + 1], np.concatenate([[1.0], solution[n_p + 1 :]])
        error = np.abs(z * np.polyval(p[::-1], t) / np.polyval(q[::-1], t) - erf)
        lawson = lawson * error
        lawson /= lawson.sum()
    return p, q


def float32_error(p: np.ndarray, q: np.ndarray) -> float:
    """The largest |erf error| over [-6, 6] with the kernel's float32 clamp and Horner evaluation."""
    x = np.linspace(-6.0, 6.0, 600001, dtype=np.float32)
    z = np.clip(x, np.float32(-CLAMP), np.float32(CLAMP))
    t = z * z
    num, den = np.zeros_like(t), np.zeros_like(t)
    for c in p[::-1].astype(np.float32):
        num = num * t + c
    for c in q[::-1].astype(np.float32):
        den = den * t + c
    approx = np.clip(z * num / den, np.float32(-1.0), np.float32(1.0))
    exact = np.array([math.erf(float(v)) for v in x])
    return float(np.abs(approx - exact).max())


if __name__ == "__main__":
    p, q = fit()
    print("P", [float(f"{c:.11g}") for c in p])
    print("Q", [float(f"{c:.11g}") for c in q[1:]])
    print(f"largest float32 error of erf: {float32_error(p, q):.2e}")
