"""The CPU backend's kernel interface, checked on plain numpy arrays."""

from importlib.metadata import entry_points

import ml_dtypes
import numpy as np
import pytest

from packrt_kernels_cpu import BINARY_OPS, INPLACE_OPS, UNARY_OPS, CpuBackend


@pytest.fixture
def cpu() -> CpuBackend:
    return CpuBackend()


def test_backend_registers_under_packrt_backends_as_cpu() -> None:
    found = {ep.name: ep for ep in entry_points(group="packrt.backends")}
    assert found["cpu"].load() is CpuBackend


def test_cpu_backend_is_always_available_with_one_device(cpu: CpuBackend) -> None:
    assert cpu.is_available()
    assert cpu.device_count() == 1
    assert cpu.unavailable_reason() == ""


@pytest.mark.parametrize("op", sorted(BINARY_OPS))
def test_each_binary_op_matches_the_numpy_ufunc_it_names(cpu: CpuBackend, op: str) -> None:
    a = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    b = np.array([[2.0], [0.5]], dtype=np.float32)
    expected = getattr(np, BINARY_OPS[op])(a, b)
    np.testing.assert_array_equal(cpu.binary(op, a, b), expected)


@pytest.mark.parametrize("op", sorted(UNARY_OPS))
def test_each_unary_op_matches_the_numpy_ufunc_it_names(cpu: CpuBackend, op: str) -> None:
    a = np.array([0.5, 1.0, 2.0], dtype=np.float64)
    np.testing.assert_array_equal(cpu.unary(op, a), getattr(np, UNARY_OPS[op])(a))


@pytest.mark.parametrize("op", sorted(INPLACE_OPS))
def test_inplace_ops_write_into_the_destination(cpu: CpuBackend, op: str) -> None:
    dst = np.array([4.0, 6.0], dtype=np.float32)
    before = dst.copy()
    alias = dst
    cpu.inplace(op, dst, np.float32(2.0))
    assert alias is dst
    np.testing.assert_array_equal(dst, getattr(np, INPLACE_OPS[op])(before, np.float32(2.0)))


def test_inplace_refuses_a_result_that_does_not_fit_the_destination_dtype(cpu: CpuBackend) -> None:
    dst = np.array([1, 2], dtype=np.int32)
    with pytest.raises(TypeError, match="Cannot cast"):
        cpu.inplace("add", dst, np.array([0.5, 0.5]))


def test_bfloat16_arithmetic_runs_on_ml_dtypes_arrays(cpu: CpuBackend) -> None:
    a = np.array([1.0, 2.5], dtype=ml_dtypes.bfloat16)
    out = cpu.binary("mul", a, a)
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.astype(np.float32), [1.0, 6.25])


def test_manual_seed_makes_draws_reproducible_for_every_float_width(cpu: CpuBackend) -> None:
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
        cpu.manual_seed(7)
        first = cpu.random("normal", (4, 3), np.dtype(dtype), 0.0, 1.0)
        cpu.manual_seed(7)
        second = cpu.random("normal", (4, 3), np.dtype(dtype), 0.0, 1.0)
        assert first.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(first, second)


def test_uniform_draws_stay_in_the_half_open_interval(cpu: CpuBackend) -> None:
    cpu.manual_seed(0)
    out = cpu.random("uniform", (1000,), np.dtype(np.float64), -2.0, 3.0)
    assert out.min() >= -2.0 and out.max() < 3.0


def test_set_num_threads_caps_the_blas_pool(cpu: CpuBackend) -> None:
    before = cpu.get_num_threads()
    try:
        cpu.set_num_threads(1)
        assert cpu.get_num_threads() == 1
    finally:
        cpu.set_num_threads(before)
