"""erf/erfc hold their documented accuracy against Python's math module, with no torch needed."""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from packrt_kernels_cpu.special import erf, erfc

GRID = np.linspace(-12.0, 12.0, 24001)


def _reference(fn: Any, x: np.ndarray) -> np.ndarray:
    return np.array([fn(float(v)) for v in x])


def test_float64_erf_is_within_2e_15_of_math_erf() -> None:
    np.testing.assert_allclose(erf(GRID), _reference(math.erf, GRID), rtol=0, atol=2e-15)


def test_float64_erfc_keeps_2e_13_relative_accuracy_in_the_tail() -> None:
    want = _reference(math.erfc, GRID)
    np.testing.assert_allclose(erfc(GRID), want, rtol=2e-13, atol=0)


def test_float32_erfc_is_within_2e_7_relative_wherever_float32_is_normal() -> None:
    x = GRID.astype(np.float32)
    want = _reference(math.erfc, x)
    keep = want > np.finfo(np.float32).tiny
    got = erfc(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got[keep], want[keep], rtol=2e-7, atol=0)
    np.testing.assert_allclose(erf(x), _reference(math.erf, x), rtol=0, atol=2e-7)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_inputs_come_back_in_their_dtype_rounded_once(dtype: Any) -> None:
    x = np.linspace(-4, 4, 81).astype(dtype)
    got = erf(x)
    assert got.dtype == np.dtype(dtype)
    exact = _reference(math.erf, x.astype(np.float64))
    want = exact.astype(dtype)
    # Bit equality with the exact value rounded holds on every CPU: each exact value lies farther from a
    # rounding boundary of the half dtype (a midpoint between neighbours) than erf may stray (1.2e-7);
    # erf(0) is 0 exactly (the series' first term), whatever the rounding.
    up = np.nextafter(want, np.array(np.inf, dtype)).astype(np.float64)
    down = np.nextafter(want, np.array(-np.inf, dtype)).astype(np.float64)
    boundaries = np.stack([(want.astype(np.float64) + up) / 2, (want.astype(np.float64) + down) / 2])
    assert np.abs(exact - boundaries)[:, exact != 0].min() > 10 * 1.2e-7
    np.testing.assert_array_equal(got, want)


def test_limits_and_nan() -> None:
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0])
    np.testing.assert_array_equal(erf(x), [1.0, -1.0, np.nan, 0.0, -0.0])
    np.testing.assert_array_equal(erfc(x), [0.0, 2.0, np.nan, 1.0, 1.0])


@given(st.floats(min_value=-30, max_value=30, allow_nan=False))
def test_erf_is_odd_and_erfc_is_one_minus_erf(v: float) -> None:
    x = np.array([v, -v])
    e = erf(x)
    assert e[0] == -e[1]
    assert abs(erfc(x)[0] - (1.0 - e[0])) <= 4e-16


def test_float32_erf_keeps_relative_accuracy_for_small_arguments() -> None:
    x = np.array([1e-30, 1e-6, 1e-3, 0.5, 0.999], np.float32)
    want = _reference(math.erf, x)
    np.testing.assert_allclose(erf(x), want, rtol=2e-7, atol=0)
