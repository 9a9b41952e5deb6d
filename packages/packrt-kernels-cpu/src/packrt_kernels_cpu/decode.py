"""One token's step through a rotary decoder layer in one compiled call (the CPU's
:class:`~packrt_base.plan.DecodeLayerKernel`).

Step by step, a layer's decode is ten kernel calls with Python between them, ~45 us a layer on one Zen 4 core
beyond the kernels (an eighth of a SmolLM2-135M token). Where every linear of the layer is served from quantized
blocks on the q8 dot tiles (a GGUF model, packed), :func:`decode_layer` gives a :class:`BlockDecodeStep` that runs
the whole step in one call of :mod:`._numba_decode`: the same compiled loops in the same order, so the same bits
as the step-by-step road, which serves everything else (float weights, more rows than the tiles take, a partial
rotary table, tables or caches in another dtype) and every step under ``PACKRT_DECODE_STEP=kernels``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt_base.arrays import Array
from packrt_base.plan import DecodeLayer, PlanLinear
from packrt_kernels_cpu import compiled, fused, settings, threads
from packrt_kernels_cpu.blocks import Q8_PARALLEL, ROW_LOOP_ROWS, PackedBlockLinear
from packrt_kernels_cpu.compiled import PARALLEL_MIN

_OPS = {"gelu": 0, "gelu_tanh": 1, "silu": 2, "relu": 3}  # _numba_kernels' activation codes
_NO_BIAS = np.empty(0, np.float32)
_NO_MASK = np.empty((0, 0), np.bool_)
_NO_TABLE = np.empty((0, 0), np.float32)


def _pack(linear: PlanLinear) -> PackedBlockLinear | None:
    """The blocks a plan linear serves from, when it is one weight of quantized blocks and nothing after."""
    pack = getattr(linear, "pack", None)
    if type(pack) is not PackedBlockLinear or getattr(linear, "activation", None) is not None:
        return None
    return pack


def _rows(arrays: tuple[Array, ...], width: int) -> Array:
    """The norms' weights stacked (len, width), float32; (0, width) for none."""
    if not arrays:
        return np.empty((0, width), np.float32)
    return np.ascontiguousarray(np.stack([np.asarray(a, np.float32).reshape(-1) for a in arrays]))


def _table(table: Array, rows: int, dim: int) -> Array | None:
    """A rotary table as the step reads it, (1, dim) for every row or (rows, dim) one a row (a padded batch's
    positions differ), from (1, dim) or (rows, 1, 1, dim); None for any other shape or kind."""
    if not fused.handles_all(table) or table.shape[-1] != dim or table.ndim not in (2, 4):
        return None
    flat = table.reshape(-1, dim)
    return flat if flat.shape[0] in (1, rows) and (table.ndim == 2 or table.shape[1:3] == (1, 1)) else None


