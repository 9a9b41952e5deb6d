"""An int8 GEMM on AVX512-VNNI (``vpdpbusd``: 64 uint8 x int8 products summed into 16 int32 lanes per
instruction) for CPUs where no BLAS packrt loads multiplies int8 fast: oneMKL runs generic code on AMD
(42 GOP/s on a Zen 4 core), and the int8 road's float32 chunks on OpenBLAS reach ~88.

The weight is repacked once (:func:`pack`) into panels of 32 output columns: for each group of 4
inputs, 128 bytes, the 4 int8 weights of each column side by side, as ``vpdpbusd`` reads them. A tile
kernel multiplies 8 rows of uint8 activations (or 1, for the last rows) by one panel over all of K:
16 int32 accumulators in registers, per group of 4 inputs one 128-byte weight load, one broadcast of
4 activation bytes per row and two ``vpdpbusd`` per row. The tile kernels are LLVM IR written here and
compiled by llvmlite (numba's own code generator) for this machine on first use, not by numba: LLVM
does not form ``vpdpbusd`` from a numba loop (it widens to 32 bits and uses ``vpdpwssd``, measured 92
GOP/s). numba's compiled loop (:mod:`._numba_int8`) runs the tiles, over the pool when the product is
large. Measured on one Zen 4 core: 380-430 GOP/s at 1024x768x3072, 320-330 at 16 rows, against 98
GFLOP/s for float32.

The products are exact int32 sums (``K * 255 * 127 < 2**31`` for ``K <= 65536``), the same integers
as every other int8 road. :func:`available` says whether this machine and the settings allow it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from packrt_kernels_cpu import compiled, llvm_tiles, settings

Array = Any
PANEL = llvm_tiles.PANEL  # output columns a tile computes
ROWS = 8  # activation rows a full tile computes
_PARALLEL_MACS = 1 << 20  # multiply-adds below which one thread computes every panel (~10 us on one core)
_FEATURES = ("avx512f", "avx512bw", "avx512vnni")


def _tile_ir(name: str, rows: int) -> str:
    """The IR of a tile of ``rows`` rows x PANEL columns over ``kg`` groups of 4 inputs:
    ``out[r, 0:32] = sum_g a[r, 4g:4g+4] . panel[g]`` as int32, ``out`` rows ``ldo`` int32 apart."""
    i32 = "<16 x i32>"
    lines = [
        f"define void @{name}(ptr %out, i64 %ldo, ptr %a, i64 %lda, ptr %b, i64 %kg) #0 {{",
        "entry:",
        *llvm_tiles.row_pointers(rows, 1),
        "  br label %loop",
        "loop:",
        "  %g = phi i64 [0, %entry], [%gn, %loop]",
        *llvm_tiles.accumulators(rows, i32, "n"),
        "  %boff = shl i64 %g, 7",
        "  %bp = getelementptr i8, ptr %b, i64 %boff",
        *llvm_tiles.panel_loads(i32, "%bp"),
        "  %g4 = shl i64 %g, 2",
        *llvm_tiles.broadcasts(rows, "i32", i32, "%g4"),
    ]
    for r in range(rows):
        for c in range(2):
            lines.append(
                f"  %n{r}_{c} = call {i32} @llvm.x86.avx512.vpdpbusd.512({i32} %acc{r}_{c}, {i32} %av{r}, {i32} %b{c})"
            )
    lines += ["  %gn = add i64 %g, 1", "  %done = icmp eq i64 %gn, %kg", "  br i1 %done, label %exit, label %loop"]
    lines += llvm_tiles.stores(rows, i32, "n")
    return "\n".join(lines)


def _compile() -> llvm_tiles.Tiles | None:
    """The full tile (8 rows) and the one-row tile, in that order, or None where this machine lacks VNNI."""
    source = "\n".join(
        [
            "declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)",
            _tile_ir("packrt_vnni_tile8", ROWS),
            _tile_ir("packrt_vnni_tile1", 1),
            'attributes #0 = { nounwind "target-features"="+avx512f,+avx512bw,+avx512vnni" }',
        ]
    )
    return llvm_tiles.compile_tiles(source, ("packrt_vnni_tile8", "packrt_vnni_tile1"), _FEATURES)


_tiles = llvm_tiles.OnFirstUse(_compile).get


def available() -> bool:
    """Whether int8 GEMMs may take this road: numba's kernels on, and a CPU with AVX512-VNNI (and BW)."""
    return settings.current().numba and compiled.enabled() and _tiles() is not None


