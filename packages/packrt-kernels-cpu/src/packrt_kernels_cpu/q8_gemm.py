"""The prefill GEMM over quantized blocks on AVX512-VNNI: q8 activations times weights unpacked to bytes a panel
at a time, one ``vpdpbusd`` per 4 inputs of 16 outputs, each block's integer sums scaled into float32.

A prompt's rows multiply each weight many times, so the weight is worth rearranging per call, but not worth a
float32 copy: the float panel road (:func:`._numba_blocks.block_tiles`) dequantizes a panel and runs the float32
tiles, ~80 GFLOP/s on one Zen 4 core; here the same panel is unpacked to unsigned bytes, the activations are
quantized per block of 32 to int8 (the q8 rows of :mod:`.block_tiles`, as llama.cpp quantizes a prompt's), and
the products run on the integer unit, four times as many per instruction.

Every 32-weight block of every format reads ``w = s * u + c``: ``u`` an unsigned byte, ``s`` and ``c`` float32 per
block and output (Q8_0: ``u = q + 128``, ``c = -128 d``; Q4_0 and Q5_0: the quants as stored, ``c = -8 d`` or
``-16 d``; Q4_1 and Q5_1: ``c`` the block's min; Q4_K and Q5_K: ``s = d * scale``, ``c = -dmin * min`` of each
sub-block of 32). A block of a q8 row (int8 ``q``, scale ``d_x``) then contributes
``d_x * (s * sum(u q) + c * sum(q))``: the integer dot product is exact, and ``d_x * sum(q)`` is the q8 row's own
field (exact, or through fp16 for the formats with a min, as llama.cpp's ``q8_1`` stores it). Q6_K, whose scales
go per 16 weights, has a tile of its own (:func:`_q6k_tile_ir`).

The unpacked panel of 32 outputs holds, per block of 32 inputs, :data:`PANEL_BLOCK` bytes: eight groups of 4
inputs, each the 4 bytes of every output side by side (128 bytes, as ``vpdpbusd`` reads them), then the 32
``s`` and the 32 ``c``. A tile multiplies :data:`ROWS` q8 rows (or 1) by one panel over all blocks into float32.
"""

from __future__ import annotations

from typing import Any, Final

from packrt_kernels_cpu import block_tiles, compiled, llvm_tiles, settings

Array = Any
ROWS: Final = 4  # q8 rows a full tile multiplies
PANEL_BLOCK: Final = 1280  # bytes of an unpacked panel per block of 32 inputs: 1024 of weights, 32 s, 32 c
FORMATS: Final[tuple[str, ...]] = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K")
_MINS: Final = ("Q4_1", "Q5_1")  # formats whose c multiplies the q8 row's fp16 sum (llama.cpp's q8_1)
_FEATURES = ("avx512f", "avx512bw", "avx512vnni")
_Q8 = block_tiles.Q8_BYTES


def _splat(name: str, scalar: str, value: str, lanes: int = 16) -> list[str]:
    vector = f"<{lanes} x {scalar}>"
    return [
        f"  %{name}i = insertelement {vector} poison, {scalar} {value}, i32 0",
        f"  %{name} = shufflevector {vector} %{name}i, {vector} poison, <{lanes} x i32> zeroinitializer",
    ]


