"""Weight-only int8 quantization: symmetric, one scale per output channel (row of the weight).

``q = round(w / scale)`` in [-127, 127] with ``scale = max|w_row| / 127`` (float32), so every
weight is recovered within half a step: ``|w - q * scale| <= scale / 2`` (-128 is never used,
which keeps the range symmetric and negation exact). A row of zeros gets scale 1 and q 0, so
nothing ever divides by zero.

``PackedQuantizedLinear`` keeps the int8 matrix resident (1 byte per weight, a quarter of
float32). A float32, float16 or bfloat16 input takes the int8 road (:mod:`packrt_kernels_cpu.int8`):
each row of activations is quantized onto uint8 at run time (dynamic quantization, as ONNX
Runtime's and PyTorch's dynamic int8 linears do), multiplied by the int8 weight into int32, and
turned back into float32 with the row's scale, the channel's scale and the bias in one pass.
float64 inputs, and arrays that are not numpy's (cupy's, whose kernels live in packrt-kernels-cuda),
keep activations in floating point: ``x @ (q * s)^T == (x @ q^T) * s``, the int8 rows converted
block by block so the scratch never exceeds ``scratch_bytes``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt_base.arrays import (
    FLOAT32,
    FLOAT64,
    Array,
    array_namespace,
    compute_dtype,
    require_float,
    require_ndim,
    require_shape,
)
from packrt_kernels_cpu import int8, vnni
from packrt_kernels_cpu.errors import KernelDTypeError, KernelShapeError
from packrt_kernels_cpu.namespace import astype

QMAX = 127
DEFAULT_SCRATCH_BYTES = 4 << 20  # per-forward ceiling for the converted int8 rows
_INT8 = np.dtype(np.int8)


def quantize_per_channel(w: Array) -> tuple[Array, Array]:
    """(q int8 of w's shape, scale float32 of shape (w.shape[0],)) for a float weight of rank >= 2.

    Rows are axis 0 (a linear's out_features, a conv's out_channels); the max runs over the
    rest. Raises ValueError when ``w`` holds NaN or infinity (no scale can represent them).
    """
    require_float(w, "weight")
    require_ndim(w, (2, 3, 4, 5), "weight", "(out, ...)")
    xp = array_namespace(w)
    w64 = w.astype(FLOAT64)
    finite = xp.isfinite(w64)
    if not bool(xp.all(finite)):
        bad = int(xp.argwhere(~finite)[0][0])
        raise KernelShapeError(
            f"weight has {int(xp.sum(~finite))} non-finite values (first in row {bad}); "
            f"int8 quantization needs finite weights"
        )
    reduce_axes = tuple(range(1, w.ndim))
    amax = xp.max(xp.abs(w64), axis=reduce_axes) if w.size else xp.zeros(w.shape[0])
    scale = (amax / QMAX).astype(FLOAT32)
    # Zero rows (and rows so small that amax/127 underflows float32) get scale 1: q is 0 there.
    scale = xp.where(scale > 0, scale, FLOAT32.type(1.0))
    # Rounding amax/127 to float32 can land so far below it (in the subnormal range) that the
    # row's largest weight would clip by more than half a step: step such scales up until not.
    short = scale.astype(FLOAT64) * (QMAX + 0.5) < amax
    while bool(xp.any(short)):
        scale = xp.where(short, xp.nextafter(scale, FLOAT32.type(xp.inf)), scale)
        short = scale.astype(FLOAT64) * (QMAX + 0.5) < amax
    per_row = scale.astype(FLOAT64).reshape((-1,) + (1,) * len(reduce_axes))
    q = xp.clip(xp.rint(w64 / per_row), -QMAX, QMAX).astype(_INT8)
    return q, scale


def _check_q_scale(q: Array, scale: Array) -> None:
    if np.dtype(q.dtype) != _INT8:
        raise KernelDTypeError(f"q must be int8, got {np.dtype(q.dtype).name}")
    if np.dtype(scale.dtype) != FLOAT32:
        raise KernelDTypeError(f"scale must be float32, got {np.dtype(scale.dtype).name}")
    if q.ndim < 1:
        raise KernelShapeError(f"q must have at least one dim (rows first), got shape {tuple(q.shape)}")
    require_shape(scale, (q.shape[0],), "scale")


def dequantize(q: Array, scale: Array) -> Array:
    """``q * scale`` per row, as float32 of q's shape."""
    _check_q_scale(q, scale)
    return q.astype(FLOAT32) * scale.reshape((-1,) + (1,) * (q.ndim - 1))


class PackedQuantizedLinear:
    """An int8 (out, in) weight with per-row float32 scales and an optional float bias.

    The int8 road also needs the weight's row sums (int32, 4 bytes per output) and the bias as
    float32, and on the VNNI road (:func:`packrt_kernels_cpu.int8.uses_vnni`) the weight repacked into
    panels (about the int8 weight's size again): all derived once, at the first such forward, and
    kept beside the pack; :attr:`nbytes` counts the panels once they exist."""

    def __init__(self, q: Array, scale: Array, b: Array | None, scratch_bytes: int, *, repacks: bool = True) -> None:
        self.repacks = repacks  # may derive VNNI panels (a copy): owned packs, not borrowed views
        self.q = q
        self.scale = scale
        self.b = b
        self.out_features, self.in_features = (int(s) for s in q.shape)
        self.scratch_bytes = scratch_bytes
        self._int8: tuple[Array, Array | None, Any] | None = None  # (row sums, float32 bias, VNNI panels)

    def block_rows(self, dtype: np.dtype[Any]) -> int:
        """Rows of q converted at a time so the converted block fits ``scratch_bytes``."""
        per_row = max(1, self.in_features * np.dtype(dtype).itemsize)
        return max(1, min(self.out_features, self.scratch_bytes // per_row))

    def forward(self, x: Array) -> Array:
        """``(x @ q^T) * scale + b`` for float ``x`` (..., in_features), returned in x's dtype: through
        int8 activations for float32/float16/bfloat16 numpy inputs, in floating point otherwise."""
        dt = np.dtype(x.dtype)
        if dt != FLOAT64 and type(x) is np.ndarray and type(self.q) is np.ndarray:
            return self._forward_int8(x, dt)
        xp = array_namespace(x)
        cd = compute_dtype(dt)
        lead = tuple(x.shape[:-1])
        x2 = astype(x, cd).reshape(-1, self.in_features)
        out = xp.empty((x2.shape[0], self.out_features), dtype=cd)
        step = self.block_rows(cd)
        for r0 in range(0, self.out_features, step):
            r1 = min(r0 + step, self.out_features)
            out[:, r0:r1] = x2 @ self.q[r0:r1].astype(cd).T
        out *= astype(self.scale, cd)
        if self.b is not None:
            out += astype(self.b, cd)
        return astype(out.reshape((*lead, self.out_features)), dt)

    def int8_operands(self) -> tuple[Array, Array | None, Any]:
        """(the weight's int32 row sums, the float32 bias or None, the VNNI panels or None) for
        :func:`packrt_kernels_cpu.int8.linear`, made on the first call and kept."""
        operands = self._int8
        if operands is None:
            bias = None if self.b is None else np.ascontiguousarray(astype(self.b, FLOAT32))
            q = np.ascontiguousarray(self.q)
            panels = vnni.pack(q) if self.repacks and int8.uses_vnni() else None
            operands = self._int8 = (int8.weight_sums(q), bias, panels)
        return operands

    def _forward_int8(self, x: Array, dt: np.dtype[Any]) -> Array:
        sums, bias, panels = self.int8_operands()
        lead = tuple(x.shape[:-1])
        x2 = np.ascontiguousarray(astype(x, FLOAT32).reshape(-1, self.in_features))
        out = int8.linear(x2, np.ascontiguousarray(self.q), self.scale, sums, bias, panels=panels)
        return astype(out.reshape((*lead, self.out_features)), dt)

    @property
    def nbytes(self) -> int:
        """Bytes kept resident: int8 weight, float32 scales, bias, and the VNNI panels once made. Scratch
        is per call, not counted."""
        panels = self._int8[2] if self._int8 is not None and self._int8[2] is not None else None
        extra = 0 if panels is None else int(panels.nbytes)
        return int(self.q.nbytes) + int(self.scale.nbytes) + (0 if self.b is None else int(self.b.nbytes)) + extra

    def unpack(self) -> tuple[Array, Array, Array | None]:
        """(q, scale, bias) exactly as packed, as new arrays."""
        return self.q.copy(), self.scale.copy(), None if self.b is None else self.b.copy()


def borrow_quantized_linear(
    q: Array, scale: Array, b: Array | None = None, scratch_bytes: int = DEFAULT_SCRATCH_BYTES
) -> PackedQuantizedLinear:
    """Serve straight from the declared int8 weight, scales and bias, copying nothing (so not repacked
    for the VNNI road: a borrowed int8 layer multiplies on the float32-chunk or MKL road)."""
    return PackedQuantizedLinear(q, scale, b, scratch_bytes, repacks=False)


def pack_quantized_linear(
    q: Array, scale: Array, b: Array | None = None, scratch_bytes: int = DEFAULT_SCRATCH_BYTES
) -> PackedQuantizedLinear:
    """Pack ``quantize_per_channel``'s output for a linear layer (q (out, in), scale (out,), bias (out,)).

    Raises TypeError for a q that is not int8 or a scale that is not float32, ValueError for
    shapes that disagree or a scale that is not finite and positive.
    """
    _check_q_scale(q, scale)
    require_ndim(q, 2, "q", "(out_features, in_features)")
    xp = array_namespace(q, scale)
    if not bool(xp.all(xp.isfinite(scale) & (scale > 0))):
        raise KernelShapeError("scale must be finite and > 0 in every row (quantize_per_channel never yields 0)")
    if b is not None:
        require_float(b, "bias")
        require_shape(b, (q.shape[0],), "bias")
    if scratch_bytes < 1:
        raise KernelShapeError(f"scratch_bytes must be >= 1, got {scratch_bytes}")
    owned_b = None if b is None else xp.ascontiguousarray(b.copy())
    return PackedQuantizedLinear(xp.ascontiguousarray(q.copy()), scale.copy(), owned_b, scratch_bytes)