class BlockDecodeStep:
    """A rotary decoder layer whose linears are all quantized blocks (:class:`~packrt_base.plan.DecodeStep`)."""

    def __init__(
        self, layer: DecodeLayer, qkv: tuple[PackedBlockLinear, ...], gate_up: tuple[PackedBlockLinear, ...]
    ) -> None:
        o, down = _pack(layer.o), _pack(layer.down)
        assert o is not None and down is not None, "decode_layer checked every linear"
        self.packs = (*qkv, o, *gate_up, down)  # in the order of the compiled step's tiles
        self.qkv, self.gate_up = tuple(p.blocks for p in qkv), tuple(p.blocks for p in gate_up)
        self.o, self.down = o.blocks, down.blocks
        self.qkv_biases, self.gate_up_biases = tuple(map(_bias, qkv)), tuple(map(_bias, gate_up))
        self.o_bias, self.down_bias = _bias(o), _bias(down)
        self.width, self.dim = int(o.out_features), int(layer.head_dim)
        self.norms = _rows(layer.norms, self.width)
        self.head_norms = _rows(layer.head_norms[:2] if layer.head_norms else (), self.dim)
        self.post_norms = _rows(tuple(w for w, _ in layer.post_norms) if layer.post_norms else (), self.width)
        head_eps = layer.head_norms[2] if layer.head_norms else 0.0
        post_eps = tuple(e for _, e in layer.post_norms) if layer.post_norms else (0.0, 0.0)
        self.floats = np.array(
            [*layer.eps, head_eps, *post_eps, layer.scale, layer.softcap or 0.0, layer.residual_scale or 0.0],
            np.float32,
        )
        self.heads, self.kv_heads = int(layer.heads), int(layer.kv_heads)
        self.activation = _OPS[layer.activation]
        self._chosen: tuple[Any, Array | None] | None = None  # (settings, _tiles())

    def _tiles(self, now: Any) -> Array | None:
        """Each linear's q8 tiles stacked (linears, 3), or None where one of them takes another road; decided once
        per settings object, as each pack decides its road (a step asks on every layer of every token)."""
        cached = self._chosen
        if cached is not None and cached[0] is now:
            return cached[1]
        found = [p.q8_tiles() for p in self.packs]
        tiles = [t for t in found if t is not None]
        stacked = np.stack(tiles) if len(tiles) == len(found) else None
        self._chosen = (now, stacked)
        return stacked

    def run(
        self,
        x: Array,
        tables: tuple[Array, Array] | None,
        keys: Array,
        values: Array,
        position: int,
        first: int,
        key_mask: Array | None,
    ) -> Array | None:
        """See :meth:`packrt_base.plan.DecodeStep.run`."""
        now = settings.current()
        if now.decode_step != "layer":
            return None
        rows = int(x.shape[0])
        shape = (rows, self.kv_heads, int(keys.shape[2]) if keys.ndim == 4 else 0, self.dim)
        if (
            x.ndim != 2
            or not 0 < rows <= ROW_LOOP_ROWS
            or not fused.handles_all(x, keys, values)
            or keys.shape != shape
            or values.shape != shape
            or not 0 <= first <= position < shape[2]
        ):
            return None
        cos: Array | None = _NO_TABLE
        sin: Array | None = _NO_TABLE
        if tables is not None:
            cos, sin = (_table(t, rows, self.dim) for t in tables)
            if cos is None or sin is None:
                return None
        tiles = self._tiles(now)
        if tiles is None:
            return None
        mask = _NO_MASK if key_mask is None else np.ascontiguousarray(key_mask, dtype=np.bool_)
        if key_mask is not None and (mask.ndim != 2 or mask.shape[0] != rows or mask.shape[1] <= position):
            return None  # the kernel reads a row of the mask per sequence, up to the step's position
        pool = compiled.pool_size() > 1 and not threads.serial()
        ints = np.array(
            [self.heads, self.kv_heads, self.dim, position, first, self.activation, pool, Q8_PARALLEL, PARALLEL_MIN],
            np.int64,
        )
        out = np.empty_like(x)
        loops = compiled.module("packrt_kernels_cpu._numba_decode")
        loops.decode_layer(
            x,
            out,
            self.norms,
            self.qkv,
            self.o,
            self.gate_up,
            self.down,
            self.qkv_biases,
            self.o_bias,
            self.gate_up_biases,
            self.down_bias,
            tiles,
            self.head_norms,
            self.post_norms,
            cos,
            sin,
            keys,
            values,
            mask,
            ints,
            self.floats,
        )
        return out


def _bias(pack: PackedBlockLinear) -> Array:
    return _NO_BIAS if pack.b is None else np.ascontiguousarray(pack.b, np.float32)


def decode_layer(layer: DecodeLayer) -> BlockDecodeStep | None:
    """A :class:`BlockDecodeStep` for ``layer`` where every linear is quantized blocks (the q, k, v and the gate,
    up of one layer may differ in format: each part on its own tile) and its norms RMS norms over the stream's
    width; else None (the step-by-step road serves it)."""
    qkv, gate_up = tuple(map(_pack, layer.qkv)), tuple(map(_pack, layer.gate_up))
    packs = (*qkv, _pack(layer.o), *gate_up, _pack(layer.down))
    if any(p is None for p in packs) or layer.activation not in _OPS or compiled.kernels() is None:
        return None
    found = tuple(p for p in packs if p is not None)
    width = found[len(qkv)].out_features
    if any(np.asarray(w).size != width for w in layer.norms) or any(p.in_features != width for p in found[: len(qkv)]):
        return None
    return BlockDecodeStep(layer, found[: len(qkv)], found[len(qkv) + 1 : -1])


__all__ = ["BlockDecodeStep", "decode_layer"]
