"""What a decode step may do to a sequence's scores before its next token is chosen.

A :class:`LogitsProcessor` is called once per step per sequence with the tokens that sequence has
generated so far (its prompt not included) and the step's scores over the vocabulary; what it returns is
what greedy decoding takes the argmax of, or what sampling draws from (after temperature, top-k and top-p).

:class:`Penalties` is OpenAI's ``presence_penalty`` / ``frequency_penalty``: for every token ``t``,
``logits[t] -= presence * (count[t] > 0) + frequency * count[t]``, where ``count[t]`` is how often the
sequence has generated ``t``. A positive penalty makes repeats less likely, a negative one more likely.

:class:`LogitBias` is OpenAI's ``logit_bias``: a fixed number added to the score of each named token at every
step (-100 in effect bans a token, 100 forces it). :func:`chained` runs several processors one after another.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

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


# OpenAI's range for a token's bias
BIAS_BOUND = 100.0


@dataclass(frozen=True)
class LogitBias:
    """OpenAI's ``logit_bias``: ``bias[t]`` (in [-100, 100]) added to token ``t``'s score at every step; ``vocab``
    bounds the token ids."""

    bias: tuple[tuple[int, float], ...]
    vocab: int

    @classmethod
    def of(cls, bias: Mapping[Any, object], vocab: int) -> LogitBias:
        """From a request's mapping of token ids (ints, or their decimal strings as JSON carries them) to biases;
        :class:`GenerationArgumentError` naming the entry for an id outside the vocabulary or a bias outside
        [-100, 100], :class:`GenerationArgumentTypeError` for a key or value of another type."""
        pairs = []
        for key, value in bias.items():
            token = key
            if isinstance(key, str) and key.strip().lstrip("-").isdigit():
                token = int(key)
            if isinstance(token, bool) or not isinstance(token, int | np.integer):
                raise GenerationArgumentTypeError(
                    f"logit_bias: key {key!r} is not a token id; use the id's number (as a string in JSON)"
                )
            if not 0 <= int(token) < vocab:
                raise GenerationArgumentError(
                    f"logit_bias: token id {int(token)} is not in the model's vocabulary of {vocab} (0 to {vocab - 1})"
                )
            if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
                raise GenerationArgumentTypeError(
                    f"logit_bias[{key!r}] must be a number, got {type(value).__name__} {value!r}"
                )
            if not math.isfinite(float(value)) or abs(float(value)) > BIAS_BOUND:
                raise GenerationArgumentError(
                    f"logit_bias[{key!r}] must be in [-{BIAS_BOUND:g}, {BIAS_BOUND:g}] (OpenAI's range), got {value!r}"
                )
            pairs.append((int(token), float(value)))
        return cls(tuple(pairs), vocab)

    def __bool__(self) -> bool:
        """False when no token's score changes."""
        return any(value for _, value in self.bias)

    def __call__(self, generated: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """``scores`` with each named token's bias added; a new array, in float64 (as :class:`Penalties`)."""
        out = np.asarray(scores, dtype=np.float64).copy()
        for token, value in self.bias:
            out[token] += value
        return out


def chained(*processors: LogitsProcessor) -> LogitsProcessor | None:
    """One processor running ``processors`` in order, each on the scores the one before returned; None for none,
    the processor itself for one."""
    steps = tuple(processors)
    if not steps:
        return None
    if len(steps) == 1:
        return steps[0]

    def run(generated: np.ndarray, scores: np.ndarray) -> np.ndarray:
        for step in steps:
            scores = step(generated, scores)
        return scores

    return run


__all__ = ["BIAS_BOUND", "PENALTY_BOUND", "LogitBias", "LogitsProcessor", "Penalties", "chained"]
