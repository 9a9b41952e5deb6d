"""Find the kernel backend for a device.

Backends register under the entry-point group ``packrt.backends`` (``cpu`` from
packrt-kernels-cpu, always; ``cuda`` from packrt-kernels-cuda when installed). Every tensor
operation asks :func:`backend_for` for its device's backend and calls the kernels there,
so a test can swap in a recording backend with :func:`register_backend`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import Any

from packrt_core.device import Device
from packrt_core.errors import DeviceUnavailableError

Backend = Any  # structurally packrt_kernels_cpu.ArrayBackend; core never imports its type

_backends: dict[str, Backend] = {}
_ready: dict[Device, Backend] = {}  # devices already checked for availability and ordinal


def _discover(device_type: str) -> Backend | None:
    for ep in entry_points(group="packrt.backends"):
        if ep.name == device_type:
            return ep.load()()
    if device_type == "cpu":  # running from a source tree without installed metadata
        from packrt_kernels_cpu import CpuBackend

        return CpuBackend()
    return None


def get_backend(device_type: str) -> Backend | None:
    """The backend registered for ``device_type``, loading it on first use; None if none is installed."""
    backend = _backends.get(device_type)
    if backend is None:
        backend = _discover(device_type)
        if backend is not None:
            _backends[device_type] = backend
    return backend


def backend_for(device: Device) -> Backend:
    """The backend that serves ``device``, or DeviceUnavailableError saying what is missing."""
    backend = _ready.get(device)
    if backend is not None:
        return backend
    backend = get_backend(device.type)
    if backend is None:
        raise DeviceUnavailableError(
            f"no packrt backend serves {device}: install packrt-kernels-{device.type} "
            f"(pip install packrt[{device.type}])"
        )
    if not backend.is_available():
        raise DeviceUnavailableError(f"{device} is not available: {backend.unavailable_reason()}")
    index = device.index or 0
    count = backend.device_count()
    if index >= count:
        raise DeviceUnavailableError(f"{device} does not exist: {count} {device.type} device(s) present")
    _ready[device] = backend
    return backend


def loaded_backends() -> list[Backend]:
    """Every backend loaded so far (``manual_seed`` seeds each of them)."""
    return list(_backends.values())


def register_backend(device_type: str, backend: Backend) -> Backend | None:
    """Serve ``device_type`` with ``backend`` from now on; returns the one it replaces."""
    previous = _backends.get(device_type)
    _backends[device_type] = backend
    _ready.clear()
    return previous


@contextmanager
def use_backend(device_type: str, backend: Backend) -> Iterator[Backend]:
    """Serve ``device_type`` with ``backend`` inside the block, then restore the previous one."""
    get_backend(device_type)
    previous = register_backend(device_type, backend)
    try:
        yield backend
    finally:
        if previous is None:
            _backends.pop(device_type, None)
            _ready.clear()
        else:
            register_backend(device_type, previous)
