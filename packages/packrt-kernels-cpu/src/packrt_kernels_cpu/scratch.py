"""Per-thread scratch memory for temporaries that die before the same thread asks again.

glibc may map a large block afresh on every allocation, and a fresh block per call then page-faults
in on every call; conv2d's columns and Winograd tiles reuse one buffer per thread instead.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

Array = Any
_F32 = np.dtype(np.float32)
_SCRATCH_MAX = 256 << 20  # bytes: a larger scratch request gets a fresh array, kept by no one
_scratch = threading.local()


def scratch_f32(shape: tuple[int, ...]) -> Array:
    """An uninitialised float32 array of ``shape`` over this thread's scratch buffer, which grows to
    the largest request up to 256 MiB and is then reused (see the module docstring for who may)."""
    size = math.prod(shape)
    if size * 4 > _SCRATCH_MAX:
        return np.empty(shape, _F32)
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None or buffer.size < size:
        buffer = _scratch.buffer = np.empty(size, _F32)
    return buffer[:size].reshape(shape)


__all__ = ["scratch_f32"]
