"""Dot products of a weight row of quantized blocks with int8-quantized activations, as LLVM IR for AVX2.

llama.cpp multiplies its Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 blocks by activations quantized per block of 32 to int8 (its
``q8_0`` / ``q8_1`` types: 32 int8 values and an fp16 scale, plus, for ``q8_1``, the fp16 of scale times their
sum), so each block's dot product is an integer one: ``vpmaddubsw`` multiplies 32 unsigned weight bytes by 32
signed activation bytes into 16 int16 pair sums, ``vpmaddwd`` adds those into 8 int32 lanes, and one FMA
scales them by both blocks' scales into 8 float32 accumulators. LLVM forms neither instruction from a numba
loop, so the dots are IR here, compiled by llvmlite for this machine on first use (:mod:`.llvm_tiles`), and
called per (weight row, input row) from numba's loop (:mod:`._numba_blocks`). Where the CPU has AVX512-VNNI the
two integer steps are one ``vpdpbusd`` (on 256-bit registers): the same int32 sums, so the same bits.

Activations ("q8" rows, :data:`Q8_BYTES` per block of 32), as llama.cpp's AVX2 quantization makes them: 32 int8
values (``x * 127 / max|x|`` rounded to nearest even), the float32 scale ``d = max|x| / 127`` rounded to fp16
(as ``q8_0`` stores it), ``d * sum(values)`` exactly (what Q4_0's offset needs: llama.cpp subtracts it in
integers) and ``d * sum(values)`` through fp16 with ``d`` unrounded (as ``q8_1`` stores it, for Q4_1). Each
output differs from the float32 product with the dequantized weights by the activations' rounding: at most
half a step (``d / 2``) times the sum of the block's absolute weights, per block, plus float32 rounding.

- Q4_0 (18-byte blocks: fp16 ``d``, 16 bytes of nibbles, each weight ``d * (q - 8)``): the nibbles times the
  activations, less 8 times the activations' sum;
- Q4_1 (20 bytes: fp16 ``d`` and ``m``, 16 bytes of nibbles, ``d * q + m``): plus ``m`` times their sum;
- Q5_0 and Q5_1: as Q4_0 (less 16) and Q4_1, each weight's fifth bit (a 32-bit word per block) or-ed in as 16;
- Q4_K and Q6_K (super-blocks of 256): each 32 weights against their own q8 block, their 6-bit scale (Q6_K: the
  two int8 scales of its halves, through ``vpmaddwd``) folded in; Q4_K's mins through the exact sums, Q6_K's
  weights less 32 and signed like Q8_0's. (llama.cpp quantizes these activations per 256, with one scale: packrt's
  finer blocks round them less.)
- Q8_0 (34 bytes: fp16 ``d``, 32 int8): ``vpmaddubsw`` takes unsigned bytes first, so the weights' absolute
  values are multiplied by the activations carrying the weights' signs (``vpsignb``).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from packrt_kernels_cpu import compiled, llvm_tiles, settings

Array = Any
Q8_BYTES: Final = 44  # a q8 activation block: 32 int8, scale, scale * sum exactly, the same through fp16
TILE_ROWS: Final = 4  # q8 rows the many-row tile multiplies, each weight block unpacked once for them all
# the formats with a tile, in order
FORMATS: Final[tuple[str, ...]] = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q6_K")
_FEATURES = ("avx2", "fma", "f16c")
_VNNI_FEATURES = (*_FEATURES, "avx512vl", "avx512vnni")
# (bytes a block, where its quants start, where its 32 fifth bits are or -1)
_LAYOUT: Final[dict[str, tuple[int, int, int]]] = {
    "Q4_0": (18, 2, -1),
    "Q4_1": (20, 4, -1),
    "Q5_0": (22, 6, 2),
    "Q5_1": (24, 8, 4),
    "Q8_0": (34, 2, -1),
}
_MINS: Final = ("Q4_1", "Q5_1")  # a min per block, applied through q8_1's rounded sum
_OFFSETS: Final[dict[str, int]] = {"Q4_0": 8, "Q5_0": 16}  # what each quant is less, applied through the exact sum


def _splat(kind: str, value: int, lanes: int) -> str:
    return "<" + ", ".join([f"{kind} {value}"] * lanes) + ">"


def _halves(lines: list[str], names: tuple[str, str], pointer: str) -> None:
    """``%{names[0]}`` and ``%{names[1]}`` (float; an empty name is skipped) = the two fp16 at ``pointer``. One
    volatile 4-byte load (``vmovss``, which zeroes the rest of its register): from a plain ``load half`` LLVM
    makes a ``vpinsrw`` into whatever register it picks, which chained each block's scale to the previous
    block's sum and made a block three times slower."""
    lines += [
        f"  %{names[0] or names[1]}_v = load volatile <2 x half>, ptr {pointer}, align 1",
        f"  %{names[0] or names[1]}_f = fpext <2 x half> %{names[0] or names[1]}_v to <2 x float>",
    ]
    for lane, name in enumerate(names):
        if name:
            lines += [f"  %{name} = extractelement <2 x float> %{names[0] or names[1]}_f, i64 {lane}"]


