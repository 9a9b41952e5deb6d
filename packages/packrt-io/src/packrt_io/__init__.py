"""safetensors checkpoints for packrt: atomic save, validated zero-copy load.

- :func:`save_file` writes packrt Tensors or numpy arrays to one safetensors file, atomically.
- :func:`load_file` returns packrt Tensors; with ``mmap=True`` each is a copy-on-write view of the file.
- :func:`load_arrays` is the numpy level underneath, and returns a :class:`LoadReport` with the arrays.
- :func:`read_metadata` returns a file's ``__metadata__`` (str -> str).
- :func:`save_checkpoint` / :func:`load_checkpoint` move a module's whole state (ties, extra state,
  metadata) to and from one file or Hugging Face style shards with an index; :func:`guarding` gives a
  module loaded from mapped files the check of those files before each call that ``load_checkpoint`` gives.
- :func:`inspect_checkpoint` reads a checkpoint's layout from its headers alone; :func:`check_checkpoint`
  compares it with a module's keys, shapes and dtypes without reading tensor data.
- :func:`gguf_architecture` reads a GGUF file's ``general.architecture`` from the start of its header only;
  :func:`open_gguf` reads a GGUF file (llama.cpp's format; the ``gguf`` extra): metadata, layout, and
  each tensor as a view of the file (F32/F16/BF16), dequantised to float32, or as its quantised blocks.

:func:`json_depth` measures how deep a JSON text nests before any parser recurses into it (the scan every
header, index and metadata value is held to, and ``packrt serve``'s request bodies).

Every malformed file raises :class:`packrt_core.errors.CheckpointError` naming the file and tensor.
No load path unpickles anything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from packrt_core.errors import DeviceError
from packrt_io._arrays import SupportsNumpy, as_array
from packrt_io._check import CheckReport, Mismatch, check_checkpoint
from packrt_io._checkpoint import (
    CheckpointModule,
    as_tensors,
    guarding,
    load_checkpoint,
    load_checkpoint_arrays,
    mapped_files,
    save_checkpoint,
)
from packrt_io._dtypes import SUPPORTED_NAMES
from packrt_io._fs import CheckpointWriteError
from packrt_io._gguf import DEQUANTISED_TYPES as GGUF_DEQUANTISED_TYPES
from packrt_io._gguf import STORED_TYPES as GGUF_STORED_TYPES
from packrt_io._gguf import GGUFFile, GGUFTensor, gguf_architecture, is_gguf, named_gguf, open_gguf
from packrt_io._guard import MappedFile
from packrt_io._json import json_depth
from packrt_io._layout import CheckpointInfo, CheckpointLeftoverWarning, TensorInfo, inspect_checkpoint
from packrt_io._reader import LoadReport, load_arrays, read_metadata
from packrt_io._sharding import parse_size
from packrt_io._writer import save_arrays

if TYPE_CHECKING:
    from packrt_core import Tensor


def save_file(
    tensors: Mapping[str, SupportsNumpy | np.ndarray[Any, Any]],
    path: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Save ``tensors`` to ``path`` as a safetensors file, atomically, with optional str metadata.

    Values are packrt Tensors or numpy arrays of a supported dtype (see ``SUPPORTED_DTYPES``); they
    are written bit-exactly. After the call either the complete new file is at ``path`` or, if it
    failed or the process died, the previous file there is unchanged.
    """
    arrays = {key: as_array(key, value) for key, value in tensors.items()}
    save_arrays(arrays, path, metadata)


def _check_device(device: object) -> None:
    if str(device) != "cpu":
        raise DeviceError(
            f"load_file places tensors on 'cpu' only, got device {device!r}; load on cpu, then move "
            "the tensors with .to(device)"
        )


def load_file(path: str | os.PathLike[str], device: object = "cpu", mmap: bool = True) -> dict[str, Tensor]:
    """Load every tensor of a safetensors file as a packrt Tensor, keyed as in the file.

    With ``mmap=True`` (the default) each Tensor's storage is a copy-on-write view of the mapped file:
    loading reads nothing up front, and writing to a Tensor never changes the file. ``mmap=False``
    reads each tensor into fresh memory. The file is fully validated first; a malformed one raises
    :class:`~packrt_core.errors.CheckpointError` naming the file and tensor.
    """
    _check_device(device)
    arrays, report = load_arrays(path, mmap=mmap)
    return as_tensors(report.path, arrays)


SUPPORTED_DTYPES: tuple[str, ...] = SUPPORTED_NAMES

__all__ = [
    "SUPPORTED_DTYPES",
    "CheckReport",
    "CheckpointInfo",
    "CheckpointLeftoverWarning",
    "CheckpointWriteError",
    "CheckpointModule",
    "GGUF_DEQUANTISED_TYPES",
    "GGUF_STORED_TYPES",
    "GGUFFile",
    "GGUFTensor",
    "LoadReport",
    "MappedFile",
    "Mismatch",
    "SupportsNumpy",
    "TensorInfo",
    "check_checkpoint",
    "guarding",
    "inspect_checkpoint",
    "gguf_architecture",
    "is_gguf",
    "named_gguf",
    "json_depth",
    "load_arrays",
    "load_checkpoint",
    "load_checkpoint_arrays",
    "load_file",
    "mapped_files",
    "open_gguf",
    "parse_size",
    "read_metadata",
    "save_arrays",
    "save_checkpoint",
    "save_file",
]
