"""The CUDA backend's promises that hold with or without a GPU."""

from importlib.metadata import entry_points

import pytest

from packrt_kernels_cuda import CudaBackend


def test_backend_registers_under_packrt_backends_as_cuda() -> None:
    found = {ep.name: ep for ep in entry_points(group="packrt.backends")}
    assert "cuda" in found
    assert found["cuda"].load() is CudaBackend


def test_unavailable_backend_reports_zero_devices_and_says_why() -> None:
    backend = CudaBackend()
    if backend.is_available():
        pytest.skip("a CUDA device answered; this checks the no-GPU path")
    assert backend.device_count() == 0
    assert "cupy" in backend.unavailable_reason()


def test_available_backend_round_trips_an_array_through_the_device() -> None:
    backend = CudaBackend()
    if not backend.is_available():
        pytest.skip(f"no CUDA device: {backend.unavailable_reason()}")
    import numpy as np

    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    on_device = backend.from_host(host, 0)
    doubled = backend.xp.add(on_device, on_device)
    np.testing.assert_array_equal(backend.to_host(doubled), host * 2)