def _products(name: str, rows: int, block_bytes: int, signed_weights: bool) -> list[str]:
    """The tile's start and, per block, its integer sums: ``%i{r}_{c}_{g}`` after group ``g`` of 4 inputs, for
    row ``r`` and the 16 outputs ``c``. Unsigned weights meet the q8 bytes as they are; signed ones (Q6_K) meet
    them made unsigned (an xor of 0x80 per byte) and restart their sums at the block's second half (``g = 4``)."""
    i32 = "<16 x i32>"
    flip = "<" + ", ".join(["i32 -2139062144"] * 16) + ">"  # 0x80808080 in every lane
    lines = [
        f"define void @{name}(ptr %out, i64 %ldo, ptr %a, i64 %lda, ptr %b, i64 %nb) #0 {{",
        "entry:",
        *llvm_tiles.row_pointers(rows, 1),
        "  br label %loop",
        "loop:",
        "  %blk = phi i64 [0, %entry], [%blkn, %loop]",
        *llvm_tiles.accumulators(rows, "<16 x float>", "g"),
        f"  %boff = mul i64 %blk, {block_bytes}",
        "  %bp = getelementptr i8, ptr %b, i64 %boff",
        f"  %xoff = mul i64 %blk, {_Q8}",
        *(f"  %xr{r} = getelementptr i8, ptr %arow{r}, i64 %xoff" for r in range(rows)),
    ]
    for g in range(8):
        for c in range(2):
            lines += [
                f"  %wp{g}_{c} = getelementptr i8, ptr %bp, i64 {128 * g + 64 * c}",
                f"  %w{g}_{c} = load {i32}, ptr %wp{g}_{c}, align 1",
            ]
        for r in range(rows):
            lines += [
                f"  %xp{r}_{g} = getelementptr i8, ptr %xr{r}, i64 {4 * g}",
                f"  %xs{r}_{g} = load i32, ptr %xp{r}_{g}, align 1",
                *_splat(f"xv{r}_{g}", "i32", f"%xs{r}_{g}"),
            ]
            if signed_weights:
                lines.append(f"  %xu{r}_{g} = xor {i32} %xv{r}_{g}, {flip}")
            for c in range(2):
                fresh = g == 0 or (signed_weights and g == 4)
                before = "zeroinitializer" if fresh else f"%i{r}_{c}_{g - 1}"
                # vpdpbusd's first operand is the unsigned one
                pair = f"{i32} %xu{r}_{g}, {i32} %w{g}_{c}" if signed_weights else f"{i32} %w{g}_{c}, {i32} %xv{r}_{g}"
                lines.append(f"  %i{r}_{c}_{g} = call {i32} @llvm.x86.avx512.vpdpbusd.512({i32} {before}, {pair})")
    return lines


_NEXT_BLOCK: Final = [
    "  %blkn = add i64 %blk, 1",
    "  %done = icmp eq i64 %blkn, %nb",
    "  br i1 %done, label %exit, label %loop",
]


def _tile_ir(name: str, rows: int, sum_at: int) -> str:
    """A tile of ``rows`` q8 rows by one unpacked panel over ``%nb`` blocks: ``out[r, 0:32]`` float32, rows
    ``ldo`` floats apart; the q8 rows ``lda`` bytes apart; ``sum_at``: the byte of a q8 block whose float32
    (``d_x * sum(q)``) multiplies ``c``."""
    i32, f32 = "<16 x i32>", "<16 x float>"
    lines = _products(name, rows, PANEL_BLOCK, signed_weights=False)
    for c in range(2):
        lines += [
            f"  %sp{c} = getelementptr i8, ptr %bp, i64 {1024 + 64 * c}",
            f"  %s{c} = load {f32}, ptr %sp{c}, align 1",
            f"  %cp{c} = getelementptr i8, ptr %bp, i64 {1152 + 64 * c}",
            f"  %c{c} = load {f32}, ptr %cp{c}, align 1",
        ]
    for r in range(rows):
        lines += [
            f"  %dp{r} = getelementptr i8, ptr %xr{r}, i64 32",
            f"  %ds{r} = load float, ptr %dp{r}, align 1",
            *_splat(f"dv{r}", "float", f"%ds{r}"),
            f"  %tp{r} = getelementptr i8, ptr %xr{r}, i64 {sum_at}",
            f"  %ts{r} = load float, ptr %tp{r}, align 1",
            *_splat(f"tv{r}", "float", f"%ts{r}"),
        ]
        for c in range(2):
            lines += [
                f"  %fi{r}_{c} = sitofp {i32} %i{r}_{c}_7 to {f32}",
                f"  %fd{r}_{c} = fmul {f32} %fi{r}_{c}, %dv{r}",
                f"  %h{r}_{c} = call {f32} @llvm.fma.v16f32({f32} %fd{r}_{c}, {f32} %s{c}, {f32} %acc{r}_{c})",
                f"  %g{r}_{c} = call {f32} @llvm.fma.v16f32({f32} %c{c}, {f32} %tv{r}, {f32} %h{r}_{c})",
            ]
    lines += [*_NEXT_BLOCK, *llvm_tiles.stores(rows, f32, "g")]
    return "\n".join(lines)


Q6K_BLOCK: Final = 1408  # Q6_K's unpacked bytes per block of 32 inputs: 1024 of signed weights, 32 s, 32 s, 32 c