def _int_dot(lines: list[str], tag: str, weights: str, x: str, vnni: bool) -> None:
    """``%p8{tag}`` (8 x i32): each lane the sum of four adjacent products of unsigned ``weights`` bytes and signed
    ``x`` bytes. AVX2: ``vpmaddubsw`` into int16 pairs (which never saturate here: a weight is at most 31, or 128
    for Q8_0's magnitudes, against |x| <= 127), then ``vpmaddwd`` by ones; VNNI: one ``vpdpbusd``, the same int32s."""
    if vnni:
        lines += [
            f"  %wd{tag} = bitcast <32 x i8> {weights} to <8 x i32>",
            f"  %xd{tag} = bitcast <32 x i8> {x} to <8 x i32>",
            f"  %p8{tag} = call <8 x i32> @llvm.x86.avx512.vpdpbusd.256(<8 x i32> zeroinitializer, "
            f"<8 x i32> %wd{tag}, <8 x i32> %xd{tag})",
        ]
        return
    lines += [
        f"  %p16{tag} = call <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8> {weights}, <32 x i8> {x})",
        f"  %p8{tag} = call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> %p16{tag}, <16 x i16> {_splat('i16', 1, 16)})",
    ]


def _rows_entry(name: str, rows: int) -> list[str]:
    """The tile's first lines: its signature and, per row ``i`` of ``rows``, ``%xrow{i}`` and ``%orow{i}``: where its
    q8 row (``lda`` bytes apart) and its output (``ldo`` bytes apart) start. One row: ``x`` and ``out``."""
    lines = [f"define void @{name}(ptr %out, i64 %ldo, ptr %w, i64 %lda, ptr %x, i64 %nb) #0 {{", "entry:"]
    for i in range(rows):
        lines += [
            f"  %xat{i} = mul i64 %lda, {i}",
            f"  %xrow{i} = getelementptr i8, ptr %x, i64 %xat{i}",
            f"  %oat{i} = mul i64 %ldo, {i}",
            f"  %orow{i} = getelementptr i8, ptr %out, i64 %oat{i}",
        ]
    return lines


def _rows_exit(lines: list[str], rows: int, acc: str, tail: str) -> None:
    """Each row's sum: its 8 lanes and its tail (``{acc}{i}``, ``{tail}{i}``) added, stored at ``%orow{i}``."""
    for i in range(rows):
        lines += [
            f"  %r{i} = call reassoc float @llvm.vector.reduce.fadd.v8f32(float {tail}{i}, <8 x float> {acc}{i})",
            f"  store float %r{i}, ptr %orow{i}, align 4",
        ]
    lines += ["  ret void", "}"]


