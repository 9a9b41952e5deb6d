"""How close packrt's results are promised to be: to torch.nn.functional, and between two of packrt's roads.

Two tables, each read by the tests and by anyone comparing results. A result ``a`` agrees with
``e`` when ``|a - e| <= atol + rtol * |e|`` elementwise (numpy's ``assert_allclose`` rule).

``KERNEL_TOLERANCES``: packrt against PyTorch, per input dtype. Half precision is computed in
float32 and rounded once, so its budget is a couple of units in the last place of the output
dtype; torch may round intermediate results differently, which is why the half entries are not
tighter.

``ROAD_TOLERANCES``: one packrt result against the same result computed by another of packrt's
roads: a packed weight against the declared one read in place (``packed``, ``borrowed`` and
``per_call`` residencies), MKL's GEMM against numpy's (``PACKRT_BLAS``), numba's kernels against
numpy's (``PACKRT_NUMBA``), a thread count against another where the work is split by the BLAS.
Those roads run the same math but not the same instructions: a GEMM's BLAS picks its kernel, and
with it the order in which each dot product is summed, by layout, shape, thread count and CPU
(oneMKL on AMD Zen 4 sums a contiguous ``W^T`` and a transposed view of ``W`` differently; on
Sapphire Rapids it does too for some shapes). Two summation orders of ``k`` products differ by at
most about ``k`` units of rounding times the sum of the products' magnitudes, and by nothing
predictable relative to a sum that cancels, so the budget is:

- ``rtol``: a fixed relative part, a few thousand units of rounding of the result dtype for
  float64 and float32; for float16 and bfloat16 one unit in the last place of the output (2**-10
  and 2**-7 of the value), because both roads compute in float32 and each rounds once, so two
  float32 results a hair apart may round to neighbouring half values;
- ``atol``: an absolute part per summed term (``terms``, the reduction length ``k``: a linear's
  ``in_features``, a conv's ``in_channels / groups * kh * kw``), which covers the cancelled sums,
  for operands of about unit size (scale it for others). The half dtypes' absolute part is their
  float32 computation's.

The equalities packrt does promise bit for bit (a compiled GEMV on one thread and on two, the
compiled elementwise kernels against numpy's, ...) are listed in docs/guides/determinism.md, each
with its test; every other comparison of two roads uses :func:`road_tolerance`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# dtype name -> (rtol, atol)
KERNEL_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-5, 1e-5),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}

# dtype name -> (rtol, atol per summed term): two of packrt's roads to one result (see the module docstring)
ROAD_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-12, 1e-14),  # 4500 and 45 units of rounding (2**-53)
    "float32": (1e-5, 1e-6),  # 170 and 17 units of rounding (2**-24): float32's sums, in float32
    "float16": (1e-3, 1e-6),  # one unit in the last place (2**-10 of the value); float32's sums below it
    "bfloat16": (8e-3, 1e-6),  # one unit in the last place (2**-7 of the value); float32's sums below it
}


# dtype name -> a fraction of the largest |expected|: a whole model's output by two of packrt's roads (a
# serving plan and the module-by-module road). float32: the layers' GEMMs may sum in other orders (the
# plan joins Q, K and V into one GEMM), and each LayerNorm keeps those differences at float32's scale.
# Half precision: the module road rounds to the half dtype after every module (about ten roundings a
# layer, each up to half a unit in the last place), the plan computes in float32 and rounds once at the
# end, so the two differ by the module road's accumulated rounding: measured up to 2**-5.5 (bfloat16)
# and 2**-8.4 (float16) of the largest |output| on a 2-layer encoder with large weights, where the plan
# stayed within one unit of the float32 computation on the same weights.
MODEL_ROAD_TOLERANCES: dict[str, float] = {
    "float32": 1e-5,
    "float16": 2.0**-7,
    "bfloat16": 2.0**-4,
}


def _lookup(table: dict[str, tuple[float, float]], dtype: Any, what: str) -> tuple[float, float]:
    name = np.dtype(dtype).name
    try:
        return table[name]
    except KeyError as err:
        raise KeyError(f"no {what} tolerance for dtype {name}; covered: {sorted(table)}") from err


def tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for results of ``dtype`` against torch; KeyError naming the dtypes covered otherwise."""
    return _lookup(KERNEL_TOLERANCES, dtype, "kernel")


def road_tolerance(dtype: Any, terms: int = 1) -> tuple[float, float]:
    """(rtol, atol) within which two of packrt's roads agree on a result of ``dtype`` whose elements each
    sum ``terms`` products of operands of about unit size (1 for elementwise results); KeyError naming
    the dtypes covered otherwise, ValueError for ``terms < 1``."""
    if terms < 1:
        raise ValueError(f"terms is the number of products each result sums, at least 1; got {terms}")
    rtol, atol = _lookup(ROAD_TOLERANCES, dtype, "road")
    return rtol, atol * terms


def assert_same_model_output(actual: Any, expected: Any, *, err_msg: str = "") -> None:
    """Assert a whole model's output ``actual`` is ``expected`` computed by another road (a serving plan
    against the module-by-module road): the same dtype and shape, and every element within
    :data:`MODEL_ROAD_TOLERANCES` of the dtype times the largest ``|expected|``."""
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.dtype == e.dtype, f"dtype {a.dtype} != {e.dtype} {err_msg}".rstrip()
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape} {err_msg}".rstrip()
    scale = float(np.max(np.abs(e.astype(np.float64)))) if e.size else 0.0
    fraction = _lookup({k: (v, 0.0) for k, v in MODEL_ROAD_TOLERANCES.items()}, a.dtype, "model road")[0]
    np.testing.assert_allclose(
        a.astype(np.float64), e.astype(np.float64), rtol=0, atol=fraction * scale, err_msg=err_msg
    )


def assert_same_result(actual: Any, expected: Any, *, terms: int = 1, err_msg: str = "") -> None:
    """Assert ``actual`` is ``expected`` computed by another road: the same dtype and shape, NaN where it
    is NaN, and values within :func:`road_tolerance` of the dtype for ``terms`` summed products."""
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.dtype == e.dtype, f"dtype {a.dtype} != {e.dtype} {err_msg}".rstrip()
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape} {err_msg}".rstrip()
    rtol, atol = road_tolerance(a.dtype, terms)
    np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, err_msg=err_msg)
