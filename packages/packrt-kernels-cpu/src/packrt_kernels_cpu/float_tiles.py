"""A float32 GEMM on AVX-512 over a weight packed once into panels of 32 output columns.

A packed float32 linear whose width is a multiple of 32 keeps its weight as :class:`FloatPanels`:
``(N / 32, K, 32)``, each panel the 32 columns of ``W^T`` it serves, row after row, so a tile reads one
contiguous stream. A tile kernel computes up to 8 output rows by one panel over all of K: two float32
accumulators per row, per input one 128-byte load of the panel, one broadcast of each row's activation
and two FMAs per row. One or two rows are computed by tiles four or two panels wide, so that they too
keep eight FMA chains going. The tiles are LLVM IR compiled for this machine on first use
(:mod:`.llvm_tiles`); numba's compiled loop (:mod:`._numba_plan`) runs them over the pool.

Why: OpenBLAS packs the weight on every call and its blocking is built for many rows; with the panels
packed once, a model's layer products run faster at every batch size measured (docs/benchmarks.md,
"float32 weights packed into panels").

Each output is one tile's sum over ``k`` in order, fused multiply-adds from zero: the same bits whatever
the thread count, the rows beside it or the tile that computed it. Where the tiles cannot run (numba
turned off after packing, a CPU without AVX-512 reading a pack made elsewhere) the panels are
multiplied by numpy's BLAS instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from packrt_kernels_cpu import blas, compiled, llvm_tiles, settings

Array = Any
PANEL = llvm_tiles.PANEL  # output columns a tile computes
ROWS = 8  # the most rows a tile computes (16 accumulators, room for the operands)
_PREFETCH = 12  # inputs ahead
_PARALLEL_MACS = 1 << 22  # multiply-adds below which one thread computes every panel
_F32 = np.dtype(np.float32)


def _tile_ir(rows: int, width: int = 1) -> str:
    """The IR of ``packrt_f32_tile{rows}x{width}``: ``out[r, 0:32 * width] = sum_k a[r, k] * panels[k, ...]``
    for ``rows`` rows and ``width`` panels side by side; ``ldo`` and ``lda`` count float32 elements between
    rows; a panel's rows are 32 floats apart, the panels ``k * 32`` floats apart."""
    f32, vectors = "<16 x float>", 2 * width
    lines = [
        f"define void @packrt_f32_tile{rows}x{width}(ptr %out, i64 %ldo, ptr %a, i64 %lda, ptr %b, i64 %k) #0 {{",
        "entry:",
        "  %pstride = mul i64 %k, 128",
        *llvm_tiles.row_pointers(rows, 4),
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [0, %entry], [%next, %loop]",
        "  %bp = phi ptr [%b, %entry], [%bnext, %loop]",
        *llvm_tiles.accumulators(rows, f32, "sum", vectors),
    ]
    if width == 1:  # one stream: prefetched ahead; several side by side run faster on the hardware's own
        lines += [
            f"  %pf0 = getelementptr i8, ptr %bp, i64 {128 * _PREFETCH}",
            "  %pf1 = getelementptr i8, ptr %pf0, i64 64",
            "  call void @llvm.prefetch.p0(ptr %pf0, i32 0, i32 3, i32 1)",
            "  call void @llvm.prefetch.p0(ptr %pf1, i32 0, i32 3, i32 1)",
        ]
    lines += llvm_tiles.panel_loads(f32, "%bp", width)
    lines += ["  %i4 = shl i64 %i, 2", *llvm_tiles.broadcasts(rows, "float", f32, "%i4")]
    for r in range(rows):
        for c in range(vectors):
            lines.append(f"  %sum{r}_{c} = call {f32} @llvm.fma.v16f32({f32} %av{r}, {f32} %b{c}, {f32} %acc{r}_{c})")
    lines += [
        "  %bnext = getelementptr i8, ptr %bp, i64 128",
        "  %next = add i64 %i, 1",
        "  %done = icmp eq i64 %next, %k",
        "  br i1 %done, label %exit, label %loop",
        *llvm_tiles.stores(rows, f32, "sum", vectors),
    ]
    return "\n".join(lines)


