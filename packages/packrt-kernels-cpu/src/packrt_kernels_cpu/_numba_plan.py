"""The compiled loops of the serving plan (:mod:`packrt_kernels_cpu.plan`): a GEMM's epilogue (bias and
activation, in place), a residual add with the norm after it, and attention's masked softmax shift.

Each is the loop of :mod:`._numba_kernels` it fuses, called on the same rows, so a fused pass gives the
bits of the passes it replaces: the activations' and norms' arithmetic is written once, there. In-place
loops read and write through one array, so LLVM's overlap check never sends them to the scalar loop.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from packrt_kernels_cpu._numba_kernels import (
    GELU_ERF,
    GELU_TANH,
    RELU,
    SILU,
    _layer_norm_rows,
    _reducing,
    _rms_norm_rows,
    _row_max,
    _row_top,
    _serial,
    activate_in_place,
    exp_value,
    tasks,
    twins,
)
from packrt_kernels_cpu._numba_tiles import call_tile

Array = Any
NO_ACTIVATION = -1  # the epilogue adds the bias only
_NO_BIAS = np.empty(0, np.float32)
__all__ = ["GELU_ERF", "GELU_TANH", "NO_ACTIVATION", "RELU", "SILU"]


@_serial
def _epilogue_rows(op: int, x: Array, b: Array, lo: int, hi: int) -> None:
    """Rows lo:hi of ``x`` (rows, n) become ``act(x + b)`` in place (``b`` empty: no bias; ``op``
    NO_ACTIVATION: the bias only). ``x + b`` is one IEEE add, as numpy's ``+=`` is."""
    n = x.shape[1]
    for r in range(lo, hi):
        row = x[r]
        if op != NO_ACTIVATION:
            activate_in_place(op, row, b)
        elif b.shape[0] > 0:
            for j in range(n):
                row[j] = row[j] + b[j]


