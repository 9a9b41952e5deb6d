"""How a generation chooses each token, and the checks of the arguments that say so.

Shared by :meth:`~packrt.models.CausalLM.generate` / ``stream`` and
:class:`~packrt.models.batch_decode.BatchDecoder`: the same argument gives the same error in each, and the
same seed the same draws (:func:`sample_next`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from packrt.errors import PackrtError


class GenerationArgumentError(PackrtError, ValueError):
    """An argument of ``generate`` or ``stream`` outside what it takes (the message names it, its value and
    the range)."""


class GenerationArgumentTypeError(GenerationArgumentError, TypeError):
    """An argument of ``generate`` or ``stream`` of a type it does not take (a str for a number, a bool for
    an int)."""


def is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _number(name: str, value: object) -> float:
    """``value`` as a finite float, or the error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise GenerationArgumentTypeError(f"generate: {name} must be a number, got {type(value).__name__} {value!r}")
    number = float(value)
    if not np.isfinite(number):
        raise GenerationArgumentError(f"generate: {name} must be finite, got {value!r}")
    return number


def check_sampling(do_sample: object, temperature: object, top_k: object, top_p: object, seed: object) -> None:
    """Every sampling argument of ``generate`` checked for its type and range before any work."""
    if not isinstance(do_sample, bool | np.bool_):
        raise GenerationArgumentTypeError(f"generate: do_sample must be a bool, got {type(do_sample).__name__}")
    if not _number("temperature", temperature) > 0:
        raise GenerationArgumentError(
            f"generate: temperature must be > 0, got {temperature!r}; use do_sample=False for greedy"
        )
    if top_k is not None and (not is_int(top_k) or int(top_k) <= 0):  # type: ignore[call-overload]
        error = GenerationArgumentError if is_int(top_k) else GenerationArgumentTypeError
        raise error(f"generate: top_k must be a positive int or None, got {top_k!r}")
    if top_p is not None and not 0 < _number("top_p", top_p) <= 1:
        raise GenerationArgumentError(f"generate: top_p must be in (0, 1] or None, got {top_p!r}")
    if seed is not None and not is_int(seed):
        raise GenerationArgumentTypeError(
            f"generate: seed must be an int >= 0 or None, got {type(seed).__name__} {seed!r}"
        )
    if seed is not None and int(seed) < 0:  # type: ignore[call-overload]
        raise GenerationArgumentError(f"generate: seed must be an int >= 0 or None, got {seed!r}")


def sample_next(
    scores: np.ndarray,
    rng: np.random.Generator,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> np.ndarray:
    """One token id per row of ``scores`` (batch, vocab), drawn after temperature, top-k, then top-p.

    The order is transformers': scale by ``1/temperature``, keep the ``top_k`` best, keep the
    smallest set of best tokens whose probability reaches ``top_p`` (at least one), then sample.
    """
    logits = scores.astype(np.float64) / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = np.partition(logits, -top_k, axis=-1)[:, -top_k, None]
        logits = np.where(logits < kth, -np.inf, logits)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    if top_p is not None and top_p < 1:
        order = np.argsort(-probs, axis=-1, kind="stable")
        ranked = np.take_along_axis(probs, order, axis=-1)
        keep_ranked = np.cumsum(ranked, axis=-1) - ranked < top_p
        keep = np.zeros_like(keep_ranked)
        np.put_along_axis(keep, order, keep_ranked, axis=-1)
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum(axis=-1, keepdims=True)
    draws = rng.random((probs.shape[0], 1))
    chosen: np.ndarray = (np.cumsum(probs, axis=-1) > draws).argmax(axis=-1).astype(np.int64)
    return chosen


def is_token(value: object, vocab: int) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and 0 <= int(value) < vocab


def eos_ids(values: int | Sequence[int] | None, vocab: int) -> tuple[int, ...]:
    if values is None:
        return ()
    items: list[object] = list(values) if isinstance(values, list | tuple | range | np.ndarray) else [values]
    if not all(is_token(v, vocab) for v in items):
        raise GenerationArgumentError(
            f"generate: eos_token_id must be a token id in [0, {vocab}) or a list of them, got {values!r}"
        )
    return tuple(int(v) for v in items if isinstance(v, int | np.integer))


class Sampling(NamedTuple):
    """How a run chooses each token: the argmax, or a draw seeded with ``seed`` (see ``generate``)."""

    do_sample: bool
    temperature: float
    top_k: int | None
    top_p: float | None
    seed: int | None


__all__ = [
    "GenerationArgumentError",
    "GenerationArgumentTypeError",
    "Sampling",
    "check_sampling",
    "eos_ids",
    "is_int",
    "is_token",
    "sample_next",
]