def _dot_ir(name: str, block_format: str, vnni: bool = False, rows: int = 1) -> str:
    """``out[i] = sum over nb blocks of dot(weight block, q8 block of row i)`` for one weight row at ``w`` and
    ``rows`` q8 rows from ``x``, ``lda`` bytes apart (outputs ``ldo`` bytes apart); the tile signature ``(out, ldo,
    w, lda, x, nb)``. Each block's weights are unpacked once for all rows, and each row's sums are the ones the
    one-row tile makes, in its order: the same bits."""
    size, quants, fifth = _LAYOUT[block_format]
    lines = _rows_entry(name, rows)
    lines += ["  br label %loop", "loop:", "  %b = phi i64 [0, %entry], [%bn, %loop]"]
    for i in range(rows):
        lines += [
            f"  %acc{i} = phi <8 x float> [zeroinitializer, %entry], [%accn{i}, %loop]",
            f"  %tail{i} = phi float [0.0, %entry], [%tailn{i}, %loop]",
        ]
    lines += [f"  %woff = mul i64 %b, {size}", "  %wp = getelementptr i8, ptr %w, i64 %woff"]
    _halves(lines, ("d", "m" if block_format in _MINS else ""), "%wp")
    lines += [f"  %xoff = mul i64 %b, {Q8_BYTES}", f"  %qp = getelementptr i8, ptr %wp, i64 {quants}"]
    if block_format == "Q8_0":
        lines += [
            "  %wq = load <32 x i8>, ptr %qp, align 1",
            "  %wa = call <32 x i8> @llvm.abs.v32i8(<32 x i8> %wq, i1 false)",
        ]
        weights = "%wa"
    else:
        order = "<" + ", ".join(f"i32 {i}" for i in range(32)) + ">"
        lines += [
            "  %q16 = load <16 x i8>, ptr %qp, align 1",
            f"  %lo = and <16 x i8> %q16, {_splat('i8', 15, 16)}",
            f"  %hi = lshr <16 x i8> %q16, {_splat('i8', 4, 16)}",
            f"  %w32 = shufflevector <16 x i8> %lo, <16 x i8> %hi, <32 x i32> {order}",
        ]
        weights = "%w32"
        if fifth >= 0:  # bit j of the little-endian word is weight j's fifth bit (16)
            lines += [
                f"  %hp = getelementptr i8, ptr %wp, i64 {fifth}",
                "  %hw = load i32, ptr %hp, align 1",
                "  %hbits = bitcast i32 %hw to <32 x i1>",
                f"  %high = select <32 x i1> %hbits, <32 x i8> {_splat('i8', 16, 32)}, <32 x i8> zeroinitializer",
                "  %w32f = or <32 x i8> %w32, %high",
            ]
            weights = "%w32f"
    if block_format in _OFFSETS:
        lines += [f"  %d8 = fmul float %d, -{_OFFSETS[block_format]}.0"]
    for i in range(rows):
        lines += [
            f"  %xp{i} = getelementptr i8, ptr %xrow{i}, i64 %xoff",
            f"  %x32_{i} = load <32 x i8>, ptr %xp{i}, align 1",
            f"  %dxp{i} = getelementptr i8, ptr %xp{i}, i64 32",
            f"  %dx{i} = load float, ptr %dxp{i}, align 4",
            f"  %sxp{i} = getelementptr i8, ptr %xp{i}, i64 {40 if block_format in _MINS else 36}",
            f"  %sx{i} = load float, ptr %sxp{i}, align 4",
        ]
        x = f"%x32_{i}"
        if block_format == "Q8_0":
            lines += [f"  %xs{i} = call <32 x i8> @llvm.x86.avx2.psign.b(<32 x i8> %x32_{i}, <32 x i8> %wq)"]
            x = f"%xs{i}"
        _int_dot(lines, f"_{i}", weights, x, vnni)
        lines += [
            f"  %pf{i} = sitofp <8 x i32> %p8_{i} to <8 x float>",
            f"  %s{i} = fmul float %d, %dx{i}",
            f"  %s0_{i} = insertelement <8 x float> poison, float %s{i}, i64 0",
            f"  %sv{i} = shufflevector <8 x float> %s0_{i}, <8 x float> poison, <8 x i32> zeroinitializer",
            f"  %accn{i} = call <8 x float> @llvm.fma.v8f32(<8 x float> %pf{i}, <8 x float> %sv{i}, "
            f"<8 x float> %acc{i})",
        ]
        if block_format in _MINS:
            lines += [f"  %tailn{i} = call float @llvm.fma.f32(float %m, float %sx{i}, float %tail{i})"]
        elif block_format in _OFFSETS:
            lines += [f"  %tailn{i} = call float @llvm.fma.f32(float %d8, float %sx{i}, float %tail{i})"]
        else:
            lines += [f"  %tailn{i} = fadd float %tail{i}, 0.0"]
    lines += [
        "  %bn = add i64 %b, 1",
        "  %done = icmp eq i64 %bn, %nb",
        "  br i1 %done, label %exit, label %loop",
        "exit:",
    ]
    _rows_exit(lines, rows, "%accn", "%tailn")
    return "\n".join(lines)


