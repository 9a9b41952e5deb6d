"""Rotary position embeddings (RoPE), rotate-half convention.

Feature ``i`` of the first half of a head pairs with feature ``i + head_dim/2``; the pair is
rotated by the angle ``position * theta ** (-2i / head_dim)``. As a formula on whole heads:
``x * cos + rotate_half(x) * sin`` with ``rotate_half([a, b]) = [-b, a]`` and the angle table
repeated over both halves (the layout Llama checkpoints in the Hugging Face format use).

With ``partial_rotary_factor`` below 1 (Phi-4-mini's 0.75) only the first ``rotary_dim`` features of a
head rotate, paired within them, and the rest pass through: the tables are ``rotary_dim`` wide, and an
attention reading a table narrower than its heads rotates that many features (:func:`rotate_heads`).
LongRoPE (Phi-3.5, Phi-4-mini) keeps two frequency sets, short and long, and a forward uses the long one
when its sequence reaches past the pretrained context (:class:`LongRopeTables`), as transformers does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import packrt
from packrt import nn
from packrt.models.config_schema import ROPE_TYPES, rope_settings, rotary_dim
from packrt.models.hfconfig import HFConfig


def cos_sin_tables(inv_freq: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin), each (rows, 2 * len(inv_freq)) float32, for positions ``0..rows-1``: the one table
    builder every rotary model uses.

    Angles are ``position * inv_freq`` in ``inv_freq``'s dtype (float32 gives transformers' tables
    bit for bit; float64 keeps the phase of long positions), repeated over both halves; cos and sin
    are taken in float64 and rounded once.
    """
    angles = np.arange(rows, dtype=inv_freq.dtype)[:, None] * inv_freq[None, :]
    angles = np.concatenate([angles, angles], axis=-1).astype(np.float64)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def inverse_frequencies(head_dim: int, theta: float = 10000.0) -> np.ndarray:
    """``theta ** (-2i / head_dim)`` for ``i < head_dim / 2``, in float64."""
    if head_dim % 2:
        raise ValueError(f"rotary embeddings pair features in halves, so head_dim must be even, got {head_dim}")
    inv_freq: np.ndarray = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    return inv_freq


