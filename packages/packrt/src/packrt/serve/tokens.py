"""``POST /tokenize`` and ``POST /detokenize``, in llama.cpp server's shapes, for every kind of served model.

- ``/tokenize``: ``{"content": "text", "add_special": false, "with_pieces": false}`` gives
  ``{"tokens": [ids]}``: the served model's tokenizer, not truncated, with the model's special tokens
  added only when ``add_special`` says so (llama.cpp's default is not to); ``with_pieces`` gives each
  token as ``{"id": id, "piece": text}`` instead, the piece being the text the token adds.
- ``/detokenize``: ``{"tokens": [ids]}`` gives ``{"content": "text"}`` (special tokens left out, as the
  completions' text leaves them out); an id outside the vocabulary is a 400 naming ``tokens[i]``.

These are the ids ``/v1/embeddings`` and ``/v1/completions`` take as token-id input.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from packrt.serve.logprobs import pieces
from packrt.serve.openai_shapes import ServeError
from packrt.serve.served import ServedModel


class TokenizeRequest(BaseModel):
    """``POST /tokenize``'s body (llama.cpp's server's)."""

    model_config = ConfigDict(extra="allow", strict=True)

    content: str
    add_special: bool = False
    with_pieces: bool = False


class DetokenizeRequest(BaseModel):
    """``POST /detokenize``'s body (llama.cpp's server's)."""

    model_config = ConfigDict(extra="allow", strict=True)

    tokens: list[int]


def tokenize(served: ServedModel, request: TokenizeRequest) -> dict[str, Any]:
    """The ids of ``request.content`` (see the module docstring)."""
    try:
        request.content.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ServeError(
            400, f"content is not valid Unicode text: {err.reason} at character {err.start}", param="content"
        ) from None
    ids = served.counter.encode(request.content, add_special_tokens=request.add_special).ids
    if not request.with_pieces:
        return {"tokens": ids}

    def decode(chosen: list[int]) -> str:
        return str(served.counter.decode(chosen))

    texts, _ = pieces(decode, ids)
    return {"tokens": [{"id": token, "piece": text} for token, text in zip(ids, texts, strict=True)]}


def detokenize(served: ServedModel, request: DetokenizeRequest) -> dict[str, Any]:
    """The text of ``request.tokens``; an id outside the vocabulary is a 400 naming it."""
    vocab = served.counter.get_vocab_size()
    for index, token in enumerate(request.tokens):
        if not 0 <= token < vocab:
            raise ServeError(
                400,
                f"tokens[{index}] is {token}, outside this model's vocabulary [0, {vocab}); send ids POST /tokenize "
                "gave",
                param=f"tokens[{index}]",
                code="invalid_token_id",
            )
    return {"content": served.counter.decode(request.tokens)}


__all__ = ["DetokenizeRequest", "TokenizeRequest", "detokenize", "tokenize"]