def _k_scales(lines: list[str]) -> None:
    """Q4_K's eight 6-bit scales ``%sc{j}`` and mins ``%mn{j}`` (float) from the 12 bytes at ``%wp + 4``."""
    for i in range(12):
        lines += [
            f"  %sbp{i} = getelementptr i8, ptr %wp, i64 {4 + i}",
            f"  %sb{i}b = load i8, ptr %sbp{i}, align 1",
            f"  %sb{i} = zext i8 %sb{i}b to i32",
        ]
    for j in range(8):
        if j < 4:
            lines += [f"  %sci{j} = and i32 %sb{j}, 63", f"  %mni{j} = and i32 %sb{j + 4}, 63"]
        else:
            lines += [
                f"  %sclo{j} = and i32 %sb{j + 4}, 15",
                f"  %schi{j}a = lshr i32 %sb{j - 4}, 6",
                f"  %schi{j} = shl i32 %schi{j}a, 4",
                f"  %sci{j} = or i32 %sclo{j}, %schi{j}",
                f"  %mnlo{j} = lshr i32 %sb{j + 4}, 4",
                f"  %mnhi{j}a = lshr i32 %sb{j}, 6",
                f"  %mnhi{j} = shl i32 %mnhi{j}a, 4",
                f"  %mni{j} = or i32 %mnlo{j}, %mnhi{j}",
            ]
        lines += [f"  %sc{j} = uitofp i32 %sci{j} to float", f"  %mn{j} = uitofp i32 %mni{j} to float"]


def _q8_block(lines: list[str], tag: str, row: int, block: int) -> None:
    """``%x{tag}`` (32 int8), ``%dx{tag}`` and ``%sx{tag}`` (the exact sum) of q8 block ``block`` after ``%xp{row}``."""
    lines += [
        f"  %xb{tag} = getelementptr i8, ptr %xp{row}, i64 {block * Q8_BYTES}",
        f"  %x{tag} = load <32 x i8>, ptr %xb{tag}, align 1",
        f"  %dxp{tag} = getelementptr i8, ptr %xb{tag}, i64 32",
        f"  %dx{tag} = load float, ptr %dxp{tag}, align 4",
        f"  %sxp{tag} = getelementptr i8, ptr %xb{tag}, i64 36",
        f"  %sx{tag} = load float, ptr %sxp{tag}, align 4",
    ]


def _k_unpack(lines: list[str], block_format: str) -> list[tuple[str, str]]:
    """The super-block at ``%wp`` unpacked: its scale(s) and eight chunks of 32 weights, each (value, how it is
    multiplied: "u" unsigned (Q4_K) or "s" signed (Q6_K))."""
    if block_format == "Q4_K":
        _halves(lines, ("d", "dmin"), "%wp")
        lines += ["  %ndmin = fneg float %dmin"]
        _k_scales(lines)
        for c in range(4):
            lines += [
                f"  %qp{c} = getelementptr i8, ptr %wp, i64 {16 + 32 * c}",
                f"  %q{c} = load <32 x i8>, ptr %qp{c}, align 1",
                f"  %w{2 * c} = and <32 x i8> %q{c}, {_splat('i8', 15, 32)}",
                f"  %w{2 * c + 1} = lshr <32 x i8> %q{c}, {_splat('i8', 4, 32)}",
            ]
        for j in range(8):
            lines += [f"  %dsc{j} = fmul float %d, %sc{j}", f"  %mdm{j} = fmul float %ndmin, %mn{j}"]
        return [(f"%w{j}", "u") for j in range(8)]
    lines += ["  %dp = getelementptr i8, ptr %wp, i64 206"]  # d is the block's last two bytes
    _halves(lines, ("", "d"), "%dp")
    three, fifteen = _splat("i8", 3, 32), _splat("i8", 15, 32)
    mask = "<" + ", ".join(["i32 0"] * 8 + ["i32 8"] * 8) + ">"
    for h in range(2):
        lines += [
            f"  %qap{h} = getelementptr i8, ptr %wp, i64 {64 * h}",
            f"  %qa{h} = load <32 x i8>, ptr %qap{h}, align 1",
            f"  %qbp{h} = getelementptr i8, ptr %wp, i64 {64 * h + 32}",
            f"  %qb{h} = load <32 x i8>, ptr %qbp{h}, align 1",
            f"  %qhp{h} = getelementptr i8, ptr %wp, i64 {128 + 32 * h}",
            f"  %qh{h} = load <32 x i8>, ptr %qhp{h}, align 1",
        ]
        for t in range(4):
            j = 4 * h + t
            source = f"%qa{h}" if t in (0, 2) else f"%qb{h}"
            low = (
                f"  %lo{j} = and <32 x i8> {source}, {fifteen}"
                if t < 2
                else f"  %lo{j} = lshr <32 x i8> {source}, {_splat('i8', 4, 32)}"
            )
            lines += [
                low,
                f"  %hs{j} = lshr <32 x i8> %qh{h}, {_splat('i8', 2 * t, 32)}",
                f"  %hm{j} = and <32 x i8> %hs{j}, {three}",
                f"  %hv{j} = shl <32 x i8> %hm{j}, {_splat('i8', 4, 32)}",
                f"  %u{j} = or <32 x i8> %lo{j}, %hv{j}",
                f"  %w{j} = sub <32 x i8> %u{j}, {_splat('i8', 32, 32)}",
                f"  %wa{j} = call <32 x i8> @llvm.abs.v32i8(<32 x i8> %w{j}, i1 false)",
            ]
            for half, at in (("a", 192 + 8 * h + 2 * t), ("b", 193 + 8 * h + 2 * t)):
                lines += [
                    f"  %sp{half}{j} = getelementptr i8, ptr %wp, i64 {at}",
                    f"  %s8{half}{j} = load i8, ptr %sp{half}{j}, align 1",
                    f"  %s16{half}{j} = sext i8 %s8{half}{j} to i16",
                ]
            lines += [  # the two halves' int8 scales, each over the 8 lanes of its 16 weights' pair sums
                f"  %sva{j} = insertelement <16 x i16> poison, i16 %s16a{j}, i64 0",
                f"  %svb{j} = insertelement <16 x i16> %sva{j}, i16 %s16b{j}, i64 8",
                f"  %ssc{j} = shufflevector <16 x i16> %svb{j}, <16 x i16> poison, <16 x i32> {mask}",
            ]
    return [(f"%w{j}", "s") for j in range(8)]