def _q6k_tile_ir(name: str, rows: int) -> str:
    """Q6_K's tile: its weights ``d * scale * (q - 32)`` carry a scale per 16 inputs, so each block of 32 sums its
    halves apart. The weights are signed bytes (``q - 32``) and the activations made unsigned (``q8 + 128``,
    an xor of the broadcast); the 128 times each half's weight sum this adds is taken off through ``c``, computed
    with the panel (``c = -128 (s_lo sum_lo + s_hi sum_hi)``), times the q8 scale ``d_x``."""
    i32, f32 = "<16 x i32>", "<16 x float>"
    lines = _products(name, rows, Q6K_BLOCK, signed_weights=True)
    for c in range(2):
        for k, at in (("slo", 1024), ("shi", 1152), ("c", 1280)):
            lines += [
                f"  %{k}p{c} = getelementptr i8, ptr %bp, i64 {at + 64 * c}",
                f"  %{k}{c} = load {f32}, ptr %{k}p{c}, align 1",
            ]
    for r in range(rows):
        lines += [
            f"  %dp{r} = getelementptr i8, ptr %xr{r}, i64 32",
            f"  %ds{r} = load float, ptr %dp{r}, align 1",
            *_splat(f"dv{r}", "float", f"%ds{r}"),
        ]
        for c in range(2):
            lines += [
                f"  %fl{r}_{c} = sitofp {i32} %i{r}_{c}_3 to {f32}",
                f"  %fh{r}_{c} = sitofp {i32} %i{r}_{c}_7 to {f32}",
                f"  %e{r}_{c} = fmul {f32} %fl{r}_{c}, %slo{c}",
                f"  %t{r}_{c} = call {f32} @llvm.fma.v16f32({f32} %fh{r}_{c}, {f32} %shi{c}, {f32} %e{r}_{c})",
                f"  %u{r}_{c} = fadd {f32} %t{r}_{c}, %c{c}",
                f"  %g{r}_{c} = call {f32} @llvm.fma.v16f32({f32} %u{r}_{c}, {f32} %dv{r}, {f32} %acc{r}_{c})",
            ]
    lines += [*_NEXT_BLOCK, *llvm_tiles.stores(rows, f32, "g")]
    return "\n".join(lines)


# (name, rows, byte of the sum field): the full and the one-row tile, for exact sums and for q8_1's fp16 ones
_TILES: Final = tuple(
    (f"packrt_q8_gemm_r{rows}_{kind}", rows, at) for kind, at in (("exact", 36), ("fp16", 40)) for rows in (ROWS, 1)
)
_Q6K_TILES: Final = tuple((f"packrt_q8_gemm_r{rows}_q6_k", rows) for rows in (ROWS, 1))
_NAMES: Final = [name for name, _, _ in _TILES] + [name for name, _ in _Q6K_TILES]  # compiled in this order


def _compile() -> llvm_tiles.Tiles | None:
    source = "\n".join(
        [
            "declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)",
            "declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)",
            *(_tile_ir(name, rows, at) for name, rows, at in _TILES),
            *(_q6k_tile_ir(name, rows) for name, rows in _Q6K_TILES),
            'attributes #0 = { nounwind "target-features"="+avx512f,+avx512bw,+avx512vnni,+fma" }',
        ]
    )
    return llvm_tiles.compile_tiles(source, _NAMES, _FEATURES)


_tiles = llvm_tiles.OnFirstUse(_compile).get


def available() -> bool:
    """Whether the VNNI block GEMM may serve: numba's kernels on and a CPU with AVX512-VNNI."""
    return settings.current().numba and compiled.enabled() and _tiles() is not None


def addresses(block_format: str) -> tuple[int, int]:
    """The (full, one-row) tiles for ``block_format`` (call only where :func:`available` and the format is one
    of :data:`FORMATS`)."""
    tiles = _tiles()
    assert tiles is not None, "q8_gemm.addresses called where q8_gemm.available() is False"
    kind = "q6_k" if block_format == "Q6_K" else "fp16" if block_format in _MINS else "exact"
    full, one = (_NAMES.index(f"packrt_q8_gemm_r{rows}_{kind}") for rows in (ROWS, 1))
    return int(tiles.addresses[full]), int(tiles.addresses[one])


__all__ = ["FORMATS", "PANEL_BLOCK", "Q6K_BLOCK", "ROWS", "addresses", "available"]
