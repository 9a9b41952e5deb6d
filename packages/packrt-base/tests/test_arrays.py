"""The array helpers every backend's kernels share: namespace lookup, dtype rules, argument checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from packrt_base import (
    BFLOAT16,
    FLOAT32,
    FLOAT_DTYPES,
    ArrayBackend,
    KernelDTypeError,
    KernelError,
    Kernels,
    KernelShapeError,
    PackrtError,
    arrays,
)


def test_numpy_arrays_and_scalars_live_in_numpy() -> None:
    assert arrays.array_namespace(np.ones(2), np.float32(1.0)) is np
    assert arrays.array_namespace(np.ones(2), 2.0, True) is np


def test_an_object_of_no_array_library_is_refused() -> None:
    with pytest.raises(TypeError, match="object is not a supported array type"):
        arrays.array_namespace(np.ones(2), object())


@given(st.sampled_from(sorted(FLOAT_DTYPES, key=str)))
def test_half_precision_computes_in_float32_and_wider_in_itself(dtype: np.dtype[object]) -> None:
    expected = FLOAT32 if dtype.itemsize == 2 else dtype
    assert arrays.compute_dtype(dtype) == expected


def test_astype_copies_only_when_the_dtype_changes() -> None:
    a = np.ones(3, dtype=np.float32)
    assert arrays.astype(a, np.float32) is a
    b = arrays.astype(a, BFLOAT16)
    assert b.dtype == BFLOAT16
    assert np.array_equal(b.astype(np.float32), a)


def test_a_non_float_input_is_refused_naming_the_argument_and_the_fix() -> None:
    with pytest.raises(KernelDTypeError, match=r"weight has dtype int64; expected one of .*\.astype"):
        arrays.require_float(np.ones(2, dtype=np.int64), "weight")


def test_a_wrong_rank_is_refused_naming_the_argument_and_the_layout() -> None:
    with pytest.raises(KernelShapeError, match=r"weight must be 2-D \(out, in\), got shape \(3,\)"):
        arrays.require_ndim(np.ones(3), 2, "weight", "(out, in)")


def test_linear_arguments_are_checked_as_every_backend_checks_them() -> None:
    w = np.ones((4, 3), dtype=np.float32)
    assert arrays.check_linear_args(np.ones((2, 3), dtype=np.float32), w, np.ones(4, dtype=np.float32)) == FLOAT32
    with pytest.raises(KernelShapeError, match="in_features=3, got input of shape"):
        arrays.check_linear_args(np.ones((2, 5), dtype=np.float32), w, None)
    with pytest.raises(KernelShapeError, match=r"bias must have shape \(4,\), got \(3,\)"):
        arrays.check_linear_args(np.ones((2, 3), dtype=np.float32), w, np.ones(3, dtype=np.float32))
    with pytest.raises(KernelDTypeError, match="bias has dtype float64 but input has float32"):
        arrays.check_linear_args(np.ones((2, 3), dtype=np.float32), w, np.ones(4))


def test_kernel_errors_are_the_builtins_numpy_users_catch_and_not_packrt_errors() -> None:
    assert issubclass(KernelShapeError, ValueError)
    assert issubclass(KernelDTypeError, TypeError)
    # core re-raises each as its own PackrtError naming the public function; a raw one is not "meant"
    assert not issubclass(KernelError, PackrtError)


def test_an_array_backend_serves_the_kernels_it_was_given() -> None:
    kernels = object.__new__(Kernels)  # the record's identity is all this checks
    backend = ArrayBackend(np, kernels)
    assert backend.kernels is kernels
    assert backend.is_available()
    host = backend.to_host(backend.full((2,), 3.0, FLOAT32))
    assert host.dtype == FLOAT32
    assert host.tolist() == [3.0, 3.0]
    backend.manual_seed(7)
    first = backend.random("normal", (3,), FLOAT32, 0.0, 1.0)
    backend.manual_seed(7)
    assert np.array_equal(first, backend.random("normal", (3,), FLOAT32, 0.0, 1.0))
