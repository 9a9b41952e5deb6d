"""Causal self-attention with a key/value cache, shared by the causal LM families.

- :class:`KVCache`: per layer, keys and values (batch, kv_heads, capacity, head_dim) allocated once
  at the first write, plus a (batch, capacity) key mask for left-padded prompts. Generation writes
  each step's keys at its position and attends over the cached prefix: the prefix is never re-run.
- :class:`Step`: what one forward call covers (its first position, its length, the key mask). It
  builds each attention mask once per call (one for full attention, one per sliding window), not
  once per layer, and needs none at all for a one-token decode step without padding: the window
  is then a slice of the cache.
- :func:`attend`: grouped-query attention through ``scaled_dot_product_attention``. Queries are
  viewed as (batch, kv_heads, group, seq, head_dim) and keys as (batch, kv_heads, 1, seq, head_dim),
  so every query head of a group reads its key head by broadcasting, never by a repeated copy.

Masks follow transformers: query ``i`` sees key ``j`` when ``j <= i``, when ``j > i - window`` for
a sliding-window layer, and when ``attention_mask[b, j]`` is 1.
"""

from __future__ import annotations

import math

import numpy as np

import packrt
from packrt import nn
from packrt.errors import DTypeError, IndexingError, ShapeError

_functional = nn.functional


class KVCache:
    """Keys and values of every layer for ``batch`` sequences of up to ``capacity`` positions.

    ``length`` is how many positions hold keys. A layer's buffers are allocated at its first
    :meth:`write`, in the dtype and on the device of the keys written, and reused after. The key
    mask lives on ``device``, the model's (its host copy, ``key_mask_array``, is what
    :meth:`set_padding` writes).
    """

    def __init__(self, layers: int, batch: int, capacity: int, device: packrt.Device | str = "cpu") -> None:
        for name, value in (("layers", layers), ("batch", batch), ("capacity", capacity)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
                raise ValueError(f"KVCache: {name} must be a positive int, got {value!r}")
        layers, batch, capacity = int(layers), int(batch), int(capacity)
        self.layers = layers
        self.batch = batch
        self.capacity = capacity
        self.device = packrt.Device(device)
        self.length = 0
        self.keys: list[packrt.Tensor | None] = [None] * layers
        self.values: list[packrt.Tensor | None] = [None] * layers
        self.key_mask_array = np.ones((batch, capacity), dtype=bool)
        self.key_mask = packrt.from_numpy(self.key_mask_array).to(self.device)
        self.padded = False

    def set_padding(self, attention_mask: np.ndarray) -> None:
        """Mark the prompt's padding (0 in ``attention_mask`` (batch, prompt)) as keys nobody sees."""
        if attention_mask.ndim != 2 or attention_mask.shape[0] != self.batch or attention_mask.shape[1] > self.capacity:
            raise ShapeError(
                f"KVCache.set_padding: attention_mask has shape {attention_mask.shape}, expected (batch, prompt) with "
                f"batch = {self.batch} and prompt <= {self.capacity} (the cache's sequences and positions)"
            )
        prompt = attention_mask.shape[1]
        self.key_mask_array[:, :prompt] = attention_mask != 0
        self.padded = not bool(self.key_mask_array[:, :prompt].all())
        # on the CPU the mask is a view of the array, already written; elsewhere it is placed anew
        self.key_mask = packrt.from_numpy(self.key_mask_array).to(self.device)

    def write(self, layer: int, k: packrt.Tensor, v: packrt.Tensor, start: int) -> tuple[packrt.Tensor, packrt.Tensor]:
        """Store ``k``/``v`` (batch, kv_heads, seq, head_dim) at ``start``; return all keys/values so far.

        The batch must be the cache's own (a cache never broadcasts: make a new one for a new batch
        size), ``start`` >= 0, the layer one of the cache's, and a layer's later writes must keep the
        heads, width and dtype of its first.
        """
        stop = self.store(layer, k, v, start)
        keys, values = self.keys[layer], self.values[layer]
        assert keys is not None and values is not None  # store allocated them
        return keys[:, :, :stop], values[:, :, :stop]

    def store(self, layer: int, k: packrt.Tensor, v: packrt.Tensor, start: int) -> int:
        """:meth:`write` without the views it returns: the keys/values stored (same checks), and the position
        after them (how many positions the layer's buffers now hold). A decode step's kernel reads the
        buffers (``keys[layer]``, ``values[layer]``) whole."""
        self._check_write(layer, k, v, start)
        stop = start + k.shape[2]
        if stop > self.capacity:
            raise ShapeError(
                f"KVCache: positions {start}..{stop - 1} do not fit a cache of {self.capacity} positions; "
                "make the cache as long as the prompt plus max_new_tokens"
            )
        keys, values = self.keys[layer], self.values[layer]
        if keys is None or values is None:
            batch, heads, _, dim = k.shape
            keys = packrt.zeros(batch, heads, self.capacity, dim, dtype=k.dtype, device=k.device)
            values = packrt.zeros(batch, heads, self.capacity, dim, dtype=v.dtype, device=v.device)
            self.keys[layer], self.values[layer] = keys, values
        if keys.device.type == "cpu" and k.device.type == "cpu":  # in place through numpy's views: no tensor op
            keys.numpy()[:, :, start:stop] = k.numpy()
            values.numpy()[:, :, start:stop] = v.numpy()
        else:
            keys[:, :, start:stop] = k
            values[:, :, start:stop] = v
        return stop

    def _check_write(self, layer: int, k: packrt.Tensor, v: packrt.Tensor, start: int) -> None:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.layers:
            raise IndexingError(
                f"KVCache: layer {layer!r} is not one of the cache's {self.layers} layers [0, {self.layers})"
            )
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"KVCache: start position must be an int >= 0, got {start!r}")
        if k.ndim != 4 or tuple(v.shape) != tuple(k.shape):
            raise ShapeError(
                f"KVCache: keys {tuple(k.shape)} and values {tuple(v.shape)} must share one (batch, kv_heads, seq, "
                "head_dim) shape"
            )
        if k.shape[0] != self.batch:
            raise ShapeError(
                f"KVCache: keys for {k.shape[0]} sequences written to a cache of {self.batch}; a cache never "
                f"broadcasts: make a new KVCache(layers, batch={k.shape[0]}, capacity) for a new batch size"
            )
        held = self.keys[layer]
        if held is not None and (held.shape[1] != k.shape[1] or held.shape[3] != k.shape[3]):
            raise ShapeError(
                f"KVCache: layer {layer} holds {held.shape[1]} heads of width {held.shape[3]}, got keys with "
                f"{k.shape[1]} of width {k.shape[3]}; use one cache per model"
            )
        if held is not None and held.dtype is not k.dtype:
            raise DTypeError(f"KVCache: layer {layer} holds {held.dtype} keys, got {k.dtype}; use one cache per model")