def _epilogue(op: int, x: Array, b: Array) -> None:
    units = x.shape[0]
    split = tasks(units)
    for r in numba.prange(split):
        _epilogue_rows(op, x, b, units * r // split, units * (r + 1) // split)


epilogue, epilogue_serial = twins(_epilogue)


@_serial
def _residual_norm_rows(
    rms: bool, x: Array, res: Array, w: Array, b: Array, eps: np.float32, out: Array, lo: int, hi: int
) -> None:
    """``res[r] += x[r]``, then ``out[r]`` the norm of ``res[r]``, for rows lo:hi: the row is still in
    cache when the norm reads it back. The norm is :mod:`._numba_kernels`' own loop."""
    n = x.shape[1]
    for r in range(lo, hi):
        row, add = res[r], x[r]
        for j in range(n):
            row[j] = row[j] + add[j]
        if rms:
            _rms_norm_rows(res, w, eps, out, r, r + 1)
        else:
            _layer_norm_rows(res, w, b, eps, out, r, r + 1)


def _residual_norm(rms: bool, x: Array, res: Array, w: Array, b: Array, eps: np.float32, out: Array) -> None:
    units = x.shape[0]
    split = tasks(units)
    for r in numba.prange(split):
        _residual_norm_rows(rms, x, res, w, b, eps, out, units * r // split, units * (r + 1) // split)


residual_norm, residual_norm_serial = twins(_residual_norm)


@_serial
def _masked_shift_rows(x: Array, keys: Array, per_mask: int, lo: int, hi: int) -> None:
    """Rows lo:hi of the scores ``x`` (rows, S): keys whose ``keys[r // per_mask]`` entry is False become
    ``-inf``, then the row drops its max (0 for a row with no key left, whose exponentials are then 0):
    attention's mask and softmax's first step in one pass."""
    n = x.shape[1]
    neg = np.float32(-np.inf)
    for r in range(lo, hi):
        row, seen = x[r], keys[r // per_mask]
        for j in range(n):
            row[j] = row[j] if seen[j] else neg
        top = _row_max(row)
        if top == neg:
            top = np.float32(0.0)
        for j in range(n):
            row[j] -= top


def _masked_shift(x: Array, keys: Array, per_mask: int) -> None:
    units = x.shape[0]
    split = tasks(units)
    for r in numba.prange(split):
        _masked_shift_rows(x, keys, per_mask, units * r // split, units * (r + 1) // split)


masked_shift, masked_shift_serial = twins(_masked_shift)


@_serial
def _gated_rows(op: int, x: Array, out: Array, lo: int, hi: int) -> None:
    """``out[r] = act(x[r, :n]) * x[r, n:]`` for rows lo:hi: the activation is :mod:`._numba_kernels`' own,
    applied to ``out`` in place, then one multiply per element."""
    n = out.shape[1]
    for r in range(lo, hi):
        row, gate, up = out[r], x[r, :n], x[r, n:]
        for j in range(n):
            row[j] = gate[j]
        activate_in_place(op, row, _NO_BIAS)
        for j in range(n):
            row[j] = row[j] * up[j]


def _gated(op: int, x: Array, out: Array) -> None:
    units = x.shape[0]
    split = tasks(units)
    for r in numba.prange(split):
        _gated_rows(op, x, out, units * r // split, units * (r + 1) // split)


gated, gated_serial = twins(_gated)


@_serial
def _float_panels(tiles: Array, out: Array, x: Array, panels: Array, lo: int, hi: int) -> None:
    """Panels lo:hi of :func:`packrt_kernels_cpu.float_tiles.gemm` (``out`` (M, N) float32 with contiguous rows,
    ``x`` (M, K) C-contiguous float32, ``panels`` (N / 32, K, 32)): 8-row tiles down the rows, then the ``M % 8``
    left. ``tiles`` holds the tiles' addresses (``float_tiles._SHAPES``): ``tiles[r - 1]`` computes r rows
    of one panel, ``tiles[8]`` one row of 4 panels, ``tiles[9]`` two rows of 2. Rows go in blocks of 64,
    each across every panel, so a block's activations stay in L2 while the panels stream past."""
    rows, k = x.shape
    ldo, lda = out.strides[0] // 4, k  # out may be a run of columns of a wider array (its rows' stride)
    o, a, b = out.ctypes.data, x.ctypes.data, panels.ctypes.data
    whole = rows // 8
    left = rows - whole * 8
    for first in range(0, whole, 8):
        last = min(whole, first + 8)
        for p in range(lo, hi):
            column = o + p * 32 * 4
            panel = b + p * k * 32 * 4
            for i in range(first, last):
                call_tile(tiles[7], column + i * 8 * ldo * 4, ldo, a + i * 8 * lda * 4, lda, panel, k)
    if left:
        row_out, row_a = o + whole * 8 * ldo * 4, a + whole * 8 * lda * 4
        p = lo
        if left <= 2:  # one or two rows: 4 or 2 panels at a time, for 8 chains of FMAs instead of 2 or 4
            width = 4 // left
            while p + width <= hi:
                call_tile(tiles[7 + left], row_out + p * 32 * 4, ldo, row_a, lda, b + p * k * 32 * 4, k)
                p += width
        for q in range(p, hi):
            call_tile(tiles[left - 1], row_out + q * 32 * 4, ldo, row_a, lda, b + q * k * 32 * 4, k)


def _float_tiles(tiles: Array, out: Array, x: Array, panels: Array, threads: int) -> None:
    # One run of whole panels per thread, so each keeps _float_panels' row blocks (the serial twin: one
    # run of every panel). The thread count is an argument: numba.get_num_threads() compiled in would
    # keep numba from caching this loop.
    count = panels.shape[0]
    chunks = tasks(min(threads, count))
    for c in numba.prange(chunks):
        _float_panels(tiles, out, x, panels, count * c // chunks, count * (c + 1) // chunks)


float_tiles, float_tiles_serial = twins(_float_tiles)


# A head's dot products and weighted sums may add their terms in any order (so they vectorise).
_summing = numba.njit(cache=True, fastmath={"nnan", "nsz", "reassoc", "contract"}, nogil=True, error_model="numpy")


@_summing
def _head_scores(
    qh: Array, kh: Array, first: int, stop: int, seen: Array, scale: np.float32, cap: np.float32, scores: Array
) -> None:
    """``scores[first:stop]``: the query ``qh`` against keys ``kh`` (capacity, dim), scaled, soft-capped when
    ``cap`` > 0, ``-inf`` where ``seen`` (empty: every key) is False."""
    dim = qh.shape[0]
    for t in range(first, stop):
        if seen.shape[0] > 0 and not seen[t]:
            scores[t] = -np.inf
            continue
        s = np.float32(0)
        for d in range(dim):
            s += qh[d] * kh[t, d]
        s *= scale
        scores[t] = cap * np.tanh(s / cap) if cap > 0 else s


@_serial
def _exp_shifted(scores: Array, first: int, stop: int) -> np.float32:
    """``scores[first:stop]`` become ``exp(score - max)``; returns their sum (0 where every score is -inf)."""
    top = np.float32(-np.inf)
    for t in range(first, stop):
        top = max(top, scores[t])
    if top == -np.inf:
        return np.float32(0)
    total = np.float32(0)
    for t in range(first, stop):
        e = np.exp(scores[t] - top)
        scores[t] = e
        total += e
    return total


@_summing
def _weighted_values(p: Array, vh: Array, first: int, stop: int, acc: Array) -> None:
    """``acc`` (dim,) += the values ``vh`` (capacity, dim) weighted by ``p[first:stop]``."""
    dim = acc.shape[0]
    for t in range(first, stop):
        w = p[t]
        for d in range(dim):
            acc[d] += w * vh[t, d]


@_serial
def _decode_heads(
    q: Array,
    keys: Array,
    values: Array,
    first: int,
    stop: int,
    mask: Array,
    scale: np.float32,
    cap: np.float32,
    out: Array,
    lo: int,
    hi: int,
) -> None:
    """Heads lo:hi (counted over batch * heads) of a one-query attention step: each head's scores over keys
    first:stop of its group's key head, soft-capped, masked (``mask`` (batch, stop), or empty for none), a
    softmax, and the values they weight; a head that sees no key gets zeros. The caches are whole buffers
    (batch, kv_heads, capacity, head_dim), C-contiguous: the loops over a key's features vectorise only where
    numba knows they are."""
    heads, dim = q.shape[1], q.shape[2]
    group = heads // keys.shape[1]
    scores = np.empty(stop, np.float32)
    acc = np.empty(dim, np.float32)
    everyone = np.empty(0, np.bool_)
    for u in range(lo, hi):
        b, h = u // heads, u % heads
        seen = mask[b] if mask.shape[0] > 0 else everyone
        _head_scores(q[b, h], keys[b, h // group], first, stop, seen, scale, cap, scores)
        total = _exp_shifted(scores, first, stop)
        acc[:] = 0
        if total > 0:
            _weighted_values(scores, values[b, h // group], first, stop, acc)
            acc *= np.float32(1) / total
        out[b, h * dim : (h + 1) * dim] = acc


def _decode_attention(
    q: Array,
    keys: Array,
    values: Array,
    first: int,
    stop: int,
    mask: Array,
    scale: np.float32,
    cap: np.float32,
    out: Array,
) -> None:
    units = q.shape[0] * q.shape[1]
    split = tasks(units)
    for r in numba.prange(split):
        lo, hi = units * r // split, units * (r + 1) // split
        _decode_heads(q, keys, values, first, stop, mask, scale, cap, out, lo, hi)


decode_attention, decode_attention_serial = twins(_decode_attention)


@_reducing
def _exp_sum(row: Array, top: Any) -> Any:
    """``row`` becomes ``exp(row - top)`` in place (:func:`exp_value`, vectorised); returns the sum."""
    total = np.float32(0)
    for s in range(row.shape[0]):
        e = exp_value(row[s] - top)
        row[s] = e
        total += e
    return total


@_serial
def _tile_attention_heads(
    tiles: Array, qkv: Array, mask: Array, batch: int, heads: int, scale: np.float32, out: Array, lo: int, hi: int
) -> None:
    """Heads lo:hi (counted over batch * heads) of self-attention read from the fused projection ``qkv``
    (batch * seq, 3 * heads * dim) into ``out`` (batch * seq, heads * dim), both products on the float32
    tiles (:func:`_float_panels`): a head's queries are copied scaled, its keys packed as the panels of
    ``q @ k^T`` and its values as those of ``p @ v``, the sequence padded to whole panels of zero keys.
    ``mask`` (batch, seq) or empty. Each query's scores become ``exp(score - max)`` with their sum, and the
    context, 32 or 64 wide where the scores are ``seq``, is divided by that sum (a query that sees no key
    gets zeros)."""
    seq = qkv.shape[0] // batch
    dim = qkv.shape[1] // (3 * heads)
    padded = (seq + 31) // 32 * 32
    q = np.empty((seq, dim), np.float32)
    keys = np.zeros((padded // 32, dim, 32), np.float32)
    values = np.zeros((dim // 32, padded, 32), np.float32)
    scores = np.zeros((seq, padded), np.float32)  # the padding columns stay zero: zero weights
    context = np.empty((seq, dim), np.float32)
    totals = np.empty(seq, np.float32)
    neg = np.float32(-np.inf)
    for u in range(lo, hi):
        b, h = u // heads, u % heads
        for t in range(seq):
            row = qkv[b * seq + t]
            for j in range(dim):
                q[t, j] = row[h * dim + j] * scale
                keys[t // 32, j, t % 32] = row[(heads + h) * dim + j]
                values[j // 32, t, j % 32] = row[(2 * heads + h) * dim + j]
        _float_panels(tiles, scores, q, keys, 0, padded // 32)
        for t in range(seq):
            weights = scores[t, :seq]
            if mask.shape[0] > 0:
                for s in range(seq):
                    if not mask[b, s]:
                        weights[s] = neg
            top = _row_top(weights)
            if top == neg:  # sees no key
                weights[:] = 0
                totals[t] = 0
            else:
                totals[t] = _exp_sum(weights, top)
            if padded > seq:
                scores[t, seq:] = 0  # q . 0 = 0 unless q holds NaN or infinity
        _float_panels(tiles, context, scores, values, 0, dim // 32)
        for t in range(seq):
            inv = np.float32(1) / totals[t] if totals[t] != 0 else np.float32(0)
            target = out[b * seq + t, h * dim : (h + 1) * dim]
            for j in range(dim):
                target[j] = context[t, j] * inv


def _tile_attention(
    tiles: Array, qkv: Array, mask: Array, batch: int, heads: int, scale: np.float32, out: Array, threads: int
) -> None:
    # one run of heads per thread, so each allocates its panels and scores once (as _float_tiles does)
    units = batch * heads
    chunks = tasks(min(threads, units))
    for c in numba.prange(chunks):
        _tile_attention_heads(
            tiles, qkv, mask, batch, heads, scale, out, units * c // chunks, units * (c + 1) // chunks
        )


tile_attention, tile_attention_serial = twins(_tile_attention)
