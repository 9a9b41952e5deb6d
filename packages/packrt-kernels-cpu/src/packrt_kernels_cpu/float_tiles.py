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

import ml_dtypes
import numpy as np

from packrt_kernels_cpu import blas, compiled, fused, llvm_tiles, settings, threads

Array = Any
PANEL = llvm_tiles.PANEL  # output columns a tile computes
ROWS = 8  # the most rows a tile computes (16 accumulators, room for the operands)
_PREFETCH = 12  # inputs ahead
_PARALLEL_MACS = 1 << 22  # multiply-adds below which one thread computes every panel
_F32 = np.dtype(np.float32)
_BF16 = np.dtype(ml_dtypes.bfloat16)


def _tile_ir(rows: int, width: int = 1, pairs: str | None = None) -> str:
    """The IR of ``packrt_f32_tile{rows}x{width}``: ``out[r, 0:32 * width] = sum_k a[r, k] * panels[k, ...]``
    for ``rows`` rows and ``width`` panels side by side; ``ldo`` and ``lda`` count float32 elements between
    rows; a panel's rows are 32 floats apart, the panels ``k * 32`` floats apart.

    With ``pairs`` (the bfloat16 tiles, ``packrt_bf16_tile...``), each 4-byte element of ``a`` and of a
    panel is a pair of bfloat16 inputs and one ``vdpbf16ps`` adds both products to the float32 sum:
    ``pairs`` is the type its operands take in this LLVM (``<32 x bfloat>``, or ``<16 x i32>`` before 17)."""
    f32, vectors = "<16 x float>", 2 * width
    loaded, scalar, name = ("<16 x i32>", "i32", "bf16") if pairs else (f32, "float", "f32")
    lines = [
        f"define void @packrt_{name}_tile{rows}x{width}(ptr %out, i64 %ldo, ptr %a, i64 %lda, ptr %b, i64 %k) #0 {{",
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
    lines += llvm_tiles.panel_loads(loaded, "%bp", width)
    lines += ["  %i4 = shl i64 %i, 2", *llvm_tiles.broadcasts(rows, scalar, loaded, "%i4")]
    if pairs and pairs != loaded:
        lines += [f"  %bb{c} = bitcast {loaded} %b{c} to {pairs}" for c in range(vectors)]
        lines += [f"  %ab{r} = bitcast {loaded} %av{r} to {pairs}" for r in range(rows)]
    a_arg, b_arg = ("%ab", "%bb") if pairs and pairs != loaded else ("%av", "%b")
    for r in range(rows):
        for c in range(vectors):
            if pairs:
                step = f"@llvm.x86.avx512bf16.dpbf16ps.512({f32} %acc{r}_{c}, {pairs} {a_arg}{r}, {pairs} {b_arg}{c})"
            else:
                step = f"@llvm.fma.v16f32({f32} %av{r}, {f32} %b{c}, {f32} %acc{r}_{c})"
            lines.append(f"  %sum{r}_{c} = call {f32} {step}")
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


def _compile_bf16() -> llvm_tiles.Tiles | None:
    """The bfloat16 tiles, one per :data:`_SHAPES` in order, or None without AVX512-BF16. LLVM 17 retyped
    ``vdpbf16ps``' operands from ``<16 x i32>`` to ``<32 x bfloat>``; llvmlite says which LLVM it carries."""
    try:
        import llvmlite.binding as llvm  # type: ignore[import-untyped]
    except ImportError:
        return None
    pairs = "<32 x bfloat>" if llvm.llvm_version_info[0] >= 17 else "<16 x i32>"
    source = "\n".join(
        [
            f"declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, {pairs}, {pairs})",
            "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)",
            *(_tile_ir(rows, width, pairs) for rows, width in _SHAPES),
            'attributes #0 = { nounwind "target-features"="+avx512f,+avx512bf16" }',
        ]
    )
    names = [f"packrt_bf16_tile{rows}x{width}" for rows, width in _SHAPES]
    return llvm_tiles.compile_tiles(source, names, ("avx512f", "avx512bf16"))


_tiles = llvm_tiles.OnFirstUse(_compile).get
_bf16_tiles = llvm_tiles.OnFirstUse(_compile_bf16).get


def available(dtype: Any = _F32) -> bool:
    """Whether the tiles of ``dtype`` (float32, or bfloat16 pairs) run here: numba's kernels on, a CPU with
    AVX-512 (and AVX512-BF16 for bfloat16), and GEMMs on numpy's BLAS road (where oneMKL is chosen, an
    Intel CPU, its own small-GEMM and bfloat16 kernels are left to it).

    Where they run, packrt's pool does a forward's parallel products: numpy's OpenBLAS is kept to one
    thread (:func:`.threads.pool_carries_products`)."""
    tiles = _bf16_tiles if np.dtype(dtype) == _BF16 else _tiles
    runs = settings.current().numba and blas.provider() == "numpy" and compiled.enabled() and tiles() is not None
    if runs:
        threads.pool_carries_products()
    return runs


def addresses() -> Array | None:
    """The float32 tiles' addresses, in the order :mod:`._numba_plan`'s panel loop takes them, for a compiled
    loop that multiplies by panels of its own (attention's heads); None where :func:`available` is not."""
    tiles = _tiles() if available() else None
    return None if tiles is None else tiles.addresses


def packs(out_features: int, in_features: int, dtype: Any = _F32) -> bool:
    """Whether a weight of this shape and ``dtype`` is packed as :class:`FloatPanels` here: whole panels of
    columns, at least one input (an even count for bfloat16, whose tiles read inputs in pairs), and
    :func:`available` for its dtype. float32 weights are packed as float32 panels, bfloat16 ones as
    bfloat16 panels; other dtypes are not packed as panels."""
    dt = np.dtype(dtype)
    if dt != _F32 and (dt != _BF16 or in_features % 2):
        return False
    return out_features > 0 and out_features % PANEL == 0 and in_features > 0 and available(dt)


@dataclass(frozen=True)
class FloatPanels:
    """A weight (N, K) in panels of 32 output columns, C-contiguous, each panel one stream for a tile.

    float32 panels: ``data`` (N / 32, K, 32), panel ``p`` holding ``W^T``'s columns ``32p`` to ``32p + 31``.
    bfloat16 panels: ``data`` (N / 32, K / 2, 32, 2), each column's inputs ``2i`` and ``2i + 1`` side by side
    (the pair one ``vdpbf16ps`` lane multiplies). Either way panels ``lo:hi`` (``data[lo:hi]``) are a weight
    too, and ``dtype`` is the weight's."""

    data: Array

    @property
    def dtype(self) -> np.dtype[Any]:
        dtype: np.dtype[Any] = np.dtype(self.data.dtype)
        return dtype

    @property
    def out_features(self) -> int:
        return int(self.data.shape[0]) * PANEL

    @property
    def in_features(self) -> int:
        return int(self.data.shape[1]) * (2 if self.data.ndim == 4 else 1)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def weight(self) -> Array:
        """The (N, K) weight in :attr:`dtype`, a new C-contiguous array equal bit for bit to the one packed."""
        n, k = self.out_features, self.in_features
        if self.data.ndim == 4:  # (N/32, K/2, 32, 2) -> (N/32, 32, K/2, 2): each column's inputs in order
            return np.ascontiguousarray(self.data.transpose(0, 2, 1, 3).reshape(n, k))
        return np.ascontiguousarray(self.data.transpose(0, 2, 1).reshape(n, k))

    def float32(self) -> Array:
        """The panels as float32 (N / 32, K, 32), exactly (for the BLAS where no tile runs)."""
        if self.data.ndim == 4:
            return self.data.transpose(0, 1, 3, 2).reshape(self.data.shape[0], self.in_features, PANEL).astype(_F32)
        return self.data


def pack(w: Array, dtype: Any = _F32) -> FloatPanels:
    """``w`` (N, K), N a multiple of 32, as :class:`FloatPanels` of ``dtype`` (a copy; ``w`` is not kept):
    float32 panels, or bfloat16 ones (K even; ``w`` rounded to bfloat16, to nearest even, if it is not)."""
    n, k = (int(s) for s in w.shape)
    if np.dtype(dtype) == _BF16:
        pairs = np.asarray(w, _BF16).reshape(n // PANEL, PANEL, k // 2, 2).transpose(0, 2, 1, 3)
        return FloatPanels(np.ascontiguousarray(pairs))
    return FloatPanels(np.ascontiguousarray(np.asarray(w, _F32).reshape(n // PANEL, PANEL, k).transpose(0, 2, 1)))


def _rounded(x: Array) -> Array:
    """float32 ``x`` (M, K) rounded to bfloat16 (to nearest even), C-contiguous: the bfloat16 tiles' input."""
    if x.dtype == _BF16 and x.flags.c_contiguous:
        return x
    x = np.ascontiguousarray(x, _F32)
    return fused.cast(x, _BF16) if fused.casts(x, _BF16) else x.astype(_BF16)


def gemm(x: Array, panels: FloatPanels, out: Array | None = None) -> Array:
    """``x @ W^T`` for ``x`` (M, K), into ``out`` (a C-contiguous float32 (M, N)) or a new array.

    float32 panels multiply float32 ``x``. bfloat16 panels multiply ``x`` rounded to bfloat16 (to nearest
    even), each pair of products added to the float32 sum as ``vdpbf16ps`` adds them: the products of
    bfloat16 operands are exact, so the result is a float32 sum of exact products, in ``k`` order."""
    m, n = int(x.shape[0]), panels.out_features
    if out is None or not (out.dtype == _F32 and out.shape == (m, n) and out.flags.c_contiguous):
        out = np.empty((m, n), _F32)
    pairs = panels.data.ndim == 4
    on = settings.current().numba and compiled.enabled()
    tiles = (_bf16_tiles() if pairs else _tiles()) if on else None
    if tiles is None:  # numba off, or not this CPU's tiles: numpy's BLAS over the panels, one product per panel
        a = _rounded(x).astype(_F32) if pairs else x
        np.matmul(a, panels.float32(), out=out.reshape(m, n // PANEL, PANEL).transpose(1, 0, 2))
        return out
    if m:
        # a bfloat16 pair is 4 bytes, as a float32 is: the float32 loop runs the pair tiles unchanged
        a = _rounded(x).view(_F32) if pairs else np.ascontiguousarray(x, _F32)
        data = panels.data.view(_F32).reshape(panels.data.shape[:3]) if pairs else panels.data
        loops = compiled.module("packrt_kernels_cpu._numba_plan")
        args = (tiles.addresses, out, a, data, compiled.pool_size())
        compiled.launch("float_tiles", m * panels.in_features * n, *args, loops=loops, least=_PARALLEL_MACS)
    return out


__all__ = ["PANEL", "ROWS", "FloatPanels", "addresses", "available", "gemm", "pack", "packs"]
