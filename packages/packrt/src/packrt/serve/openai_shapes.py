"""The request and response shapes of OpenAI's API that ``packrt serve`` speaks, and its error body.

Requests are pydantic models, so FastAPI validates them (and lists them in ``/docs``). Every field of
OpenAI's API that would change an answer is either honoured or refused with a 400 naming it
(:mod:`packrt.serve.fields`); only fields that change nothing (``user``, ``store``, ``metadata``,
``service_tier``, a ``null`` anywhere) are accepted and ignored.
Every error, whatever raised it, leaves the server as OpenAI's error object::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "input[3]", "code": null}}

:class:`ServeError` carries one from anywhere in the server to the handler that writes it.
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from packrt.errors import PackrtError

INVALID = "invalid_request_error"
SERVER = "server_error"


class ServeError(PackrtError, RuntimeError):
    """An answer other than 200: the HTTP status, and the fields of OpenAI's error object."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = INVALID,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class _Request(BaseModel):
    # strict: a field's JSON type is the one OpenAI documents ("max_tokens": "5" is a 400 naming the field,
    # not a 5); an integer where a number is asked is a number
    model_config = ConfigDict(extra="allow", strict=True)

    model: str | None = None


class EmbeddingsRequest(_Request):
    """``POST /v1/embeddings``: ``input`` one text, a list of texts, one list of token ids or a list of them
    (each checked by the server, which names a bad one by its index); ``dimensions`` the first n numbers of
    each vector (a Matryoshka model's); ``truncate`` (packrt's) says what an input over the token bound gets."""

    input: str | list[Any]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    truncate: bool = True


class RerankRequest(_Request):
    """``POST /rerank`` (Cohere's and Jina's rerank API, which infinity and TEI-style clients speak): ``query``
    and the ``documents`` to order by relevance to it; ``top_n`` keeps the best n; ``return_documents`` echoes
    each document's text; ``raw_scores`` gives the logits before the model's activation; ``truncate`` as for
    embeddings (a pair over the token bound is cut, longer text first, or refused)."""

    query: str
    documents: list[Any]
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False
    raw_scores: bool = False
    truncate: bool = True


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a last chunk, with no choices, that carries the usage."""

    model_config = ConfigDict(extra="allow", strict=True)

    include_usage: bool | None = None


class _Sampling(_Request):
    max_tokens: int | None = Field(default=None, ge=0)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # choices per prompt, each its own sequence (packrt.serve.choices)
    n: int = Field(default=1, ge=1)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    logit_bias: dict[str, Any] | None = None


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: a prompt (a str or a list of token ids) or a list of prompts (of strs, or of
    lists of token ids), each answered with ``n`` choices; ``echo`` puts each choice's prompt before its answer;
    ``logprobs`` (0-5) the log probability of each token and of the ``logprobs`` likeliest at its place;
    ``best_of`` is served where it asks for no more candidates than ``n``."""

    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=5)
    best_of: int | None = Field(default=None, ge=1)
    suffix: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(_Sampling):
    """``POST /v1/chat/completions``: the messages, rendered by the model's chat template."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None


def embedding_item(index: int, vector: np.ndarray, encoding: str) -> dict[str, Any]:
    """One entry of an embeddings response: the vector as floats, or base64 of little-endian float32
    (what OpenAI's clients decode)."""
    data: Any
    if encoding == "base64":
        data = base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")
    else:
        data = vector.astype(np.float32).tolist()
    return {"object": "embedding", "index": index, "embedding": data}


def embeddings_response(vectors: np.ndarray, encoding: str, model: str, tokens: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [embedding_item(i, vectors[i], encoding) for i in range(vectors.shape[0])],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def rerank_response(
    ident: str, scores: np.ndarray, documents: list[str] | None, top_n: int | None, model: str, tokens: int
) -> dict[str, Any]:
    """The documents' indices by score, best first (equal scores keep the documents' order), the first
    ``top_n``; each with its text where ``documents`` is given."""
    order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))[:top_n]
    results: list[dict[str, Any]] = []
    for index in order:
        entry: dict[str, Any] = {"index": index, "relevance_score": float(scores[index])}
        if documents is not None:
            entry["document"] = {"text": documents[index]}
        results.append(entry)
    return {
        "id": ident,
        "object": "rerank",
        "results": results,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_chunk(
    ident: str, model: str, text: str, finish: str | None, chat: bool, index: int = 0
) -> dict[str, Any]:
    """One server-sent event of a streamed completion (``chat``: a chat.completion.chunk with a delta), for the
    choice ``index``."""
    choice: dict[str, Any]
    if chat:
        choice = {"index": index, "delta": {"content": text} if text else {}, "finish_reason": finish}
        kind = "chat.completion.chunk"
    else:
        choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
        kind = "text_completion"
    return {"id": ident, "object": kind, "created": int(time.time()), "model": model, "choices": [choice]}


def completion_choice(
    index: int, text: str, finish: str, chat: bool, logprobs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One choice of a whole completion (``chat``: with a message); ``logprobs`` is the choice's, as
    :mod:`packrt.serve.logprobs` shapes it for the endpoint (None where the request did not ask)."""
    if chat:
        message = {"role": "assistant", "content": text}
        return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish}
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}


def completion_response(
    ident: str, model: str, choices: list[dict[str, Any]], prompt_tokens: int, new_tokens: int, chat: bool
) -> dict[str, Any]:
    """A whole completion (``chat``: a chat.completion) holding ``choices`` (:func:`completion_choice`), in the
    order of their index; the usage counts each prompt's tokens once and every choice's new tokens."""
    return {
        "id": ident,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage(prompt_tokens, new_tokens),
    }


def usage_chunk(ident: str, model: str, prompt_tokens: int, new_tokens: int, chat: bool) -> dict[str, Any]:
    """The last event of a stream whose request asked ``stream_options.include_usage``: no choices, the usage
    (OpenAI's shape, which its clients read as the stream's usage)."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    return {
        "id": ident,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": usage(prompt_tokens, new_tokens),
    }


__all__ = [
    "INVALID",
    "SERVER",
    "ChatMessage",
    "ChatRequest",
    "CompletionRequest",
    "EmbeddingsRequest",
    "RerankRequest",
    "ServeError",
    "StreamOptions",
    "completion_choice",
    "completion_chunk",
    "completion_response",
    "embedding_item",
    "embeddings_response",
    "error_body",
    "new_id",
    "rerank_response",
    "usage",
    "usage_chunk",
]
