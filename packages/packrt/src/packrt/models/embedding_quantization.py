"""Embeddings quantized the way sentence-transformers' ``encode(precision=...)`` quantizes them.

- ``int8`` / ``uint8``: each dimension's range (its minimum and maximum over the embeddings being
  quantized, so at least two are needed) is cut into 255 equal steps; a value becomes the index of its
  step, clipped to 0..255, less 128 for ``int8``.
- ``binary`` / ``ubinary``: one bit per dimension, set where the value is positive, packed eight to a
  byte (the width becomes ceil(dimension / 8)); ``binary`` stores each byte less 128 as int8.

Variable-length token embeddings (a list of (tokens, dimension) matrices) share one set of ranges,
computed over all their rows. Nothing here depends on torch or sentence-transformers.
"""

from __future__ import annotations

from typing import Literal, overload

import numpy as np

from packrt.errors import PackrtError

Precision = Literal["float32", "int8", "uint8", "binary", "ubinary"]
PRECISIONS: tuple[Precision, ...] = ("float32", "int8", "uint8", "binary", "ubinary")


class PrecisionError(PackrtError, ValueError):
    """A precision sentence-transformers does not define, or int8 ranges asked of fewer than two embeddings."""


def _ranges(rows: np.ndarray, precision: str) -> np.ndarray:
    """(2, dimension): each dimension's minimum and maximum over ``rows``."""
    if rows.ndim != 2 or rows.shape[0] < 2:
        raise PrecisionError(
            f"precision={precision!r} takes each dimension's range from the embeddings quantized together, and one "
            "embedding has none; encode two or more texts in the call, or quantize with precision='float32' first"
        )
    return np.vstack((rows.min(axis=0), rows.max(axis=0))).astype(np.float32)


def _quantize(values: np.ndarray, precision: Precision, ranges: np.ndarray | None) -> np.ndarray:
    if precision == "float32":
        return values.astype(np.float32)
    if precision in ("binary", "ubinary"):
        packed: np.ndarray = np.packbits(values > 0, axis=-1)
        return (packed.astype(np.int16) - 128).astype(np.int8) if precision == "binary" else packed
    assert ranges is not None
    starts = ranges[0]
    steps = (ranges[1] - starts) / 255
    steps = np.where(steps == 0, 1, steps)  # a constant dimension: every value in its first step
    index: np.ndarray = np.clip(np.floor((values - starts) / steps), 0, 255)
    return (index - 128).astype(np.int8) if precision == "int8" else index.astype(np.uint8)


@overload
def quantize_embeddings(embeddings: np.ndarray, precision: Precision) -> np.ndarray: ...
@overload
def quantize_embeddings(embeddings: list[np.ndarray], precision: Precision) -> list[np.ndarray]: ...
def quantize_embeddings(
    embeddings: np.ndarray | list[np.ndarray], precision: Precision
) -> np.ndarray | list[np.ndarray]:
    """``embeddings`` (an (n, dimension) float array, or a list of (tokens, dimension) ones) at ``precision``
    (see the module docstring); an unknown precision is a :class:`PrecisionError` (a ``ValueError``)."""
    if precision not in PRECISIONS:
        raise PrecisionError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    wants_ranges = precision in ("int8", "uint8")
    if isinstance(embeddings, list):
        if not embeddings:
            return []
        shared = _ranges(np.concatenate(embeddings, axis=0), precision) if wants_ranges else None
        return [_quantize(matrix, precision, shared) for matrix in embeddings]
    if embeddings.ndim == 2 and embeddings.shape[0] == 0 and precision != "float32":
        width = embeddings.shape[1] if wants_ranges else (embeddings.shape[1] + 7) // 8
        return np.zeros((0, width), dtype=np.uint8 if precision in ("uint8", "ubinary") else np.int8)
    return _quantize(embeddings, precision, _ranges(embeddings, precision) if wants_ranges else None)


__all__ = ["PRECISIONS", "Precision", "PrecisionError", "quantize_embeddings"]
