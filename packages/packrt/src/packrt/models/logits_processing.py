"""What a decode step may do to a sequence's scores before its next token is chosen.

A :class:`LogitsProcessor` is called once per step per sequence with the tokens that sequence has
generated so far (its prompt not included) and the step's scores over the vocabulary; what it returns is
what greedy decoding takes the argmax of, or what sampling draws from (after temperature, top-k and top-p).

:class:`Penalties` is OpenAI's ``presence_penalty`` / ``frequency_penalty``: for every token ``t``,
``logits[t] -= presence * (count[t] > 0) + frequency * count[t]``, where ``count[t]`` is how often the
sequence has generated ``t``. A positive penalty makes repeats less likely, a negative one more likely.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from packrt.models.sampling import GenerationArgumentError, GenerationArgumentTypeError

# OpenAI's range for both penalties
PENALTY_BOUND = 2.0


class LogitsProcessor(Protocol):
    """A per-step change of one sequence's scores: ``(generated ids, scores (vocab,)) -> scores (vocab,)``."""

    def __call__(self, generated: np.ndarray, scores: np.ndarray) -> np.ndarray: ...


def _penalty(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise GenerationArgumentTypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    number = float(value)
    if not math.isfinite(number) or abs(number) > PENALTY_BOUND:
        raise GenerationArgumentError(
            f"{name} must be a number in [-{PENALTY_BOUND:g}, {PENALTY_BOUND:g}] (OpenAI's range), got {value!r}"
        )
    return number


@dataclass(frozen=True)
class Penalties:
    """OpenAI's presence and frequency penalties (see the module docstring), each in [-2, 2]."""

    presence: float = 0.0
    frequency: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "presence", _penalty("presence_penalty", self.presence))
        object.__setattr__(self, "frequency", _penalty("frequency_penalty", self.frequency))

    def __bool__(self) -> bool:
        """False when neither penalty changes anything (both 0)."""
        return bool(self.presence or self.frequency)

    def __call__(self, generated: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """``scores`` less the penalties of the tokens in ``generated``; a new array, in float64 (the
        subtraction must not round a float16 or bfloat16 score before the comparison that picks the token)."""
        out = np.asarray(scores, dtype=np.float64).copy()
        if generated.size == 0:
            return out
        tokens, counts = np.unique(np.asarray(generated, dtype=np.int64), return_counts=True)
        out[tokens] -= self.presence + self.frequency * counts
        return out


__all__ = ["PENALTY_BOUND", "LogitsProcessor", "Penalties"]