def rotary_tables(max_positions: int, head_dim: int, theta: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin), each (max_positions, head_dim) float32, for positions 0..max_positions-1, from
    float64 angles (:func:`cos_sin_tables` of :func:`inverse_frequencies`)."""
    return cos_sin_tables(inverse_frequencies(head_dim, theta), max_positions)


def rope_frequencies(config: HFConfig, head_dim: int) -> np.ndarray:
    """The rotary inverse frequencies (head_dim // 2,) float32, as transformers computes them.

    ``rope_parameters`` (transformers 5) or ``rope_scaling`` plus ``rope_theta`` (older files) give
    the type: ``default`` (``theta ** (-2i / head_dim)``), ``linear`` (divided by ``factor``) or
    ``llama3`` (long wavelengths divided by ``factor``, short ones kept, the band between blended).
    """
    params = rope_settings(config)
    theta = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise config.error(
            "rope_parameters.rope_type",
            f"is {kind!r}, which packrt does not implement (supported: {', '.join(ROPE_TYPES)})",
        )
    dim = rotary_dim(params, head_dim)  # the schema checked it even and positive
    exponents = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    powers = np.float32(theta) ** exponents
    inv_freq = (np.float32(1.0) / powers).astype(np.float32)
    if kind == "linear":
        return (inv_freq / np.float32(params["factor"])).astype(np.float32)
    if kind == "longrope":  # the short set; LongRopeTables holds the long one beside it
        return _longrope(params, powers, "short_factor")
    if kind == "yarn":
        return _yarn(config, params, dim, theta, inv_freq)
    if kind == "llama3":
        factor = float(params["factor"])
        low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
        context = float(params.get("original_max_position_embeddings") or config.integer("max_position_embeddings"))
        wavelength = np.float32(2 * math.pi) / inv_freq
        scaled = np.where(wavelength > context / low, inv_freq / np.float32(factor), inv_freq).astype(np.float32)
        smooth = ((np.float32(context) / wavelength - np.float32(low)) / np.float32(high - low)).astype(np.float32)
        blended = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
        middle = ~(wavelength < context / high) & ~(wavelength > context / low)
        return np.where(middle, blended, scaled).astype(np.float32)
    return inv_freq


def _longrope(params: dict[str, Any], powers: np.ndarray, which: str) -> np.ndarray:
    """LongRoPE's inverse frequencies for ``which`` factor list: ``1 / (factor_i * theta ** (2i / dim))``."""
    factors = np.asarray(params[which], dtype=np.float32)  # one per pair: the schema checked the count
    inv_freq: np.ndarray = (np.float32(1.0) / (factors * powers)).astype(np.float32)
    return inv_freq


def _yarn_factor(config: HFConfig, params: dict[str, Any]) -> float:
    factor = params.get("factor")
    original = params.get("original_max_position_embeddings") or config.integer("max_position_embeddings")
    return float(factor) if factor is not None else config.integer("max_position_embeddings") / original


def _yarn(config: HFConfig, params: dict[str, Any], head_dim: int, theta: float, inv_freq: np.ndarray) -> np.ndarray:
    """YaRN's inverse frequencies, as transformers computes them: the long wavelengths interpolated by
    ``factor``, the short ones kept, a linear ramp between the dimensions ``beta_fast`` and ``beta_slow``
    rotations fall on over ``original_max_position_embeddings``."""
    factor = _yarn_factor(config, params)
    original = params.get("original_max_position_embeddings") or config.integer("max_position_embeddings")
    fast, slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1

    def dimension(rotations: float) -> float:
        return (head_dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = dimension(fast), dimension(slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    high = high + 0.001 if low == high else high
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low), 0, 1)
    kept = (1 - ramp).astype(np.float32)  # the extrapolated (unscaled) share of each frequency
    interpolated = (inv_freq / np.float32(factor)).astype(np.float32)
    blended: np.ndarray = (interpolated * (1 - kept) + inv_freq * kept).astype(np.float32)
    return blended


def rope_attention_factor(config: HFConfig) -> float:
    """What the cos and sin tables are multiplied by: 1, but for YaRN its ``attention_factor`` (given, or
    ``0.1 * ln(factor) + 1``, with ``mscale`` / ``mscale_all_dim`` as transformers reads them)."""
    params = rope_settings(config)
    kind = params.get("rope_type", params.get("type"))
    if kind == "longrope":
        return _longrope_attention_factor(config, params)
    if kind != "yarn":
        return 1.0
    if params.get("attention_factor") is not None:
        return float(params["attention_factor"])
    factor = _yarn_factor(config, params)

    def scale(mscale: float = 1.0) -> float:
        return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0

    mscale, all_dim = params.get("mscale"), params.get("mscale_all_dim")
    return scale(mscale) / scale(all_dim) if mscale and all_dim else scale()


def _longrope_attention_factor(config: HFConfig, params: dict[str, Any]) -> float:
    """LongRoPE's scale: ``attention_factor`` when given, else ``sqrt(1 + ln(factor) / ln(original))`` for the
    context ``factor`` (given, or max_position_embeddings over the pretrained length), 1 when not above 1."""
    if params.get("attention_factor") is not None:
        return float(params["attention_factor"])
    original = int(params["original_max_position_embeddings"])
    factor = params.get("factor")
    factor = float(factor) if factor is not None else config.integer("max_position_embeddings") / original
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


def tables_of(config: HFConfig, head_dim: int) -> RotaryTables:
    """The rotary tables ``config``'s rope settings give: its frequencies, scaled by its attention factor
    (LongRoPE: both of its frequency sets, :class:`LongRopeTables`)."""
    scale = rope_attention_factor(config)
    params = rope_settings(config)
    if params.get("rope_type", params.get("type")) == "longrope":
        dim = rotary_dim(params, head_dim)
        theta = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
        powers = np.float32(theta) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))
        long = _longrope(params, powers, "long_factor")
        original = int(params["original_max_position_embeddings"])
        return LongRopeTables(rope_frequencies(config, head_dim), long, original, scale)
    return RotaryTables(rope_frequencies(config, head_dim), scale)


