"""The road tolerance: one budget per dtype for two of packrt's roads to one result, wide enough for the
summation orders BLAS kernels choose, narrow enough that a wrong result fails it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from packrt_kernels_cpu import blas
from packrt_kernels_cpu.tolerance import (
    MODEL_ROAD_TOLERANCES,
    ROAD_TOLERANCES,
    assert_same_model_output,
    assert_same_result,
    road_tolerance,
)

BF16 = np.dtype(ml_dtypes.bfloat16)
ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "guides" / "determinism.md"
# (rows, k, out): shapes where oneMKL on the development Xeon sums a contiguous and a transposed
# right operand in different orders (float64 2x5x4, 3x64x32, 1x384x1536; float32 1x384x1536), and wider ones.
SHAPES = [(2, 5, 4), (6, 5, 4), (3, 64, 32), (1, 384, 1536), (8, 384, 1536), (33, 1536, 384)]


def test_the_road_table_covers_every_float_dtype_and_its_atol_grows_with_the_terms_summed() -> None:
    assert set(ROAD_TOLERANCES) == {"float64", "float32", "float16", "bfloat16"}
    rtol, atol = ROAD_TOLERANCES["float32"]
    assert road_tolerance(np.float32) == (rtol, atol)
    assert road_tolerance(np.dtype(np.float32), terms=384) == (rtol, atol * 384)


def test_the_road_tolerance_names_a_dtype_it_does_not_cover_and_a_count_below_one() -> None:
    with pytest.raises(KeyError, match=r"no road tolerance for dtype int32; covered: \['bfloat16', 'float16'"):
        road_tolerance(np.int32)
    with pytest.raises(ValueError, match="terms is the number of products each result sums, at least 1; got 0"):
        road_tolerance(np.float32, terms=0)


def test_a_result_of_another_dtype_or_shape_is_not_the_same_result() -> None:
    a = np.ones((2, 3), np.float32)
    with pytest.raises(AssertionError, match="dtype float32 != float64"):
        assert_same_result(a, a.astype(np.float64))
    with pytest.raises(AssertionError, match=r"shape \(2, 3\) != \(3, 2\)"):
        assert_same_result(a, a.reshape(3, 2))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["float32", "float16", "bfloat16"])
def test_a_model_output_agrees_within_its_fraction_of_the_largest_value_and_not_beyond(dtype: Any) -> None:
    expected = np.array([[4.0, -0.5], [0.0, 1.0]], dtype=dtype)
    fraction = MODEL_ROAD_TOLERANCES[np.dtype(dtype).name]
    step = np.array([[0.0, 0.0], [fraction * 4.0, 0.0]])  # a share of the largest |value|, on a small one
    near = (expected.astype(np.float64) + 0.9 * step).astype(dtype)
    assert_same_model_output(near, expected)
    far = (expected.astype(np.float64) + 3.0 * step).astype(dtype)
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        assert_same_model_output(far, expected)
    with pytest.raises(AssertionError, match="dtype float64 != "):
        assert_same_model_output(expected.astype(np.float64), expected)
    with pytest.raises(KeyError, match="no model road tolerance for dtype float64"):
        assert_same_model_output(expected.astype(np.float64), expected.astype(np.float64))


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_half_results_one_unit_in_the_last_place_apart_agree_and_two_do_not(dtype: Any) -> None:
    # the bottom of each binade is where one unit in the last place is the largest part of the value
    values = np.array([2.0**e for e in range(-6, 8)] + [-1.0, 3.0, 1000.0]).astype(dtype)
    up = np.nextafter(values, np.array(np.inf, dtype))
    assert_same_result(up, values)
    assert_same_result(values, up)
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        assert_same_result(np.nextafter(up, np.array(np.inf, dtype))[:1], values[:1])


@pytest.mark.usefixtures("blas_road")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_a_gemm_agrees_across_operand_layouts_and_roads_within_the_road_tolerance(
    m: int, k: int, n: int, dtype: Any
) -> None:
    rng = np.random.default_rng(m * k + n)
    x = rng.standard_normal((m, k)).astype(dtype)
    w = rng.standard_normal((n, k)).astype(dtype)  # torch's (out, in)
    bias = rng.standard_normal(n).astype(dtype)
    view = blas.matmul(x, w.T, bias)  # the declared weight read transposed, as borrowed serves it
    packed = blas.matmul(x, np.ascontiguousarray(w.T), bias)  # a pack's contiguous W^T
    numpys = (x @ np.ascontiguousarray(w.T) + bias).astype(dtype)  # numpy's road, its own order
    assert_same_result(view, packed, terms=k)
    assert_same_result(numpys, packed, terms=k)
    with pytest.raises(AssertionError, match="Not equal to tolerance"):  # a wrong result is not within it
        assert_same_result(packed - bias, view, terms=k)


def test_every_bit_for_bit_promise_in_the_guide_names_exactly_one_test_that_exists() -> None:
    if not GUIDE.exists():
        pytest.skip(f"{GUIDE} is not beside this checkout (the docs ship with the repository, not the wheel)")
    promised = GUIDE.read_text(encoding="utf-8").split("## What is promised bit for bit")[1].split("\n## ")[0]
    rows = [line for line in promised.splitlines() if line.startswith("| ") and "`test_" in line]
    names = [re.findall(r"`(test_\w+)`", row)[-1] for row in rows]
    assert len(names) >= 10 and len(set(names)) == len(names), names
    sources = [p.read_text(encoding="utf-8") for p in ROOT.glob("packages/*/tests/test_*.py")]
    for name in names:
        defined = sum(len(re.findall(rf"^def {name}\(", text, re.MULTILINE)) for text in sources)
        assert defined == 1, f"{GUIDE.name} promises {name}, defined {defined} times under packages/*/tests"
