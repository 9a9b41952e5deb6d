"""Packed weights: the serving form a layer's bound object owns, built once, read by every forward.

Layouts (what the pack holds, and why):

- ``PackedLinear``: ``W^T`` as a contiguous (in, out) array, so a forward is ``x @ Wt`` in
  one GEMM (bias included) with no per-call copy or conversion. A bfloat16 weight stays
  bfloat16 where the BLAS multiplies it (MKL, ``blas.multiplies``): the pack is the declared
  bytes. Other half weights are upcast to float32 here, once: the pack is then twice the
  declared bytes, but each call saves converting the whole weight.
- ``PanelLinear``: a float32 weight whose width is a multiple of 32, on a CPU with AVX-512 and
  numpy's BLAS road, as :mod:`.float_tiles`' panels of 32 output columns: its tiles read each panel as
  one stream and beat OpenBLAS, which packs the weight again on every call (the module docstring there).
  A bfloat16 weight of whole panels and an even input count, on a CPU with AVX512-BF16, is kept as
  bfloat16 panels: the pack is the declared bytes, and ``vdpbf16ps`` multiplies it with the activations
  rounded to bfloat16 (twice float32's products per instruction), as torch multiplies bfloat16 linears.
- ``PackedConv2d``: the weight reshaped to (groups, out/groups, in/groups * kh * kw), the
  im2col-ready matrix per group, in the compute dtype, with the geometry validated once.
- ``PackedEmbedding``: the table itself, contiguous, in its declared dtype. A gather does no
  arithmetic, so an upcast would only double the bytes and add a down-cast per call.

Every pack's ``unpack()`` rebuilds the declared weight (dtype and shape) bit for bit: the
half-to-float32 upcast is exact, so rounding back reproduces the original values.
``linear_borrowed`` is the no-pack alternative: it computes from the declared weight each
call (no extra resident bytes; half weights pay a conversion per call).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt_base.arrays import Array, array_namespace, check_linear_args, compute_dtype, require_float, require_ndim
from packrt_base.geometry import Conv2dGeometry
from packrt_base.kernels import LinearKernel
from packrt_kernels_cpu import blas, float_tiles, fused
from packrt_kernels_cpu.conv import check_conv2d_weight, conv2d, convolve
from packrt_kernels_cpu.errors import KernelShapeError
from packrt_kernels_cpu.functional import embedding, gemm_rows, linear
from packrt_kernels_cpu.namespace import astype


def _owned(a: Array, dtype: np.dtype[Any]) -> Array:
    """A contiguous array in ``dtype`` that shares no memory with ``a`` (the pack owns its bytes)."""
    xp = array_namespace(a)
    return xp.array(a, dtype=dtype, order="C", copy=True)  # one copy, whatever the layout of ``a``


class PackedLinear:
    """A linear layer's weight (and bias) as a contiguous (in, out) matrix in the compute dtype."""

    def __init__(self, wt: Array, b: Array | None, dtype: np.dtype[Any]) -> None:
        self.wt = wt
        self.b = b
        self.dtype = dtype
        self.in_features, self.out_features = (int(s) for s in wt.shape)

    def forward(self, x: Array) -> Array:
        """``x @ W^T + b`` for ``x`` (..., in_features) of the declared dtype; same result as ``linear``."""
        wt = self.wt  # the dtype checks inline: at batch 1 the GEMM is short, and every call of Python shows
        out = gemm_rows(x if x.dtype == wt.dtype else astype(x, wt.dtype), wt, self.b)
        return out if out.dtype == self.dtype else astype(out, self.dtype)

    @property
    def nbytes(self) -> int:
        """Bytes the pack keeps resident (weight plus bias)."""
        return int(self.wt.nbytes) + (0 if self.b is None else int(self.b.nbytes))

    def unpack(self) -> tuple[Array, Array | None]:
        """(weight (out, in), bias) in the declared dtype, new arrays equal bit for bit to those packed."""
        w = _owned(self.wt.T, self.dtype)
        return w, None if self.b is None else _owned(self.b, self.dtype)


