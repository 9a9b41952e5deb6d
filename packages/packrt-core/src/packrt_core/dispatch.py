"""The one road to the kernels: a device's backend, its array namespace and its kernels.

Backends register under the entry-point group ``packrt.backends`` (``cpu`` from
packrt-kernels-cpu, always; ``cuda`` from packrt-kernels-cuda when installed). Everything
that computes asks :func:`backend_for` for its tensors' device: Tensor arithmetic calls the
backend's array namespace (``backend.xp``), ``nn.functional`` and the layers call its
``backend.kernels``. No module under ``packrt_core.nn`` imports a kernels package, and none
branches on the device type, so a layer on a CUDA tensor runs cupy code by construction. A
test swaps in a recording backend with :func:`use_backend`.

What a backend is (:class:`DeviceBackend`) and what its kernels are (``Kernels``) is the
contract in packrt-base, which every backend implements; this module is the one file of
packrt-core that names a kernels package, and only to register the CPU backend when no
installed metadata does (:func:`get_backend`).

Kernels raise the three ``Kernel*Error`` classes; :func:`kernel_errors` turns each into
packrt's error of the same kind (one to one), prefixed with the function that called it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from packrt_base.backend import DeviceBackend
from packrt_base.errors import KernelDTypeError, KernelError, KernelIndexError, KernelShapeError
from packrt_base.kernels import Kernels
from packrt_core.device import Device
from packrt_core.errors import DeviceUnavailableError, DTypeError, IndexingError, PackrtError, ShapeError

Backend = DeviceBackend

_backends: dict[str, DeviceBackend] = {}
_ready: dict[Device, DeviceBackend] = {}  # devices already checked for availability and ordinal
# Each kernel error becomes packrt's error of the same kind: one to one, nothing rewritten.
_KERNEL_ERRORS: tuple[tuple[type[KernelError], type[PackrtError]], ...] = (
    (KernelShapeError, ShapeError),
    (KernelDTypeError, DTypeError),
    (KernelIndexError, IndexingError),
)


def packrt_error(err: KernelError, fn: str) -> PackrtError:
    """packrt's error of the same kind as the kernel's ``err``, its message prefixed with ``fn``
    (the public function or layer that called the kernel); raise it ``from err``."""
    message = str(err)
    message = message if message.startswith(f"{fn}:") else f"{fn}: {message}"
    for kernel_type, packrt_type in _KERNEL_ERRORS:
        if isinstance(err, kernel_type):
            return packrt_type(message)
    return PackrtError(message)


@contextmanager
def kernel_errors(fn: str) -> Iterator[None]:
    """Inside the block, a kernel's error leaves as :func:`packrt_error` makes it."""
    try:
        yield
    except KernelError as err:
        raise packrt_error(err, fn) from err


def _discover(device_type: str) -> DeviceBackend | None:
    # Imported here, on the first device's lookup: importlib.metadata is a tenth of `import packrt`'s CPU time.
    from importlib.metadata import entry_points

    for ep in entry_points(group="packrt.backends"):
        if ep.name == device_type:
            backend: DeviceBackend = ep.load()()
            return backend
    if device_type == "cpu":  # running from a source tree without installed metadata: register it here
        from packrt_kernels_cpu import CpuBackend

        return CpuBackend()
    return None


def get_backend(device_type: str) -> DeviceBackend | None:
    """The backend registered for ``device_type``, loading it on first use; None if none is installed."""
    backend = _backends.get(device_type)
    if backend is None:
        backend = _discover(device_type)
        if backend is not None:
            _backends[device_type] = backend
    return backend


def backend_for(device: Device) -> DeviceBackend:
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


def loaded_backends() -> list[DeviceBackend]:
    """Every backend loaded so far (``manual_seed`` seeds each of them)."""
    return list(_backends.values())


def register_backend(device_type: str, backend: DeviceBackend) -> DeviceBackend | None:
    """Serve ``device_type`` with ``backend`` from now on; returns the one it replaces."""
    previous = _backends.get(device_type)
    _backends[device_type] = backend
    _ready.clear()
    return previous


@contextmanager
def use_backend(device_type: str, backend: DeviceBackend) -> Iterator[DeviceBackend]:
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


def kernels_for(device: Device) -> Kernels:
    """The kernels that serve ``device`` (what ``nn.functional`` and the layers call)."""
    return backend_for(device).kernels


__all__ = [
    "Backend",
    "DeviceBackend",
    "KernelError",
    "backend_for",
    "get_backend",
    "kernel_errors",
    "kernels_for",
    "loaded_backends",
    "packrt_error",
    "register_backend",
    "use_backend",
]
