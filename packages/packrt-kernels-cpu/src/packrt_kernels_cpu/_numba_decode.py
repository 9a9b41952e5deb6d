"""The compiled loop of :mod:`packrt_kernels_cpu.decode`: one token's step through a rotary decoder layer over
quantized-block linears, in one call.

It is a sequence of the plan's own compiled loops, called on the same arrays in the same order as the layer's
kernel-by-kernel road (:mod:`packrt_kernels_cpu.plan` and :mod:`.blocks`), so the step gives that road's bits:
no arithmetic is written here, only the order and the copies between them. Each linear and the attention run
on the pool (their parallel twins) where the road would put them there; the rest is a few rows' work.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt_kernels_cpu._numba_blocks import (
    block_q8_parts,
    block_q8_parts_serial,
    block_q8_rows,
    block_q8_rows_serial,
)
from packrt_kernels_cpu._numba_kernels import _rms_norm_rows, _rotary_planes, _serial
from packrt_kernels_cpu._numba_plan import _gated_rows, _residual_norm_rows, decode_attention, decode_attention_serial

Array = Any
_NO_BIAS = np.empty(0, np.float32)
# ints: what :func:`decode_layer` reads from its integer operands, by position
HEADS, KV_HEADS, DIM, POSITION, FIRST, ACTIVATION, POOL, LINEAR_MIN, ATTENTION_MIN = range(9)
# floats: its float operands (0 for a soft cap or residual scale: none)
EPS1, EPS2, HEAD_EPS, POST_EPS1, POST_EPS2, SCALE, SOFTCAP, RESIDUAL_SCALE = range(8)


@_serial
def _add_bias(out: Array, bias: Array) -> None:
    """``out += bias`` row by row (``bias`` empty: no bias), the one add ``PackedBlockLinear.forward`` makes."""
    if bias.shape[0] > 0:
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[i, j] = out[i, j] + bias[j]


@_serial
def _linear(pool: bool, least: int, x: Array, blocks: Array, tiles: Array, bias: Array, out: Array) -> None:
    """``out = x @ W^T (+ bias)``, as :meth:`packrt_kernels_cpu.blocks.PackedBlockLinear.forward` computes a few
    rows on the q8 tiles: on the pool when the weight has ``least`` elements or more."""
    if pool and blocks.shape[0] * x.shape[1] >= least:
        block_q8_rows(x, blocks, tiles, out)
    else:
        block_q8_rows_serial(x, blocks, tiles, out)
    _add_bias(out, bias)


@_serial
def _parts(pool: bool, least: int, x: Array, parts: Any, tiles: Array, first: int, biases: Any, out: Array) -> None:
    """``out``'s columns side by side from ``parts`` (one linear, or several whose outputs a plan joins: q, k, v
    stored in different formats), part ``i`` on the tiles ``tiles[first + i]``: ``x`` quantized once and the
    parts' rows shared out together (one parallel region, not one a part), each output's bits as its part alone
    gives them."""
    if len(parts) == 1:
        _linear(pool, least, x, parts[0], tiles[first], biases[0], out)
        return
    weights = 0
    for i in range(len(parts)):
        weights += parts[i].shape[0] * x.shape[1]
    if pool and weights >= least:
        block_q8_parts(x, parts, tiles, first, out)
    else:
        block_q8_parts_serial(x, parts, tiles, first, out)
    start = 0
    for i in range(len(parts)):
        stop = start + parts[i].shape[0]
        _add_bias(out[:, start:stop], biases[i])
        start = stop


@_serial
def _branch(y: Array, post_norms: Array, which: int, eps: np.float32, scale: np.float32) -> None:
    """What of a branch joins the stream, in place: normed by post norm ``which`` (``post_norms`` empty: none),
    then scaled (``scale`` 0: not)."""
    if post_norms.shape[0] > which:
        _rms_norm_rows(y, post_norms[which], eps, y, 0, y.shape[0])
    if scale != 0:
        for i in range(y.shape[0]):
            for j in range(y.shape[1]):
                y[i, j] *= scale


@_serial
def _heads(
    qkv: Array, start: int, count: int, dim: int, head_norms: Array, which: int, eps: np.float32, out: Array
) -> None:
    """Heads ``start`` to ``start + count`` of each row of ``qkv`` into ``out`` (rows, count, 1, dim), each
    RMS-normed by head norm ``which`` (``head_norms`` empty: copied as they are)."""
    for b in range(qkv.shape[0]):
        for h in range(count):
            at = (start + h) * dim
            for d in range(dim):
                out[b, h, 0, d] = qkv[b, at + d]
        if head_norms.shape[0] > which:
            rows = out[b].reshape(count, dim)
            _rms_norm_rows(rows, head_norms[which], eps, rows, 0, count)


@_serial
def decode_layer(
    x: Array,
    res: Array,
    norms: Array,
    qkv: Any,
    o: Array,
    gate_up: Any,
    down: Array,
    qkv_biases: Any,
    o_bias: Array,
    gate_up_biases: Any,
    down_bias: Array,
    tiles: Array,
    head_norms: Array,
    post_norms: Array,
    cos: Array,
    sin: Array,
    keys: Array,
    values: Array,
    mask: Array,
    ints: Array,
    floats: Array,
) -> None:
    """``res`` (rows, width): the stream ``x`` after the layer (see :class:`packrt_base.plan.DecodeLayer`).
    ``norms`` (2, width) and ``post_norms`` (2, width, or empty) the norms' weights, ``head_norms`` (2, dim, or
    empty); ``qkv`` and ``gate_up`` one weight or the parts a plan joins side by side (their biases likewise);
    ``tiles`` (parts, 3) the q8 tiles (:func:`packrt_kernels_cpu.block_tiles.addresses`) of each part of qkv, o,
    each part of gate_up, down; ``cos`` / ``sin`` (1, dim), or (rows, dim) one a row, empty for a layer without
    rotary positions; ``keys`` / ``values`` the cache's whole buffers; ``mask`` (batch, stop) or empty."""
    rows, width = x.shape
    heads, kv_heads, dim = ints[HEADS], ints[KV_HEADS], ints[DIM]
    position, pool, least = ints[POSITION], ints[POOL] != 0, ints[LINEAR_MIN]
    h = np.empty((rows, width), np.float32)
    res[:] = 0
    _residual_norm_rows(True, x, res, norms[0], _NO_BIAS, floats[EPS1], h, 0, rows)
    projected = np.empty((rows, (heads + 2 * kv_heads) * dim), np.float32)
    _parts(pool, least, h, qkv, tiles, 0, qkv_biases, projected)
    o_tile = len(qkv)  # the tiles: qkv's parts, o, gate_up's parts, down

    q = np.empty((rows, heads, 1, dim), np.float32)
    k = np.empty((rows, kv_heads, 1, dim), np.float32)
    _heads(projected, 0, heads, dim, head_norms, 0, floats[HEAD_EPS], q)
    _heads(projected, heads, kv_heads, dim, head_norms, 1, floats[HEAD_EPS], k)
    stored = keys[:, :, position : position + 1, :]
    if cos.shape[0] > 0:
        turned = np.empty((rows, heads, 1, dim), np.float32)
        for b in range(rows):
            t = b if cos.shape[0] > 1 else 0  # one table a row (a padded batch), or one for all
            c, s = cos[t : t + 1], sin[t : t + 1]
            _rotary_planes(q[b : b + 1], c, s, turned[b : b + 1], 0, heads)
            _rotary_planes(k[b : b + 1], c, s, stored[b : b + 1], 0, kv_heads)
        q = turned
    else:
        stored[:] = k
    for b in range(rows):
        for g in range(kv_heads):
            at = (heads + kv_heads + g) * dim
            for d in range(dim):
                values[b, g, position, d] = projected[b, at + d]

    context = np.empty((rows, heads * dim), np.float32)
    cap, scale = floats[SOFTCAP], floats[SCALE]
    first, stop = ints[FIRST], position + 1
    if pool and rows * heads * (stop - first) * dim >= ints[ATTENTION_MIN]:
        decode_attention(q.reshape(rows, heads, dim), keys, values, first, stop, mask, scale, cap, context)
    else:
        decode_attention_serial(q.reshape(rows, heads, dim), keys, values, first, stop, mask, scale, cap, context)

    attended = np.empty((rows, width), np.float32)
    _linear(pool, least, context, o, tiles[o_tile], o_bias, attended)
    residual_scale = floats[RESIDUAL_SCALE]
    _branch(attended, post_norms, 0, floats[POST_EPS1], residual_scale)
    _residual_norm_rows(True, attended, res, norms[1], _NO_BIAS, floats[EPS2], h, 0, rows)
    inner = 0
    for i in range(len(gate_up)):
        inner += gate_up[i].shape[0]
    both = np.empty((rows, inner), np.float32)
    _parts(pool, least, h, gate_up, tiles, o_tile + 1, gate_up_biases, both)
    gated = np.empty((rows, inner // 2), np.float32)
    _gated_rows(ints[ACTIVATION], both, gated, 0, rows)
    mixed = np.empty((rows, width), np.float32)
    _linear(pool, least, gated, down, tiles[o_tile + 1 + len(gate_up)], down_bias, mixed)
    _branch(mixed, post_norms, 1, floats[POST_EPS2], residual_scale)
    for i in range(rows):
        for j in range(width):
            res[i, j] = res[i, j] + mixed[i, j]