class PanelLinear:
    """A float32 linear's weight as :class:`~packrt_kernels_cpu.float_tiles.FloatPanels` (what
    :func:`pack_linear` makes where :func:`float_tiles.packs`), and its bias."""

    def __init__(self, panels: float_tiles.FloatPanels, b: Array | None, dtype: np.dtype[Any]) -> None:
        self.panels, self.b, self.dtype = panels, b, dtype
        self.in_features, self.out_features = panels.in_features, panels.out_features

    def forward(self, x: Array) -> Array:
        """``x @ W^T + b`` for ``x`` (..., in_features) of the declared dtype; same result as ``linear``
        within the GEMMs' summation order."""
        if x.ndim < 1 or int(x.shape[-1]) != self.in_features:
            raise KernelShapeError(
                f"linear: input of shape {tuple(x.shape)} does not end in in_features={self.in_features}; "
                f"pass (..., {self.in_features})"
            )
        rows = x.reshape(-1, self.in_features)
        takes = rows.dtype == np.float32 or rows.dtype == self.panels.dtype  # bfloat16 panels take bfloat16 as it is
        out = float_tiles.gemm(rows if takes else astype(rows, np.float32), self.panels)
        if self.b is not None:
            out += self.b
        out = out.reshape((*x.shape[:-1], self.out_features))
        return out if out.dtype == self.dtype else astype(out, self.dtype)

    @property
    def nbytes(self) -> int:
        """Bytes the pack keeps resident (weight plus bias)."""
        return self.panels.nbytes + (0 if self.b is None else int(self.b.nbytes))

    def unpack(self) -> tuple[Array, Array | None]:
        """(weight (out, in), bias) in the declared dtype, new arrays equal bit for bit to those packed."""
        w = _owned(self.panels.weight(), self.dtype)
        return w, None if self.b is None else _owned(self.b, self.dtype)


def pack_linear(w: Array, b: Array | None = None) -> PackedLinear | PanelLinear:
    """Pack a (out_features, in_features) weight and optional (out_features,) bias for serving."""
    dt = require_float(w, "weight")
    require_ndim(w, 2, "weight", "(out_features, in_features)")
    check_linear_args(w[:1], w, b)  # one row of w is a well-formed x: reuses the shape/dtype checks
    cd = compute_dtype(dt)
    pd = dt if blas.multiplies(dt) else cd  # the pack's dtype: bfloat16 kept where the GEMM takes it
    bias = None if b is None else _owned(b, cd)
    n, k = int(w.shape[0]), int(w.shape[1])
    if type(w) is np.ndarray:  # panels in the weight's own dtype (bfloat16) where they run, else float32
        for panel_dtype in (dt, pd):
            if float_tiles.packs(n, k, panel_dtype):
                return PanelLinear(float_tiles.pack(w, panel_dtype), bias, dt)
    wt = fused.transposed(w, pd) if fused.transposes(w, pd) else _owned(w.T, pd)
    return PackedLinear(wt, bias, dt)


class LinearView:
    """A zero-copy "pack" over the declared weight: what ``borrowed`` and ``per_call`` serve from.

    float32/float64: no extra bytes (BLAS reads ``w`` transposed in place). float16/bfloat16:
    the weight is converted to float32 for the duration of each call and then freed. A backend
    with its own ``linear`` serves the same view through it (``kernel``: packrt-kernels-cuda's GEMM).
    """

    nbytes = 0

    def __init__(self, w: Array, b: Array | None, kernel: LinearKernel = linear) -> None:
        self.w, self.b, self._linear = w, b, kernel

    def forward(self, x: Array) -> Array:
        """``x @ w.T + b`` straight from the bound arrays (a half weight converts on every call)."""
        return self._linear(x, self.w, self.b)


def borrow_linear(w: Array, b: Array | None = None) -> LinearView:
    """Serve ``linear`` straight from the declared (possibly memory-mapped) weight, copying nothing."""
    return LinearView(w, b)


def linear_borrowed(x: Array, w: Array, b: Array | None = None) -> Array:
    """``linear`` from the declared weight, keeping no copy of it (see :class:`LinearView`)."""
    return linear(x, w, b)


