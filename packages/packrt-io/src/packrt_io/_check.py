"""Comparing a checkpoint with a module from headers alone: ``packrt check`` without reading data.

The module is only asked for its ``state_dict(keep_vars=True)`` keys, shapes and dtypes, which a model
declared under ``packrt.meta_init()`` has without any storage, so checking a large checkpoint against a
large model costs neither the checkpoint's bytes nor the model's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from packrt_io._checkpoint import CheckpointModule, _is_extra_state, _named_tensors
from packrt_io._dtypes import for_array_dtype
from packrt_io._layout import CheckpointInfo, PathLike, TensorInfo, inspect_checkpoint


@dataclass(frozen=True)
class Mismatch:
    """A key both sides hold with a different shape or dtype (dtypes as safetensors names)."""

    key: str
    model_dtype: str
    model_shape: tuple[int, ...]
    file_dtype: str
    file_shape: tuple[int, ...]

    def describe(self) -> str:
        """One line: what the model declares against what the checkpoint holds."""
        return (
            f"{self.key}: model {self.model_dtype} {list(self.model_shape)}, "
            f"checkpoint {self.file_dtype} {list(self.file_shape)}"
        )


@dataclass(frozen=True)
class CheckReport:
    """Keys the module needs but the checkpoint lacks, keys it would not take, and misfits."""

    info: CheckpointInfo
    missing_keys: tuple[str, ...]
    unexpected_keys: tuple[str, ...]
    mismatched: tuple[Mismatch, ...]

    @property
    def matches(self) -> bool:
        """True when a strict load would find every key, take every key, and fit every tensor."""
        return not (self.missing_keys or self.unexpected_keys or self.mismatched)


def dtype_name(dtype: Any) -> str:
    """The safetensors name of a packrt or numpy dtype (``F32``), or its own name when it has none."""
    resolved = getattr(dtype, "numpy", dtype)
    try:
        entry = for_array_dtype(np.dtype(resolved))
    except TypeError:
        entry = None
    return entry.name if entry is not None else str(getattr(dtype, "name", dtype))


def _checkpoint_keys(info: CheckpointInfo) -> dict[str, TensorInfo | None]:
    keys: dict[str, TensorInfo | None] = dict(info.tensors)
    for alias, primary in info.ties().items():
        keys[alias] = info.tensors[primary]
    keys.update(dict.fromkeys(info.extra_state()))
    return keys


def check_checkpoint(module: CheckpointModule, path: PathLike) -> CheckReport:
    """Compare the checkpoint at ``path`` with ``module``'s state keys, shapes and dtypes.

    Reads headers only. A key naming a second name of a tensor the module ties is accepted, as a load
    accepts it. Malformed files raise CheckpointError as a load would.
    """
    info = inspect_checkpoint(path)
    found = _checkpoint_keys(info)
    state = module.state_dict(keep_vars=True)
    ids = {id(value) for value in state.values()}
    aliases = {name for name, tensor in _named_tensors(module) if name not in state and id(tensor) in ids}
    missing = tuple(key for key in state if key not in found)
    unexpected = tuple(sorted(key for key in found if key not in state and key not in aliases))
    mismatched: list[Mismatch] = []
    for key, value in state.items():
        held = found.get(key)
        if held is None or _is_extra_state(key):
            continue
        shape = tuple(int(dim) for dim in value.shape)
        declared = dtype_name(value.dtype)
        if shape != held.shape or declared != held.dtype:
            mismatched.append(Mismatch(key, declared, shape, held.dtype, held.shape))
    return CheckReport(info, missing, unexpected, tuple(mismatched))


__all__ = ["CheckReport", "Mismatch", "check_checkpoint", "dtype_name"]