def _k_dot_ir(name: str, block_format: str, vnni: bool = False, rows: int = 1) -> str:
    """Q4_K and Q6_K: one super-block of 256 weights a loop step (``nb`` counts blocks of 32), each 32 weights
    against their own q8 block (finer than llama.cpp's one scale per 256 activations); Q4_K's mins through the
    q8 blocks' exact sums, Q6_K's signed 6-bit weights (less 32) times the activations carrying their signs.
    ``rows`` q8 rows as :func:`_dot_ir` takes them: the super-block unpacked once, each row's sums in the one-row
    tile's order."""
    size = 144 if block_format == "Q4_K" else 210
    lines = _rows_entry(name, rows)
    lines += ["  %ns = lshr i64 %nb, 3", "  br label %loop", "loop:", "  %b = phi i64 [0, %entry], [%bn, %loop]"]
    for i in range(rows):
        lines += [
            f"  %acc0_{i} = phi <8 x float> [zeroinitializer, %entry], [%acc8_{i}, %loop]",
            f"  %tail0_{i} = phi float [0.0, %entry], [%tail8_{i}, %loop]",
        ]
    lines += [
        f"  %woff = mul i64 %b, {size}",
        "  %wp = getelementptr i8, ptr %w, i64 %woff",
        f"  %xoff = mul i64 %b, {8 * Q8_BYTES}",
    ]
    chunks = _k_unpack(lines, block_format)
    for i in range(rows):
        lines += [f"  %xp{i} = getelementptr i8, ptr %xrow{i}, i64 %xoff"]
        for j, (weights, kind) in enumerate(chunks):
            t = f"{j}_{i}"
            _q8_block(lines, t, i, j)
            if kind == "u":
                _int_dot(lines, f"_{t}", weights, f"%x{t}", vnni)
                lines += [f"  %s{t} = fmul float %dsc{j}, %dx{t}"]
            else:
                lines += [
                    f"  %xs{t} = call <32 x i8> @llvm.x86.avx2.psign.b(<32 x i8> %x{t}, <32 x i8> {weights})",
                    f"  %p16_{t} = call <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8> %wa{j}, <32 x i8> %xs{t})",
                    f"  %p8_{t} = call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> %p16_{t}, <16 x i16> %ssc{j})",
                    f"  %s{t} = fmul float %d, %dx{t}",
                ]
            lines += [
                f"  %pf{t} = sitofp <8 x i32> %p8_{t} to <8 x float>",
                f"  %s0_{t} = insertelement <8 x float> poison, float %s{t}, i64 0",
                f"  %sv_{t} = shufflevector <8 x float> %s0_{t}, <8 x float> poison, <8 x i32> zeroinitializer",
                f"  %acc{j + 1}_{i} = call <8 x float> @llvm.fma.v8f32(<8 x float> %pf{t}, <8 x float> %sv_{t}, "
                f"<8 x float> %acc{j}_{i})",
            ]
            if block_format == "Q4_K":
                lines += [
                    f"  %tail{j + 1}_{i} = call float @llvm.fma.f32(float %mdm{j}, float %sx{t}, float %tail{j}_{i})"
                ]
            else:
                lines += [f"  %tail{j + 1}_{i} = fadd float %tail{j}_{i}, 0.0"]
    lines += [
        "  %bn = add i64 %b, 1",
        "  %done = icmp eq i64 %bn, %ns",
        "  br i1 %done, label %exit, label %loop",
        "exit:",
    ]
    _rows_exit(lines, rows, "%acc8_", "%tail8_")
    return "\n".join(lines)


