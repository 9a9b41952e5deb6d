"""``packrt.cuda``: whether CUDA tensors can be made here."""

from __future__ import annotations

from packrt_core import dispatch


def is_available() -> bool:
    """True when packrt-kernels-cuda is installed, cupy imports and a GPU answers."""
    backend = dispatch.get_backend("cuda")
    return bool(backend is not None and backend.is_available())


def device_count() -> int:
    """How many CUDA devices packrt can reach (0 without the backend, cupy or a GPU)."""
    backend = dispatch.get_backend("cuda")
    return int(backend.device_count()) if backend is not None and backend.is_available() else 0
