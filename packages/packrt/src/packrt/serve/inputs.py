"""What an embeddings or rerank request holds, checked before any of it joins a batch, and ``dimensions``.

``input`` of ``/v1/embeddings`` is one text, a list of texts, one list of token ids, or a list of such
lists (OpenAI's four shapes; LangChain's ``OpenAIEmbeddings`` sends token ids). Token ids are what the
model reads, as vLLM takes them: the served model's own ids (``POST /tokenize`` gives them), each inside
its vocabulary, with no special token and no prompt added, cut to the server's bound when the request
says ``truncate``; a model whose default prompt is left out of its pooling (``include_prompt`` false)
takes text only, since its batch masks the prompt's place. A bad input is a 400 naming it
(``input[3]``), before the others cost anything.

``dimensions`` keeps the first n numbers of each vector, which only a Matryoshka-trained model's vectors
survive: the model says it is one in its config.json (``matryoshka_dimensions``, the sizes it was
trained at, or ``is_matryoshka: true``, as vLLM reads them). Asked of another model, any n but its full
dimension is a 400 naming ``dimensions``. A cut vector of a model whose vectors are unit length is made
unit length again (vLLM's and OpenAI's ``dimensions`` give unit vectors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from tokenizers import Encoding

from packrt.serve.limits import ServeLimits
from packrt.serve.openai_shapes import EmbeddingsRequest, ServeError
from packrt.serve.served import ServedModel, TokenizedText


@dataclass(frozen=True)
class _Ids:
    """Token ids given by the client, shaped as the batch reads an encoding (ids, type ids, attention mask)."""

    ids: list[int]
    type_ids: list[int]
    attention_mask: list[int]


def is_token_ids(value: object) -> bool:
    """``value`` is a non-empty list of ints (a JSON true is not one)."""
    return (
        isinstance(value, list) and bool(value) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )


def embedding_inputs(request: EmbeddingsRequest, limits: ServeLimits) -> list[str] | list[list[int]]:
    """The request's inputs, texts or token-id lists, each checked alone: a bad one is a 400 naming
    ``input[i]``, before any joins a batch."""
    given = request.input
    if isinstance(given, str):
        return checked([given], "input", limits, single=True)
    if is_token_ids(given):
        return [cast(list[int], given)]
    if given and isinstance(given[0], list):  # a list of lists: every input must be token ids
        _count(given, "input", limits)
        for index, item in enumerate(given):
            if not is_token_ids(item):
                raise ServeError(
                    400,
                    f"input[{index}] is not a non-empty list of token ids (ints); a list of lists is token-id "
                    "input, each list one input",
                    param=f"input[{index}]",
                )
        return cast(list[list[int]], given)
    return checked(given, "input", limits)


def tokenized_ids(
    served: ServedModel, inputs: list[list[int]], bound: int, truncate: bool, single: bool
) -> list[TokenizedText]:
    """Token-id inputs as the batch reads them: each id inside the vocabulary (else a 400 naming the input:
    ``input`` itself when it is ``single``, one list of ids), cut to ``bound`` tokens where ``truncate`` says
    so (else one over it is a 400)."""
    encoder = served.encoder
    if encoder is not None and encoder.prompt_tokens(encoder.pipeline.prompt()):
        # the batch masks a default prompt's tokens out of the pooling, and token ids carry no prompt: the
        # mask would drop the client's own first tokens
        raise ServeError(
            400,
            f"model {served.name!r} puts its default prompt before each text and pools without it, which token-id "
            "input cannot carry; send the text instead",
            param="input",
            code="unsupported_value",
        )
    vocab = served.tokenizer.get_vocab_size()
    tokenized = []
    for index, ids in enumerate(inputs):
        bad = next((token for token in ids if not 0 <= token < vocab), None)
        if bad is not None:
            where = "input" if single else f"input[{index}]"
            raise ServeError(
                400,
                f"{where} holds token id {bad}, outside this model's vocabulary [0, {vocab}); token ids come from "
                "the served model's tokenizer (POST /tokenize gives them), not from another model's (LangChain's "
                "OpenAIEmbeddings sends tiktoken's unless told check_embedding_ctx_length=False)",
                param=where,
                code="invalid_token_id",
            )
        kept = ids[:bound]
        # the batch reads an encoding's ids, type_ids and attention_mask only (SentenceEncoder.batch)
        encoding = cast(Encoding, _Ids(kept, [0] * len(kept), [1] * len(kept)))
        tokenized.append(TokenizedText(encoding, len(ids)))
    within_bound(tokenized, bound, truncate, "input", single)
    return tokenized


def check_dimensions(served: ServedModel, dimensions: int | None) -> None:
    """A 400 naming ``dimensions`` unless the model's vectors may be cut to it (see the module docstring)."""
    if dimensions is None:
        return
    encoder = served.encoder
    full = encoder.dimension if encoder is not None else 0
    if dimensions == full:
        return
    if dimensions > full:
        raise ServeError(
            400,
            f"dimensions is {dimensions}, more than the {full} numbers of model {served.name!r}'s vectors; send "
            f"{full} or fewer",
            param="dimensions",
            code="invalid_value",
        )
    sizes = served.matryoshka_dimensions
    if sizes is None:
        raise ServeError(
            400,
            f"dimensions is {dimensions}, but model {served.name!r} does not say it was trained to be cut "
            "(Matryoshka: matryoshka_dimensions or is_matryoshka in its config.json), and the first "
            f"{dimensions} of its {full} numbers are not an embedding; send dimensions: {full} or leave it out",
            param="dimensions",
            code="unsupported_value",
        )
    if sizes and dimensions not in sizes:
        raise ServeError(
            400,
            f"dimensions is {dimensions}; model {served.name!r} was trained to be cut to {list(sizes)} only "
            "(matryoshka_dimensions in its config.json): send one of them",
            param="dimensions",
            code="unsupported_value",
        )


