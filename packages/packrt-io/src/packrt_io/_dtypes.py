"""The safetensors dtype names packrt reads and writes, and the numpy dtype each one maps to.

Every entry holds its values bit-exactly in numpy (the 16- and 8-bit floats through ml_dtypes), so a
load is a view of the file's bytes and a save writes the array's own bytes. A name that is not in the
table (``C64``, ``F8_E8M0``, a typo) is refused by name rather than guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class FileDType:
    """One safetensors dtype: its name in the header and its numpy dtype (whose ``name`` the library's
    writer takes)."""

    name: str
    numpy: np.dtype[np.generic]

    @property
    def itemsize(self) -> int:
        """Bytes per element (also the alignment a zero-copy view needs)."""
        return int(self.numpy.itemsize)


def _entry(name: str, dtype: type[np.generic] | np.dtype[np.generic]) -> FileDType:
    # Integers and IEEE floats are stored little-endian; ml_dtypes types have no byte order to pin.
    resolved = np.dtype(dtype)
    if resolved.byteorder in ("=", ">"):
        resolved = resolved.newbyteorder("<")
    return FileDType(name, resolved)


# In the library's dtype order (smallest first).
_TABLE: Final[tuple[FileDType, ...]] = (
    _entry("BOOL", np.bool_),
    _entry("U8", np.uint8),
    _entry("I8", np.int8),
    _entry("F8_E5M2", ml_dtypes.float8_e5m2),
    _entry("F8_E4M3", ml_dtypes.float8_e4m3fn),
    _entry("I16", np.int16),
    _entry("U16", np.uint16),
    _entry("F16", np.float16),
    _entry("BF16", ml_dtypes.bfloat16),
    _entry("I32", np.int32),
    _entry("U32", np.uint32),
    _entry("F32", np.float32),
    _entry("F64", np.float64),
    _entry("I64", np.int64),
    _entry("U64", np.uint64),
)

BY_NAME: Final[dict[str, FileDType]] = {entry.name: entry for entry in _TABLE}
SUPPORTED_NAMES: Final[tuple[str, ...]] = tuple(entry.name for entry in _TABLE)


def for_array_dtype(dtype: np.dtype[np.generic]) -> FileDType | None:
    """The file dtype that stores ``dtype`` bit-exactly (either byte order), or None when there is none."""
    if dtype.byteorder == ">":
        dtype = dtype.newbyteorder("<")
    # Compare whole dtypes: ml_dtypes has look-alikes (float8_e5m2fnuz is also a 1-byte float) that a
    # kind/itemsize test would confuse with the supported ones.
    for entry in _TABLE:
        if entry.numpy == dtype:
            return entry
    return None


__all__ = ["BY_NAME", "SUPPORTED_NAMES", "FileDType", "for_array_dtype"]
