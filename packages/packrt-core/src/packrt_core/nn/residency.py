"""Weight residency: how a layer keeps its weights between forwards, and the one rule that turns
``auto`` into a mode.

- ``packed``: one owned pack of the weights is kept; the raw storage is dropped.
- ``borrowed``: a zero-copy view over the bound tensors serves each call, so a memory-mapped
  checkpoint stays the only copy and writes through its handle are seen.
- ``auto``: ``packed`` when the pack fits the free memory of the weights' device, else
  ``borrowed`` (:func:`resolve`).
- ``per_call``: nothing kept between calls; for float32 weights it computes like ``borrowed``.

The names and their check live here only: :class:`~packrt_core.nn.packed.PackedLayer`,
``load_state_dict`` and the model loaders all ask :func:`check_residency`. This module knows no
layer, so the state-dict code below the layers can import it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from packrt_core import dispatch
from packrt_core.device import CPU, Device
from packrt_core.errors import ResidencyError

WEIGHT_RESIDENCIES = ("packed", "borrowed", "auto", "per_call")

_free_override: list[int] = []


def check_residency(residency: str | None, where: str) -> None:
    """ResidencyError naming ``where`` and the choices unless ``residency`` is one of
    :data:`WEIGHT_RESIDENCIES` or None (None keeps each layer's own default)."""
    if residency is not None and residency not in WEIGHT_RESIDENCIES:
        raise ResidencyError(
            f"{where}: unknown weight_residency {residency!r}: expected one of {', '.join(WEIGHT_RESIDENCIES)} or None"
        )


def resolve(residency: str, pack_nbytes: int, device: Device) -> str:
    """The mode a layer serves from: ``auto`` becomes ``packed`` when a pack of ``pack_nbytes``
    fits the free memory of ``device``, else ``borrowed``; every other residency is its own mode."""
    if residency != "auto":
        return residency
    return "packed" if pack_nbytes <= free_memory(device) else "borrowed"


def free_memory(device: Device = CPU) -> int:
    """Bytes free on ``device`` as its backend reports them (host memory available on the CPU,
    the GPU's free memory on CUDA), or the override tests set (``PACKRT_FREE_MEMORY_BYTES``
    overrides every device)."""
    if _free_override:
        return _free_override[-1]
    env = os.environ.get("PACKRT_FREE_MEMORY_BYTES")
    if env:
        return int(env)
    return int(dispatch.backend_for(device).free_memory(device.index or 0))


@contextmanager
def free_memory_override(nbytes: int) -> Iterator[None]:
    """Make ``auto`` residency see ``nbytes`` of free memory inside the block."""
    _free_override.append(int(nbytes))
    try:
        yield
    finally:
        _free_override.pop()


__all__ = ["WEIGHT_RESIDENCIES", "check_residency", "free_memory", "free_memory_override", "resolve"]