# (rows, panels) of each tile, in the order _numba_plan._float_panels indexes them: one panel for 1 to 8
# rows, then 1 row across 4 panels and 2 rows across 2. A tile of one or two rows by one panel has only
# 2 or 4 chains of FMAs, each waiting on the last; side by side panels give it 8 chains and each output
# still sums its k in order, so the bits do not depend on which tile computed them.
_SHAPES = (*((rows, 1) for rows in range(1, ROWS + 1)), (1, 4), (2, 2))


def _compile() -> llvm_tiles.Tiles | None:
    """One tile per :data:`_SHAPES`, in order, or None without AVX-512."""
    source = "\n".join(
        [
            "declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)",
            "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)",
            *(_tile_ir(rows, width) for rows, width in _SHAPES),
            'attributes #0 = { nounwind "target-features"="+avx512f,+fma" }',
        ]
    )
    return llvm_tiles.compile_tiles(
        source, [f"packrt_f32_tile{rows}x{width}" for rows, width in _SHAPES], ("avx512f", "fma")
    )


_tiles = llvm_tiles.OnFirstUse(_compile).get


def available() -> bool:
    """Whether the tiles run here: numba's kernels on, a CPU with AVX-512, and GEMMs on numpy's BLAS
    road (where oneMKL is chosen, an Intel CPU, its own small-GEMM kernels are left to it)."""
    return settings.current().numba and blas.provider() == "numpy" and compiled.enabled() and _tiles() is not None


def packs(out_features: int, in_features: int) -> bool:
    """Whether a float32 weight of this shape is packed as :class:`FloatPanels` here: whole panels of
    columns, at least one input, and :func:`available`."""
    return out_features > 0 and out_features % PANEL == 0 and in_features > 0 and available()


@dataclass(frozen=True)
class FloatPanels:
    """A float32 weight (N, K) as ``data`` (N / 32, K, 32), C-contiguous: panel ``p`` holds ``W^T``'s
    columns ``32p`` to ``32p + 31``. Panels ``lo:hi`` of it (``data[lo:hi]``) are a weight too."""

    data: Array

    @property
    def out_features(self) -> int:
        return int(self.data.shape[0]) * PANEL

    @property
    def in_features(self) -> int:
        return int(self.data.shape[1])

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def weight(self) -> Array:
        """The (N, K) weight, a new C-contiguous array equal bit for bit to the one packed."""
        n, k = self.out_features, self.in_features
        return np.ascontiguousarray(self.data.transpose(0, 2, 1).reshape(n, k))


def pack(w: Array) -> FloatPanels:
    """A float32 ``w`` (N, K), N a multiple of 32, as :class:`FloatPanels` (a copy; ``w`` is not kept)."""
    n, k = (int(s) for s in w.shape)
    return FloatPanels(np.ascontiguousarray(np.asarray(w, _F32).reshape(n // PANEL, PANEL, k).transpose(0, 2, 1)))


def gemm(x: Array, panels: FloatPanels, out: Array | None = None) -> Array:
    """``x @ W^T`` for float32 ``x`` (M, K), into ``out`` (a C-contiguous float32 (M, N)) or a new array."""
    m, n = int(x.shape[0]), panels.out_features
    if out is None or not (out.dtype == _F32 and out.shape == (m, n) and out.flags.c_contiguous):
        out = np.empty((m, n), _F32)
    tiles = _tiles() if settings.current().numba and compiled.enabled() else None
    if tiles is None:  # numba off, or no AVX-512 here: numpy's BLAS over the panels, one product per panel
        np.matmul(x, panels.data, out=out.reshape(m, n // PANEL, PANEL).transpose(1, 0, 2))
        return out
    if m:
        loops = compiled.module("packrt_kernels_cpu._numba_plan")
        args = (tiles.addresses, out, np.ascontiguousarray(x, _F32), panels.data, compiled.pool_size())
        compiled.launch("float_tiles", m * panels.in_features * n, *args, loops=loops, least=_PARALLEL_MACS)
    return out


__all__ = ["PANEL", "ROWS", "FloatPanels", "available", "gemm", "pack", "packs"]