class PackedConv2d:
    """A conv2d weight as (groups, out/groups, in/groups * kh * kw) in the compute dtype, plus geometry."""

    def __init__(
        self,
        w_groups: Array,
        b: Array | None,
        dtype: np.dtype[Any],
        shape: tuple[int, ...],
        geometry: Conv2dGeometry,
    ) -> None:
        self.w_groups = w_groups
        self.b = b
        self.dtype = dtype
        self.weight_shape = shape
        self.geometry = geometry

    def forward(self, x: Array) -> Array:
        """The convolution of ``x`` (N, C, H, W) or (C, H, W); same result as ``conv2d``."""
        xc = astype(x, self.w_groups.dtype)
        batched = x.ndim == 4
        out = convolve(xc if batched else xc[None], self.w_groups, self.b, self.geometry)
        return astype(out if batched else out[0], self.dtype)

    @property
    def nbytes(self) -> int:
        """Bytes the pack keeps resident (weight plus bias)."""
        return int(self.w_groups.nbytes) + (0 if self.b is None else int(self.b.nbytes))

    def unpack(self) -> tuple[Array, Array | None]:
        """(weight (out, in/groups, kh, kw), bias) in the declared dtype, bit for bit as packed."""
        w = _owned(self.w_groups.reshape(self.weight_shape), self.dtype)
        return w, None if self.b is None else _owned(self.b, self.dtype)


def pack_conv2d(w: Array, b: Array | None, geometry: Conv2dGeometry) -> PackedConv2d:
    """Pack a conv2d weight (out, in/groups, kh, kw) and bias for ``geometry``, checking both fit it."""
    dt = require_float(w, "weight")
    require_ndim(w, 4, "weight", "(out_channels, in_channels / groups, kh, kw)")
    if tuple(int(s) for s in w.shape[2:]) != geometry.kernel_size:
        raise KernelShapeError(
            f"weight's kernel is {tuple(w.shape[2:])} but the geometry was resolved for {geometry.kernel_size}"
        )
    check_conv2d_weight(w, b, geometry.groups, dt, "weight")
    cd = compute_dtype(dt)
    w_groups = _owned(w, cd).reshape(geometry.groups, int(w.shape[0]) // geometry.groups, -1)
    return PackedConv2d(w_groups, None if b is None else _owned(b, cd), dt, tuple(int(s) for s in w.shape), geometry)


class Conv2dView:
    """A zero-copy "pack" over the declared conv weight (half precision converts per call)."""

    nbytes = 0

    def __init__(self, w: Array, b: Array | None, geometry: Conv2dGeometry) -> None:
        self.w, self.b, self.geometry = w, b, geometry

    def forward(self, x: Array) -> Array:
        """The convolution straight from the bound arrays (a half weight converts on every call)."""
        return conv2d(x, self.w, self.b, self.geometry)


def borrow_conv2d(w: Array, b: Array | None, geometry: Conv2dGeometry) -> Conv2dView:
    """Convolve straight from the declared weight with a geometry validated once, copying nothing."""
    return Conv2dView(w, b, geometry)


class PackedEmbedding:
    """An embedding table, contiguous and owned, in its declared dtype."""

    def __init__(self, table: Array) -> None:
        self.table = table
        self.dtype = np.dtype(table.dtype)

    def forward(self, ids: Array) -> Array:
        """Rows for integer ``ids``; IndexError naming the first id outside the table."""
        return embedding(ids, self.table)

    @property
    def nbytes(self) -> int:
        """Bytes the pack keeps resident (the table)."""
        return int(self.table.nbytes)

    def unpack(self) -> Array:
        """The table as declared, a new array equal bit for bit to the one packed."""
        return self.table.copy()


def borrow_embedding(table: Array) -> PackedEmbedding:
    """Gather straight from the declared (possibly memory-mapped) table, copying nothing."""
    return PackedEmbedding(table)


def pack_embedding(table: Array) -> PackedEmbedding:
    """Pack a (num_embeddings, embedding_dim) table (a contiguous copy; no dtype change)."""
    dt = require_float(table, "weight")
    require_ndim(table, 2, "weight", "(num_embeddings, embedding_dim)")
    return PackedEmbedding(_owned(table, dt))
