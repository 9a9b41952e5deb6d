"""The CPU backend's kernel interface, checked on plain numpy arrays."""

from dataclasses import fields
from importlib.metadata import entry_points

import ml_dtypes
import numpy as np
import pytest

from packrt_kernels_cpu import CPU_KERNELS, CpuBackend, Kernels, array_namespace, cpu_namespace


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


def test_the_backend_names_its_array_namespace_and_its_kernels(cpu: CpuBackend) -> None:
    assert cpu.xp is cpu_namespace  # numpy's, with three elementwise ops threaded
    assert cpu.xp.empty is np.empty and cpu.xp.float32 is np.float32 and cpu.xp.linalg is np.linalg
    assert cpu.kernels is CPU_KERNELS
    assert all(callable(getattr(cpu.kernels, f.name)) for f in fields(Kernels))


def test_allocation_lands_in_the_namespace_with_the_asked_dtype(cpu: CpuBackend) -> None:
    bf16 = np.dtype(ml_dtypes.bfloat16)
    full = cpu.full((2, 3), 1.5, bf16)
    assert type(full) is np.ndarray and full.dtype == bf16 and full.shape == (2, 3)
    np.testing.assert_array_equal(full.astype(np.float32), np.full((2, 3), 1.5, np.float32))
    assert cpu.empty((4,), np.dtype(np.int8)).dtype == np.int8
    np.testing.assert_array_equal(cpu.arange(0, 6, 2, np.dtype(np.int64)), [0, 2, 4])
    host = np.arange(3.0)
    assert cpu.to_host(cpu.from_host(host)) is host  # the host is the device: no copy either way


def test_kernels_find_the_namespace_of_their_inputs() -> None:
    a = np.ones(3, dtype=ml_dtypes.bfloat16)
    assert array_namespace(a, np.ones(2), 3.0) is np


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
    cpu.set_num_threads(1)
    capped = cpu.get_num_threads()
    cpu.set_num_threads(before)  # put the pool back before asserting, so a failure leaks nothing
    assert (capped, cpu.get_num_threads()) == (1, before)