_DECLARATIONS = """declare <8 x i32> @llvm.x86.avx512.vpdpbusd.256(<8 x i32>, <8 x i32>, <8 x i32>)
declare <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8>, <32 x i8>)
declare <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16>, <16 x i16>)
declare <32 x i8> @llvm.x86.avx2.psign.b(<32 x i8>, <32 x i8>)
declare <32 x i8> @llvm.abs.v32i8(<32 x i8>, i1)
declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)
declare float @llvm.fma.f32(float, float, float)
declare float @llvm.vector.reduce.fadd.v8f32(float, <8 x float>)"""


def _source(vnni: bool) -> tuple[str, list[str]]:
    """Each format's one-row tile, then its :data:`TILE_ROWS`-row tile, in :data:`FORMATS` order."""
    names, dots = [], []
    for f in FORMATS:
        for rows in (1, TILE_ROWS):
            names.append(f"packrt_block_dot_{f.lower()}_{rows}")
            dots.append((_k_dot_ir if f.endswith("_K") else _dot_ir)(names[-1], f, vnni, rows))
    features = ",".join(f"+{name}" for name in (_VNNI_FEATURES if vnni else _FEATURES))
    return "\n".join([_DECLARATIONS, *dots, f'attributes #0 = {{ nounwind "target-features"="{features}" }}']), names


def _compile(vnni: bool | None = None) -> llvm_tiles.Tiles | None:
    """The dots for this CPU: with one ``vpdpbusd`` per 32 weights where it has AVX512-VNNI (on 256-bit registers,
    the same integer sums: the same bits, Q5_0 ~8% faster on Zen 4), else the AVX2 pair; ``vnni`` forces one."""
    for chosen in (True, False) if vnni is None else (vnni,):
        source, names = _source(chosen)
        tiles = llvm_tiles.compile_tiles(source, names, _VNNI_FEATURES if chosen else _FEATURES)
        if tiles is not None:
            return tiles
    return None


_tiles = llvm_tiles.OnFirstUse(_compile).get


def available() -> bool:
    """Whether the q8 dots may serve: numba's kernels on and a CPU with AVX2, FMA and F16C."""
    return settings.current().numba and compiled.enabled() and _tiles() is not None


def addresses(block_format: str) -> Array:
    """``block_format``'s dots as the compiled loops take them (int64 (3,)): the one-row tile's address, the
    :data:`TILE_ROWS`-row tile's and :data:`TILE_ROWS` (call only where :func:`available` and the format is one of
    :data:`FORMATS`)."""
    tiles = _tiles()
    assert tiles is not None, "block_tiles.addresses called where block_tiles.available() is False"
    at = 2 * FORMATS.index(block_format)
    return np.array([*tiles.addresses[at : at + 2], TILE_ROWS], np.int64)


def quantize_reference(x: Array) -> Array:
    """The q8 rows of float32 ``x`` (rows, k): uint8 (rows, k / 32 * :data:`Q8_BYTES`) (see the module docstring)."""
    blocks = x.astype(np.float32).reshape(x.shape[0], -1, 32)
    amax = np.abs(blocks).max(axis=2)
    d = (amax / np.float32(127)).astype(np.float32)
    inverse = np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax != 0)
    q = np.rint(blocks * inverse[..., None]).astype(np.int8)
    total = q.astype(np.int32).sum(axis=2).astype(np.float32)
    d16 = d.astype(np.float16).astype(np.float32)
    fields = (d16, (d16 * total).astype(np.float32), (d * total).astype(np.float16).astype(np.float32))
    out = np.empty((x.shape[0], blocks.shape[1], Q8_BYTES), np.uint8)
    out[..., :32] = q.view(np.uint8)
    for at, value in zip((32, 36, 40), fields, strict=True):
        out[..., at : at + 4] = value.view(np.uint8).reshape(*value.shape, 4)
    return out.reshape(x.shape[0], -1)


__all__ = ["FORMATS", "Q8_BYTES", "TILE_ROWS", "addresses", "available", "quantize_reference"]