@dataclass(frozen=True)
class Panels:
    """An int8 weight (N, K) repacked for :func:`gemm`: ``data`` holds ``ceil(N / 32)`` panels of
    ``groups`` x 128 bytes (K padded with zeros to ``4 * groups``, N to a multiple of 32)."""

    data: Array
    out_features: int
    in_features: int
    groups: int

    @property
    def padded_out(self) -> int:
        return int(self.data.size) // (self.groups * 4) if self.groups else 0

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


def pack(q: Array) -> Panels:
    """``q`` int8 (N, K), C-contiguous numpy, as :class:`Panels` (a copy; ``q`` is not kept)."""
    n, k = (int(s) for s in q.shape)
    groups = -(-k // 4)
    padded_n = -(-n // PANEL) * PANEL
    wide = np.zeros((padded_n, groups * 4), np.int8)
    wide[:n, :k] = q
    # (panels, 2 halves, 16 columns, groups, 4 bytes) -> (panels, groups, 2 halves, 16 columns, 4 bytes)
    blocks = wide.reshape(padded_n // PANEL, 2, 16, groups, 4).transpose(0, 3, 1, 2, 4)
    return Panels(np.ascontiguousarray(blocks).reshape(-1), n, k, groups)


def _whole_groups(u: Array, panels: Panels) -> Array:
    """``u`` with K padded with zero columns to whole groups of 4 (they multiply the weight's zero padding)."""
    width = panels.groups * 4
    if int(u.shape[1]) == width:
        return u
    padded = np.zeros((int(u.shape[0]), width), np.uint8)
    padded[:, : u.shape[1]] = u
    return padded


def gemm(u: Array, panels: Panels) -> Array:
    """``u @ q.T`` exactly, int32 (M, N) (a view of an (M, N padded to 32) array), for uint8 ``u`` (M, K),
    C-contiguous, K = ``panels.in_features``; call only where :func:`available`."""
    tiles = _tiles()
    assert tiles is not None, "vnni.gemm called where vnni.available() is False"
    m = int(u.shape[0])
    width = panels.groups * 4
    u = _whole_groups(u, panels)
    columns = panels.padded_out
    out = np.empty((m, columns), np.int32)
    if m and columns and panels.groups:
        loops = compiled.module("packrt_kernels_cpu._numba_int8")
        args = (tiles.addresses, out, u, panels.data, panels.groups)
        compiled.launch("vnni_tiles", m * columns * width, *args, loops=loops, least=_PARALLEL_MACS)
    elif m and columns:
        out[...] = 0
    return out[:, : panels.out_features]


def linear(x: Array, panels: Panels, w_scale: Array, w_sum: Array, bias: Array, out: Array) -> None:
    """:func:`packrt_kernels_cpu.int8.linear` on the panels: float32 ``x`` (M, K) C-contiguous, each row quantized
    (:func:`packrt_kernels_cpu.int8.quantize_rows`), multiplied, and turned back into float32 tile by tile,
    ``out[i, n] = (product[i, n] - x_zero[i] * w_sum[n]) * x_scale[i] * w_scale[n] + bias[n]`` (``bias`` empty:
    none) into ``out`` (M, N) float32, C-contiguous: the bits of :func:`gemm` followed by that pass, without the
    int32 product's round trip through memory. From ``ROW_CHUNK`` rows up each task of the pool quantizes a chunk
    of rows and multiplies it by every panel, so the whole layer is one parallel region; fewer rows are
    quantized first and shared out by panels. Call only where :func:`available`, with K >= 1."""
    tiles = _tiles()
    assert tiles is not None, "vnni.linear called where vnni.available() is False"
    m, n = (int(s) for s in out.shape)
    if m == 0 or n == 0:
        return
    loops = compiled.module("packrt_kernels_cpu._numba_int8")
    work = m * panels.padded_out * panels.groups * 4
    if m >= loops.ROW_CHUNK:
        by_rows = (tiles.addresses, x, panels.data, panels.groups, w_scale, w_sum, bias, out)
        compiled.launch("vnni_rows", work, *by_rows, loops=loops, least=_PARALLEL_MACS)
        return
    u = np.empty(x.shape, np.uint8)
    x_scale, x_zero = np.empty(m, np.float32), np.empty(m, np.int32)
    compiled.launch("quantize_rows", x.size, x, u, x_scale, x_zero, loops=loops)
    u = _whole_groups(u, panels)
    args = (tiles.addresses, u, x_scale, x_zero, panels.data, panels.groups, w_scale, w_sum, bias, out)
    compiled.launch("vnni_linear", work, *args, loops=loops, least=_PARALLEL_MACS)


__all__ = ["PANEL", "ROWS", "Panels", "available", "gemm", "linear", "pack"]