class Step:
    """One forward call: ``length`` new positions from ``offset``, over a cache or alone.

    ``key_mask`` (batch, offset + length), True for keys that may be seen, is None when nothing
    is padding. :meth:`mask` returns, per window, the first key position taken and the bool mask
    (or None with ``causal=True`` for the plain causal case), computed once and kept on ``device``
    (the model's).
    """

    def __init__(
        self,
        offset: int,
        length: int,
        key_mask: packrt.Tensor | None,
        device: packrt.Device | str = "cpu",
        bidirectional: bool = False,
    ) -> None:
        self.offset = offset
        self.length = length
        self.key_mask = key_mask
        self.device = packrt.Device(device)
        self.bidirectional = bidirectional  # every query sees the keys after it too (an embedding model's call)
        self._masks: dict[int | None, tuple[int, packrt.Tensor | None, bool]] = {}

    def mask(self, window: int | None) -> tuple[int, packrt.Tensor | None, bool]:
        """(first key, mask (batch or 1, length, keys) or None, is_causal) for a layer's window."""
        found = self._masks.get(window)
        if found is None:
            found = self._build(window)
            self._masks[window] = found
        return found

    def _build(self, window: int | None) -> tuple[int, packrt.Tensor | None, bool]:
        total = self.offset + self.length
        first = 0 if window is None else max(0, self.offset - window + 1)
        if self.bidirectional:
            return self._bidirectional(window)
        if self.length == 1:  # a decode step: every cached key in [first, total) is in its window
            if self.key_mask is None:
                return first, None, False
            return first, self.key_mask[:, first:total].unsqueeze(1), False
        if self.key_mask is None and self.offset == 0 and (window is None or window >= total):
            return first, None, True
        queries = np.arange(self.offset, total)[:, None]
        keys = np.arange(first, total)[None, :]
        allowed = keys <= queries
        if window is not None:
            allowed &= keys > queries - window
        mask = packrt.from_numpy(allowed[None]).to(self.device)
        if self.key_mask is not None:
            mask = mask & self.key_mask[:, first:total].unsqueeze(1)
        return first, mask, False

    def _bidirectional(self, window: int | None) -> tuple[int, packrt.Tensor | None, bool]:
        """Every key a query may see, before or after it: those closer than ``window`` positions (all without one),
        less the padding. Only a whole sequence attends so, in one call (no cache)."""
        if self.offset:
            raise ValueError("Step: a bidirectional call attends over a whole sequence at once, not over a cache")
        positions = np.arange(self.length)
        if window is None or window >= self.length:
            if self.key_mask is None:
                return 0, None, False
            return 0, self.key_mask[:, : self.length].unsqueeze(1), False
        allowed = np.abs(positions[None, :] - positions[:, None]) < window
        mask = packrt.from_numpy(allowed[None]).to(self.device)
        if self.key_mask is not None:
            mask = mask & self.key_mask[:, : self.length].unsqueeze(1)
        return 0, mask, False


