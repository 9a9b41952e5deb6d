"""What a save accepts as a tensor: a numpy array, or anything with a zero-copy ``numpy()`` view."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from packrt_core.errors import CheckpointError


@runtime_checkable
class SupportsNumpy(Protocol):
    """Anything with a zero-copy ``numpy()`` view of its values, such as a packrt ``Tensor``."""

    def numpy(self) -> np.ndarray[Any, Any]:
        """The values as a numpy array that shares memory with the object (no copy)."""


def as_array(key: str, value: object) -> np.ndarray[Any, Any]:
    """The numpy array behind ``value`` (saved under ``key``), or a CheckpointError naming the key."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, SupportsNumpy):
        array = value.numpy()
        if isinstance(array, np.ndarray):
            return array
    raise CheckpointError(
        f"tensor {key!r} is a {type(value).__name__}; save_file takes packrt Tensors or numpy arrays "
        "(convert it with packrt.from_numpy or numpy.asarray first)"
    )


__all__ = ["SupportsNumpy", "as_array"]
