"""Linears over block-quantized weights (llama.cpp's GGML blocks, :mod:`packrt_base.blocks`), served from the
blocks themselves: no float copy of the weight is ever resident.

- :func:`dequantize` is the numpy reference of every format: (out, row bytes) uint8 -> (out, in) float32,
  each weight as llama.cpp's ``dequantize_row_*`` computes it (float32 products of the fp16 scales and the
  integer quants).
- :class:`PackedBlockLinear` serves ``x @ W^T + b``. A few rows (decode: one token a sequence) are multiplied
  straight from the blocks, so the weight is read once, in blocks (a quarter to a ninth of its float32 bytes):
  on AVX2, as llama.cpp does, with the activations quantized per block of 32 to int8 and integer dot products
  (:mod:`.block_tiles`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K, 0.04-0.06 ns a weight on one Zen 4 core);
  Q5_K (and every format without AVX2) through compiled loops of float32 products (0.2-0.8 ns a weight).
  More rows (prefill), by default (``PACKRT_BLOCK_PREFILL=q8``), are quantized the same way and multiplied on
  AVX512-VNNI a panel of 32 weight rows at a time, the panel unpacked to bytes once per call (:mod:`.q8_gemm`:
  every format, 160-210 GFLOP/s on one Zen 4 core, Q6_K ~120); every row under
  ``PACKRT_BLOCK_PREFILL=float`` (and a weight whose rows are no whole number of 32-row panels) dequantize a
  panel of weight rows at a time into float32 and multiply it on the float32 tiles or through BLAS (~85 GFLOP/s).
- Without numba (``PACKRT_NUMBA=0``) both roads dequantize panels with the numpy reference.

The float roads sum in float32 (the compiled loop in its own order), so their outputs differ from
``x @ dequantize(W)^T`` by rounding only: within :data:`packrt_kernels_cpu.tolerance.ROAD_TOLERANCES` for float32.
The q8 roads differ by the activations' rounding as well (bounded in :mod:`.block_tiles`).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Final

import numpy as np

from packrt_base.arrays import FLOAT32, Array, astype, compute_dtype
from packrt_base.blocks import BLOCK_FORMATS, BlockFormat
from packrt_kernels_cpu import blas, block_tiles, compiled, float_tiles, q8_gemm, settings, threads
from packrt_kernels_cpu.errors import KernelDTypeError, KernelIndexError, KernelShapeError
from packrt_kernels_cpu.scratch import scratch_f32

# Rows of x up to which the compiled row loop serves a call: on the q8 dot tiles, a batch of decode rows each gets the
# bits it gets alone (what keeps a sequence's tokens independent of its batch). At 5-8 rows the tiles take about the
# prefill GEMM's time (Zen 4, 1536x1536: Q4_1 8 rows 460 against 429 us, Q4_K 499 against 558); above, that GEMM
# or dequantized panels.
ROW_LOOP_ROWS: Final = 8
# Weights below which the q8 road runs on the calling thread (a smaller product takes less than waking the pool
# costs). With the dots at ~0.05 ns a weight, SmolLM2-135M's 0.1-0.9M-weight products gain from two threads:
# 66-67 tokens/s of wall time with them on one thread, 73-76 split (2 Zen 3 cores; at 2M they stayed whole).
Q8_PARALLEL: Final = 1 << 16
# Bytes of float32 scratch a panel may take: a few MiB, so it stays in the last-level cache for the GEMM.
PANEL_BYTES: Final = 4 << 20
# Each format's number in the compiled loops.
CODES: Final[dict[str, int]] = {name: code for code, name in enumerate(BLOCK_FORMATS)}
_HALF: Final = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def _half(raw: Array, at: int) -> Array:
    """The fp16 at byte ``at`` of each block (rows of ``raw``) as float32, (blocks, 1)."""
    bits = raw[:, at].astype(np.uint32) | (raw[:, at + 1].astype(np.uint32) << 8)
    return _HALF[bits][:, None]


def _nibbles(qs: Array) -> Array:
    """A run of packed 4-bit quants as llama.cpp lays them out: the low nibbles first, then the high ones."""
    return np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int32)


def _fifth_bits(raw: Array, at: int) -> Array:
    """Q5's 32 high bits (a little-endian uint32 at ``at``), one per weight, as 0 or 16."""
    word = raw[:, at : at + 4].astype(np.uint32) @ np.array([1, 1 << 8, 1 << 16, 1 << 24], np.uint32)
    return (((word[:, None] >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.int32)


def _k_scales(scales: Array) -> tuple[Array, Array]:
    """Q4_K / Q5_K: the 8 six-bit scales and mins packed in 12 bytes, each (blocks, 8)."""
    s = scales.astype(np.int32)
    low_sc, low_m = s[:, 0:4] & 63, s[:, 4:8] & 63
    high_sc = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
    high_m = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return np.concatenate([low_sc, high_sc], axis=1), np.concatenate([low_m, high_m], axis=1)


def _k_quants(raw: Array, quants: Array, fifth: Array | None) -> Array:
    """Q4_K / Q5_K: ``d * scale * q - dmin * min`` per 32-weight sub-block (``fifth``: Q5_K's high bits)."""
    d, dmin = _half(raw, 0), _half(raw, 2)
    sc, mn = _k_scales(raw[:, 4:16])
    chunks = quants.reshape(-1, 4, 32).astype(np.int32)
    q = np.stack([chunks & 15, chunks >> 4], axis=2).reshape(-1, 8, 32)
    if fifth is not None:
        bits = fifth.astype(np.int32)[:, None, :] >> np.arange(8, dtype=np.int32)[None, :, None]
        q = q + ((bits & 1) << 4)
    scale = (d * sc.astype(np.float32))[:, :, None]
    offset = (dmin * mn.astype(np.float32))[:, :, None]
    return (scale * q.astype(np.float32) - offset).reshape(-1, 256)


def _q6_k(raw: Array) -> Array:
    ql, qh = raw[:, 0:128].astype(np.int32), raw[:, 128:192].astype(np.int32)
    sc = raw[:, 192:208].view(np.int8).astype(np.float32)
    d = _half(raw, 208)
    halves = []
    for h in range(2):
        low, high = ql[:, 64 * h : 64 * h + 64], qh[:, 32 * h : 32 * h + 32]
        parts = [
            (low[:, :32] & 15) | ((high & 3) << 4),
            (low[:, 32:] & 15) | (((high >> 2) & 3) << 4),
            (low[:, :32] >> 4) | (((high >> 4) & 3) << 4),
            (low[:, 32:] >> 4) | (((high >> 6) & 3) << 4),
        ]
        halves.extend(parts)
    q = (np.concatenate(halves, axis=1) - 32).astype(np.float32)
    scale = np.repeat(d * sc, 16, axis=1)  # one scale per 16 weights
    return scale * q


def _dequantize_blocks(name: str, raw: Array) -> Array:
    """(blocks, block bytes) uint8 of format ``name`` -> (blocks, weights a block) float32."""
    if name == "Q8_0":
        return _half(raw, 0) * raw[:, 2:34].view(np.int8).astype(np.float32)
    if name == "Q4_0":
        return _half(raw, 0) * (_nibbles(raw[:, 2:18]) - 8).astype(np.float32)
    if name == "Q4_1":
        return _half(raw, 0) * _nibbles(raw[:, 4:20]).astype(np.float32) + _half(raw, 2)
    if name == "Q5_0":
        q = _nibbles(raw[:, 6:22]) | _fifth_bits(raw, 2)
        return _half(raw, 0) * (q - 16).astype(np.float32)
    if name == "Q5_1":
        q = _nibbles(raw[:, 8:24]) | _fifth_bits(raw, 4)
        return _half(raw, 0) * q.astype(np.float32) + _half(raw, 2)
    if name == "Q4_K":
        return _k_quants(raw, raw[:, 16:144], None)
    if name == "Q5_K":
        return _k_quants(raw, raw[:, 48:176], raw[:, 16:48])
    return _q6_k(raw)  # Q6_K, the last of BLOCK_FORMATS


def check_blocks(blocks: Array, block_format: str, in_features: int) -> BlockFormat:
    """The format of ``blocks`` after checking them: uint8 numpy (out, row bytes) of a known format whose rows
    hold ``in_features`` weights. KernelDTypeError / KernelShapeError name what differs."""
    fmt = BLOCK_FORMATS.get(block_format)
    if fmt is None:
        raise KernelShapeError(
            f"block format {block_format!r} is not one these kernels serve; known: {', '.join(BLOCK_FORMATS)}"
        )
    if type(blocks) is not np.ndarray or blocks.dtype != np.uint8:
        raise KernelDTypeError(
            f"{block_format} blocks must be a uint8 numpy array, got {type(blocks).__name__} "
            f"of {getattr(blocks, 'dtype', '?')}"
        )
    try:
        width = fmt.row_bytes(in_features)
    except ValueError as err:
        raise KernelShapeError(str(err)) from err
    if blocks.ndim != 2 or blocks.shape[1] != width:
        raise KernelShapeError(
            f"{block_format} blocks of rows of {in_features} weights must have shape (out_features, {width}), "
            f"got {tuple(blocks.shape)}"
        )
    return fmt


def dequantize(blocks: Array, block_format: str, in_features: int) -> Array:
    """The (out, in_features) float32 weight that ``blocks`` (uint8, (out, row bytes)) hold: the numpy
    reference of every format."""
    fmt = check_blocks(blocks, block_format, in_features)
    raw = np.ascontiguousarray(blocks).reshape(-1, fmt.nbytes)
    values: Array = _dequantize_blocks(fmt.name, raw).astype(np.float32, copy=False)
    return values.reshape(blocks.shape[0], in_features)


# Where each format keeps its fp16 scales (d, and dmin where it has one), in bytes from a block's start.
SCALE_OFFSETS: Final[dict[str, tuple[int, ...]]] = {
    "Q8_0": (0,),
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
}


def random_blocks(rng: np.random.Generator, block_format: str, rows: int, in_features: int) -> Array:
    """Rows of random blocks of ``block_format`` (every quant bit pattern) whose fp16 scales are small, finite
    and normal: what tests and benchmarks multiply by (random bytes would hold NaN and subnormal scales)."""
    fmt = BLOCK_FORMATS[block_format]
    raw = rng.integers(0, 256, (rows, in_features // fmt.values, fmt.nbytes), dtype=np.uint8)
    for at in SCALE_OFFSETS[block_format]:
        scales = rng.uniform(0.001, 0.02, raw.shape[:2]).astype(np.float16)
        raw[..., at : at + 2] = scales.view(np.uint8).reshape(*raw.shape[:2], 2)
    return raw.reshape(rows, -1)


def _loops() -> Any:
    return compiled.module("packrt_kernels_cpu._numba_blocks")


def _q8_loops() -> Any:
    return compiled.module("packrt_kernels_cpu._numba_q8_gemm")


_copies: dict[tuple[int, int, tuple[int, ...]], weakref.ref[np.ndarray[Any, Any]]] = {}
_copies_lock = threading.Lock()


def _owned_copy(blocks: Array) -> tuple[Array, bool]:
    """``(copy, shared)``: a C-contiguous uint8 copy of ``blocks`` for an owned pack. Where a live pack
    already holds a copy made from the same place (address, size, shape) and its bytes still equal ``blocks``,
    that copy is returned (``shared`` True) instead of a second one: a tied weight, such as a GGUF's token
    embedding and the LM head that reads its blocks, packs once. A pack's blocks are never written, so sharing
    them is safe; the byte comparison keeps a pack from serving values its source no longer holds."""
    source = np.asarray(blocks)
    key = (int(source.__array_interface__["data"][0]), int(source.nbytes), tuple(source.shape))
    with _copies_lock:
        found = _copies.get(key)
        earlier = None if found is None else found()
        if earlier is not None and np.array_equal(earlier, source):
            return earlier, True
        own = np.array(source, dtype=np.uint8, order="C", copy=True)  # writeable: numba compiles read-only apart

        def forget(ref: weakref.ref[np.ndarray[Any, Any]], key: tuple[int, int, tuple[int, ...]] = key) -> None:
            with _copies_lock:
                if _copies.get(key) is ref:
                    del _copies[key]

        _copies[key] = weakref.ref(own, forget)
        return own, False


class PackedBlockLinear:
    """``x @ W^T + b`` with ``W`` kept as quantized blocks (see the module docstring); ``b`` float32 or None.

    ``owned``: the blocks are the pack's own copy (an owned pack, which ``unpack`` gives back); otherwise a
    view of the declared array (borrowed), for which :attr:`nbytes` is 0. ``shared``: the owned blocks are another
    pack's copy of the same weight (a tied one: :func:`_owned_copy`), counted in that pack's :attr:`nbytes`, not
    this one's."""

    def __init__(
        self, blocks: Array, fmt: BlockFormat, in_features: int, b: Array | None, owned: bool, shared: bool = False
    ) -> None:
        self.blocks, self.format, self.b, self.owned, self.shared = blocks, fmt, b, owned, shared
        self.out_features, self.in_features = int(blocks.shape[0]), in_features
        self.code = CODES[fmt.name]
        self._chosen: tuple[Any, tuple[Any, Array | None, tuple[int, int] | None]] | None = None  # (settings, _road())
        bias = 0 if b is None else int(b.nbytes)
        self.nbytes = (bias + (0 if shared else int(blocks.nbytes))) if owned else 0

    def unpack(self) -> tuple[Array, Array | None]:
        """New arrays equal bit for bit to those packed: (blocks, bias)."""
        return self.blocks.copy(), None if self.b is None else self.b.copy()

    def panel_rows(self) -> int:
        """Weight rows dequantized at a time on the panel road (their float32 fits :data:`PANEL_BYTES`)."""
        return max(1, min(self.out_features, PANEL_BYTES // (4 * self.in_features)))

    def _road(self) -> tuple[Any, Array | None, tuple[int, int] | None]:
        """(the compiled loops or None, the q8 dot tiles' addresses or None, the VNNI block GEMM's tiles or None) under
        the current settings, decided once per settings object: a decode step asks on every layer, and the answer
        changes only with the settings."""
        now = settings.current()
        cached = self._chosen
        if cached is not None and cached[0] is now:
            return cached[1]
        loops = _loops() if compiled.enabled() else None
        tile = (
            block_tiles.addresses(self.format.name)
            if self.format.name in block_tiles.FORMATS and block_tiles.available()
            else None
        )
        gemm = (
            q8_gemm.addresses(self.format.name)
            if now.block_prefill == "q8"
            and self.format.name in q8_gemm.FORMATS
            and self.out_features % 32 == 0
            and q8_gemm.available()
            else None
        )
        if tile is not None and blas.provider() == "numpy":
            threads.pool_carries_products()
        self._chosen = (now, (loops, tile, gemm))
        return loops, tile, gemm

    def q8_tiles(self) -> Array | None:
        """The addresses of the q8 dot tiles (:func:`.block_tiles.addresses`) :meth:`forward` serves a few float32
        rows on (up to :data:`ROW_LOOP_ROWS`) under the current settings, or None where those rows take another
        road: a kernel that calls the tiles itself (:mod:`.decode`) gives the bits ``forward`` gives."""
        loops, tile, _ = self._road()
        return tile if loops is not None else None

    def forward(self, x: Array, /, out: Array | None = None) -> Array:
        """``x @ W^T + b`` of float ``x`` (..., in_features), in x's dtype (float32 arithmetic for half
        inputs; float64 inputs multiply in float64). ``out``: a float32 (rows, out_features) buffer to write
        into when ``x`` is 2-D float32."""
        dt = np.dtype(x.dtype)
        lead = tuple(x.shape[:-1])
        cd = compute_dtype(dt)
        x2 = np.ascontiguousarray(astype(x, cd)).reshape(-1, self.in_features)
        if out is None or out.dtype != cd or out.shape != (x2.shape[0], self.out_features):
            out = np.empty((x2.shape[0], self.out_features), cd)
        work = self.out_features * self.in_features
        loops, tile, gemm = self._road()  # asked on every call: choosing the q8 road also quiets OpenBLAS first
        if cd != FLOAT32:
            loops, tile, gemm = None, None, None
        elif x2.shape[0] <= ROW_LOOP_ROWS:
            gemm = None
        else:
            loops, tile = None, None
            gemm = gemm if out.flags.c_contiguous else None
        if gemm is not None:
            args = (x2, self.blocks, self.code, _HALF, gemm[0], gemm[1], out)
            compiled.launch("q8_gemm", x2.shape[0] * work, *args, loops=_q8_loops(), least=1 << 20)
        elif tile is not None:
            compiled.launch("block_q8_rows", work, x2, self.blocks, tile, out, loops=loops, least=Q8_PARALLEL)
        elif loops is not None:
            compiled.launch("block_rows", work, x2, self.blocks, self.code, _HALF, out, loops=loops, least=1 << 16)
        else:
            self._panels(x2, out)
        if self.b is not None:
            out += astype(self.b, cd)
        shaped = out if x.ndim == 2 else out.reshape((*lead, self.out_features))
        return shaped if dt == cd else astype(shaped, dt)

    def _panels(self, x2: Array, out: Array) -> None:
        """``out = x2 @ W^T`` a dequantized panel of weight rows at a time: on the float32 tiles where they run
        (the rows dequantized into their panel layout on packrt's pool), else through the BLAS."""
        tiles = (
            float_tiles.addresses() if x2.dtype == np.float32 and self.out_features % float_tiles.PANEL == 0 else None
        )
        if tiles is not None and out.flags.c_contiguous:
            args = (tiles, x2, self.blocks, self.code, _HALF, out, compiled.pool_size())
            work = x2.shape[0] * self.out_features * self.in_features
            compiled.launch("block_tiles", work, *args, loops=_loops(), least=1 << 20)
            return
        step = self.panel_rows()
        compiled_road = compiled.enabled()
        for r0 in range(0, self.out_features, step):
            r1 = min(r0 + step, self.out_features)
            if compiled_road:
                # one buffer for every panel, kept by the thread: a fresh 4 MiB array page-faulted in each time
                panel = scratch_f32((r1 - r0, self.in_features))
                compiled.launch(
                    "dequantize_rows",
                    (r1 - r0) * self.in_features,
                    self.blocks[r0:r1],
                    self.code,
                    _HALF,
                    panel,
                    loops=_loops(),
                    least=1 << 16,
                )
            else:
                panel = _dequantize_blocks(self.format.name, self.blocks[r0:r1].reshape(-1, self.format.nbytes))
                panel = panel.reshape(r1 - r0, self.in_features)
            w = panel if x2.dtype == np.float32 else panel.astype(x2.dtype)
            blas.matmul(x2, w.T, out=out[:, r0:r1])


class PackedBlockEmbedding:
    """Rows of an embedding table kept as quantized blocks: ``forward(ids)`` dequantizes the rows it picks (float32,
    ``ids.shape + (embedding_dim,)``), the blocks of the others untouched. ``owned`` and ``shared``: as
    :class:`PackedBlockLinear`."""

    def __init__(self, blocks: Array, fmt: BlockFormat, embedding_dim: int, owned: bool, shared: bool = False) -> None:
        self.blocks, self.format, self.embedding_dim, self.owned, self.shared = (
            blocks,
            fmt,
            embedding_dim,
            owned,
            shared,
        )
        self.code = CODES[fmt.name]
        self.nbytes = int(blocks.nbytes) if owned and not shared else 0

    def unpack(self) -> Array:
        """A new array equal bit for bit to the blocks packed."""
        return self.blocks.copy()

    def forward(self, ids: Array, /) -> Array:
        """The rows of integer ``ids`` (any shape); KernelIndexError naming the first id outside the table."""
        flat = np.asarray(ids).reshape(-1)
        rows = int(self.blocks.shape[0])
        outside = (flat < 0) | (flat >= rows)
        if outside.any():
            raise KernelIndexError(
                f"embedding id {int(flat[outside][0])} is outside the table of {rows} rows "
                f"(ids must lie in [0, {rows}))"
            )
        picked = np.ascontiguousarray(self.blocks[flat])
        out = np.empty((flat.shape[0], self.embedding_dim), np.float32)
        if compiled.enabled():
            _loops().dequantize_rows_serial(picked, self.code, _HALF, out)
        else:
            out[...] = _dequantize_blocks(self.format.name, picked.reshape(-1, self.format.nbytes)).reshape(out.shape)
        return out.reshape((*np.shape(ids), self.embedding_dim))


def pack_block_embedding(blocks: Array, block_format: str, embedding_dim: int) -> PackedBlockEmbedding:
    """An owned pack: a C-contiguous copy of the table's blocks (one a tied head's pack made already, if any:
    :func:`_owned_copy`)."""
    fmt = check_blocks(blocks, block_format, embedding_dim)
    own, shared = _owned_copy(blocks)
    return PackedBlockEmbedding(own, fmt, embedding_dim, True, shared)


def borrow_block_embedding(blocks: Array, block_format: str, embedding_dim: int) -> PackedBlockEmbedding:
    """A view over the declared blocks, copying nothing."""
    fmt = check_blocks(blocks, block_format, embedding_dim)
    return PackedBlockEmbedding(blocks, fmt, embedding_dim, False)


def _bias(b: Array | None, out_features: int) -> Array | None:
    if b is None:
        return None
    if type(b) is not np.ndarray or b.shape != (out_features,):
        raise KernelShapeError(f"bias must be a numpy array of shape ({out_features},), got {getattr(b, 'shape', b)}")
    return np.ascontiguousarray(astype(b, compute_dtype(b.dtype)))


def pack_block_linear(blocks: Array, block_format: str, in_features: int, b: Array | None = None) -> PackedBlockLinear:
    """An owned pack: a C-contiguous copy of the blocks (one a tied embedding's pack made already, if any:
    :func:`_owned_copy`), and of the bias, widened to float32 from half."""
    fmt = check_blocks(blocks, block_format, in_features)
    bias = _bias(b, int(blocks.shape[0]))
    own, shared = _owned_copy(blocks)
    return PackedBlockLinear(own, fmt, in_features, None if bias is None else bias.copy(), owned=True, shared=shared)


def borrow_block_linear(
    blocks: Array, block_format: str, in_features: int, b: Array | None = None
) -> PackedBlockLinear:
    """A view over the declared blocks, copying nothing (a non-contiguous array is copied for the call)."""
    fmt = check_blocks(blocks, block_format, in_features)
    return PackedBlockLinear(
        np.ascontiguousarray(blocks), fmt, in_features, _bias(b, int(blocks.shape[0])), owned=False
    )


__all__ = [
    "CODES",
    "PANEL_BYTES",
    "ROW_LOOP_ROWS",
    "SCALE_OFFSETS",
    "PackedBlockEmbedding",
    "PackedBlockLinear",
    "borrow_block_embedding",
    "borrow_block_linear",
    "random_blocks",
    "check_blocks",
    "dequantize",
    "pack_block_linear",
]