def attend(
    q: packrt.Tensor,
    k: packrt.Tensor,
    v: packrt.Tensor,
    *,
    step: Step,
    cache: KVCache | None,
    layer: int,
    window: int | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    sinks: packrt.Tensor | None = None,
) -> packrt.Tensor:
    """Attention of queries (B, H, T, D) over keys/values (B, KV, T, D) and the cached prefix.

    ``H`` must be a multiple of ``KV`` (grouped-query attention; KV == H is plain multi-head).
    ``softcap``: the scores soft-capped as ``cap * tanh(scores / cap)`` before the mask (gemma2's
    ``attn_logit_softcapping``); ``sinks`` (H,): one learned logit per head that joins the softmax's
    denominator and nothing else (gpt-oss's attention sinks: a head may attend to nothing), computed as
    transformers' eager attention does. Returns (B, H, T, D).
    """
    if cache is not None:
        k, v = cache.write(layer, k, v, step.offset)
    first, mask, causal = step.mask(window)
    if first:
        k, v = k[:, :, first:], v[:, :, first:]
    batch, heads, length, dim = q.shape
    groups = heads // k.shape[1]
    if groups == 1:
        if mask is not None:
            mask = mask.unsqueeze(1)  # (B, 1, T, S)
    else:
        q, k, v = q.reshape(batch, k.shape[1], groups, length, dim), k.unsqueeze(2), v.unsqueeze(2)
        if mask is not None:
            mask = mask.unsqueeze(1).unsqueeze(1)  # (B, 1, 1, T, S)
    if softcap is None and sinks is None:
        out = _functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)
    else:
        if sinks is not None:  # one per query head, laid out as the query heads are: (1, H, 1, 1) or grouped
            sinks = sinks.reshape(1, *q.shape[1:-2], 1, 1)
        out = _eager(q, k, v, mask, causal, scale, softcap, sinks)
    return out.reshape(batch, heads, length, dim)


_HIDDEN: float = (
    -3.0e38
)  # a masked score: float32's lowest finite, as transformers masks (a row seeing nothing is uniform)


def _eager(
    q: packrt.Tensor,
    k: packrt.Tensor,
    v: packrt.Tensor,
    mask: packrt.Tensor | None,
    causal: bool,
    scale: float | None,
    cap: float | None,
    sinks: packrt.Tensor | None,
) -> packrt.Tensor:
    """``softmax(cap * tanh(q k^T * scale / cap) + mask) v`` (no cap: the scores as they are), the softmax in
    float32 and its result in q's dtype, as transformers' eager attention computes it (no fused kernel takes a
    cap or sinks). With ``sinks`` (broadcasting against the scores' leading dims, one logit per head) the softmax
    runs over the keys and the sink, and the sink's share is dropped: the keys' weights sum to less than 1."""
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-1, -2)) * factor
    if cap is not None:
        scores = (scores / cap).tanh() * cap
    scores = scores.to(packrt.float32)
    if causal:  # top-left aligned, as scaled_dot_product_attention's is_causal
        length, keys = scores.shape[-2], scores.shape[-1]
        mask = packrt.from_numpy(np.tril(np.ones((length, keys), dtype=bool))).to(scores.device)
    if mask is not None:
        scores = scores + (1.0 - mask.to(packrt.float32)) * _HIDDEN
    if sinks is not None:  # the sink as one more key column, dropped after the softmax
        keys = scores.shape[-1]
        combined = packrt.empty(*scores.shape[:-1], keys + 1, dtype=packrt.float32, device=scores.device)
        combined[..., :keys] = scores
        combined[..., keys:] = sinks.to(packrt.float32)
        scores = _functional.softmax(combined, dim=-1)[..., :keys]
        probs = scores.to(q.dtype)
    else:
        probs = _functional.softmax(scores, dim=-1).to(q.dtype)
    out: packrt.Tensor = probs @ v
    return out


__all__ = ["KVCache", "Step", "attend"]