class RotaryTables:
    """cos/sin rows for positions, grown on demand and kept: a decode step only slices them.

    A causal LM holds one (built from its inverse frequencies) and asks it for each forward's rows;
    the tables follow the device of the activations they are asked for. ``scale`` multiplies both
    (YaRN's attention factor; 1 otherwise).
    """

    # the sequence length past which the frequencies change (LongRopeTables' pretrained context); None: never
    switch: int | None = None

    def __init__(self, inv_freq: np.ndarray, scale: float = 1.0) -> None:
        self.inv_freq, self.scale = inv_freq, scale
        self._cos: packrt.Tensor | None = None
        self._sin: packrt.Tensor | None = None
        self._rows = 0

    def _grow(self, rows: int, device: packrt.Device) -> None:
        size = max(64, 1 << (rows - 1).bit_length())  # powers of two: a long generation regrows a few times
        cos, sin = cos_sin_tables(self.inv_freq, size)
        if self.scale != 1.0:  # in float32, as transformers multiplies its float32 tables
            cos, sin = cos * np.float32(self.scale), sin * np.float32(self.scale)
        self._cos = packrt.from_numpy(cos).to(device)
        self._sin = packrt.from_numpy(sin).to(device)
        self._rows = size

    def __call__(
        self, offset: int, length: int, positions: packrt.Tensor | None, like: packrt.Tensor
    ) -> tuple[packrt.Tensor, packrt.Tensor]:
        """(cos, sin) broadcasting against (batch, heads, length, head_dim), in ``like``'s dtype."""
        needed = offset + length if positions is None else int(positions.max().item()) + 1
        if needed > self._rows or self._cos is None or self._sin is None or self._cos.device != like.device:
            self._grow(needed, like.device)
        assert self._cos is not None and self._sin is not None
        if positions is None:
            cos, sin = self._cos[offset : offset + length], self._sin[offset : offset + length]
        else:
            cos, sin = self._cos[positions].unsqueeze(1), self._sin[positions].unsqueeze(1)
        if cos.dtype is not like.dtype:
            cos, sin = cos.to(like.dtype), sin.to(like.dtype)
        return cos, sin


class LongRopeTables(RotaryTables):
    """LongRoPE's two tables: a forward whose sequence reaches past ``original`` positions (its last position
    + 1 > ``original``) reads the long frequencies for all its positions, any other the short ones. A
    generation that crosses ``original`` (its ``switch``) computes the keys it cached under the short ones
    again, as transformers' Phi-3 does."""

    def __init__(self, short: np.ndarray, long: np.ndarray, original: int, scale: float = 1.0) -> None:
        super().__init__(short, scale)
        self.long, self.original, self.switch = RotaryTables(long, scale), original, original

    def __call__(
        self, offset: int, length: int, positions: packrt.Tensor | None, like: packrt.Tensor
    ) -> tuple[packrt.Tensor, packrt.Tensor]:
        reach = offset + length if positions is None else int(positions.max().item()) + 1
        if reach > self.original:
            return self.long(offset, length, positions, like)
        return super().__call__(offset, length, positions, like)


def rotate_heads(x: packrt.Tensor, cos: packrt.Tensor, sin: packrt.Tensor) -> packrt.Tensor:
    """``x`` (..., head_dim) rotated by tables of ``cos.shape[-1]`` features: the whole head, or with a partial
    rotary factor its first ``cos.shape[-1]`` features, the rest passed through unchanged."""
    width = cos.shape[-1]
    if width == x.shape[-1]:
        return nn.functional.rotary_embedding(x, cos, sin)
    out = packrt.empty(*x.shape, dtype=x.dtype, device=x.device)
    out[..., :width] = nn.functional.rotary_embedding(x[..., :width].contiguous(), cos, sin)
    out[..., width:] = x[..., width:]
    return out


def rotate_half(x: packrt.Tensor) -> packrt.Tensor:
    """``[-b, a]`` for ``x = [a, b]`` split in halves along the last dim."""
    half = x.shape[-1] // 2
    out = packrt.empty(*x.shape, dtype=x.dtype, device=x.device)
    out[..., :half] = -x[..., half:]
    out[..., half:] = x[..., :half]
    return out


class RotaryEmbedding(nn.Module):
    """Rotates queries or keys (batch, heads, seq, head_dim) by the position of each row.

    The cos/sin tables are constants derived from the geometry, not weights: they are
    non-persistent buffers (absent from ``state_dict`` and checkpoints) and hold storage even
    when the model is declared under :func:`packrt.meta_init`, so a model loaded with
    ``assign=True`` needs nothing more to serve.
    """

    def __init__(self, head_dim: int, max_positions: int, theta: float = 10000.0) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.max_positions = max_positions
        self.theta = float(theta)
        cos, sin = rotary_tables(max_positions, head_dim, theta)
        self.register_buffer("cos", packrt.from_numpy(cos), persistent=False)
        self.register_buffer("sin", packrt.from_numpy(sin), persistent=False)

    def forward(self, x: packrt.Tensor, offset: int = 0) -> packrt.Tensor:
        seq = x.shape[-2]
        cos: packrt.Tensor = self.cos[offset : offset + seq]
        sin: packrt.Tensor = self.sin[offset : offset + seq]
        if cos.dtype is not x.dtype:
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        return nn.functional.rotary_embedding(x, cos, sin)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_positions={self.max_positions}, theta={self.theta:g}"


__all__ = [
    "LongRopeTables",
    "RotaryEmbedding",
    "RotaryTables",
    "cos_sin_tables",
    "inverse_frequencies",
    "rope_attention_factor",
    "rope_frequencies",
    "rotary_tables",
    "rotate_half",
    "rotate_heads",
    "tables_of",
]
