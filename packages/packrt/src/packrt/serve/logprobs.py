"""Log probabilities of a completion's tokens: ``logprobs`` of ``/v1/completions`` and of chat.

The decode loop (:meth:`~packrt.models.CausalLM.stream`) hands back the tokens it chose, not its scores,
so the scores are computed after it by one call of the model over the prompt and the new tokens: a
causal model's logits at position i are what the decode step after token i computed (the same
weights, the same prefix; only the order of the float sums may differ). That call is also what scores
the prompt's own tokens, which ``echo`` with ``logprobs`` asks for (lm-evaluation-harness's
log-likelihood requests, ``max_tokens: 0``); it holds the logits of every position at once, (prompt + answer)
x vocabulary floats, for requests that ask. The log probabilities are the model's own
(``log_softmax`` of its logits, before ``temperature`` and ``top_p``), as vLLM reports them.

A token's text is what it adds to the decoded text (so the completion's tokens join to its text); a
token that ends inside a multi-byte character shows U+FFFD there, and the character appears whole in
the token that completes it. ``text_offset`` is where each token's text starts in the answer's text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import packrt
from packrt.models import CausalLM
from packrt.models.devices import host

Decode = Callable[[list[int]], str]
# tokens of context before an alternative token when its text is decoded: enough for a tokenizer's
# decoder to join it as it would in place (a leading space, a byte sequence) without decoding the whole text
_CONTEXT = 8


@dataclass(frozen=True)
class Scored:
    """One scored token: its id, its log probability, and the ``top`` likeliest (id, log probability) there."""

    token: int
    logprob: float
    top: list[tuple[int, float]]


def score(lm: CausalLM, ids: Sequence[int], first: int, top: int) -> list[Scored]:
    """``ids[first:]`` scored by ``lm`` reading ``ids`` (``first`` >= 1: the first token has no prefix to be
    predicted from), each with its ``top`` likeliest alternatives, best first."""
    if first >= len(ids):
        return []
    tokens = packrt.from_numpy(np.asarray([list(ids[:-1])], dtype=np.int64))
    logits = np.asarray(host(lm(tokens)), dtype=np.float64)[0, first - 1 :]
    shifted = logits - logits.max(axis=-1, keepdims=True)
    logprobs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    scored = []
    for row, token in zip(logprobs, ids[first:], strict=True):
        best: list[tuple[int, float]] = []
        if top:
            picked = np.argpartition(-row, top - 1)[:top] if top < row.shape[0] else np.arange(row.shape[0])
            best = [(int(i), float(row[i])) for i in sorted(picked, key=lambda i: -row[i])]
        scored.append(Scored(int(token), float(row[token]), best))
    return scored


def pieces(decode: Decode, ids: Sequence[int]) -> tuple[list[str], list[int]]:
    """Each token's text in ``decode(ids)`` and where it starts: what decoding one more token adds."""
    texts, offsets, before = [], [], ""
    for end in range(1, len(ids) + 1):
        settled = before.rstrip("\ufffd")  # a character still open is written again, whole, by the next token
        after = decode(list(ids[:end]))
        offsets.append(len(settled))
        texts.append(after[len(settled) :])
        before = after
    return texts, offsets


def alternative(decode: Decode, context: Sequence[int], token: int) -> str:
    """The text ``token`` would add after ``context`` (its last few tokens read)."""
    near = list(context[-_CONTEXT:])
    before = decode(near).rstrip("\ufffd")
    return decode([*near, token])[len(before) :]


def completion_logprobs(
    decode: Decode, contexts: list[list[int]], scored: list[Scored | None], texts: list[str], offsets: list[int]
) -> dict[str, Any]:
    """``/v1/completions``' logprobs object for the tokens ``texts`` (at ``offsets``) whose scores are
    ``scored`` (None: the prompt's first token, which nothing predicts); an alternative's text is what it
    adds after its place's ``contexts`` entry, the tokens before it in the text it belongs to. Each
    ``top_logprobs`` entry holds the likeliest tokens and the chosen one (so up to ``logprobs`` + 1 of
    them, as OpenAI's API gives)."""
    tops: list[dict[str, float] | None] = []
    for found, context, text in zip(scored, contexts, texts, strict=True):
        if found is None:
            tops.append(None)
            continue
        entry = {alternative(decode, context, token): value for token, value in found.top}
        entry.setdefault(text, found.logprob)
        tops.append(entry)
    return {
        "tokens": texts,
        "token_logprobs": [None if found is None else found.logprob for found in scored],
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def chat_logprobs(decode: Decode, contexts: list[list[int]], scored: list[Scored], texts: list[str]) -> dict[str, Any]:
    """Chat's logprobs object: ``content``, one entry per token of the answer (its text, log probability,
    UTF-8 bytes and ``top_logprobs``, each alternative's text what it adds after its ``contexts`` entry)."""
    content = []
    for found, context, text in zip(scored, contexts, texts, strict=True):
        top = []
        for token, value in found.top:
            shown = alternative(decode, context, token)
            top.append({"token": shown, "logprob": value, "bytes": list(shown.encode("utf-8"))})
        entry = {"token": text, "logprob": found.logprob, "bytes": list(text.encode("utf-8"))}
        content.append({**entry, "top_logprobs": top})
    return {"content": content, "refusal": None}


__all__ = ["Scored", "alternative", "chat_logprobs", "completion_logprobs", "pieces", "score"]