def cut(vectors: np.ndarray, dimensions: int | None, unit: bool) -> np.ndarray:
    """The first ``dimensions`` numbers of each row, made unit length again where the model's are (``unit``)."""
    if dimensions is None or dimensions >= vectors.shape[1]:
        return vectors
    kept = vectors[:, :dimensions]
    if not unit:
        return kept
    norms = np.linalg.norm(kept, axis=1, keepdims=True)
    unit_rows: np.ndarray = (kept / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit_rows


def _count(items: list[Any], param: str, limits: ServeLimits) -> None:
    if not items:
        raise ServeError(400, f"{param} is an empty list; give at least one text", param=param)
    if len(items) > limits.max_texts_per_request:
        raise ServeError(
            400,
            f"{param} holds {len(items)} texts, more than this server's {limits.max_texts_per_request} per "
            "request; split them over several requests",
            param=param,
            code="too_many_inputs",
        )


def checked(texts: list[Any], param: str, limits: ServeLimits, single: bool = False) -> list[str]:
    """``texts`` (the body's field ``param``), each checked alone: a bad one is a 400 naming ``param[i]``
    (``param`` itself for a ``single`` text), an empty or too long list a 400 naming ``param``."""
    _count(texts, param, limits)
    for index, text in enumerate(texts):
        where = param if single else f"{param}[{index}]"
        if not isinstance(text, str):
            # token ids are one list of ints, or a list of such lists: never mixed with texts
            ids = " (token ids: one list of ints, or a list of such lists)" if param == "input" else ""
            raise ServeError(400, f"{where} is a {type(text).__name__}, expected a string{ids}", param=where)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ServeError(
                400,
                f"{where} is not valid Unicode text: {err.reason} at character {err.start}",
                param=where,
                code="invalid_text",
            ) from None
    return texts


def within_bound(tokenized: list[TokenizedText], bound: int, truncate: bool, param: str, single: bool) -> None:
    """A 400 naming the first text (or pair) over ``bound`` tokens, unless the request asked to ``truncate``."""
    over = next((i for i, text in enumerate(tokenized) if text.count > bound), None)
    if over is not None and not truncate:
        where = param if single else f"{param}[{over}]"
        raise ServeError(
            400,
            f"{where} has {tokenized[over].count} tokens, more than this server's {bound}; shorten it or send "
            "truncate: true",
            param=where,
            code="context_length_exceeded",
        )


__all__ = ["check_dimensions", "checked", "cut", "embedding_inputs", "is_token_ids", "tokenized_ids", "within_bound"]
