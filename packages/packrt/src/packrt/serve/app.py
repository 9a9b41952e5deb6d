"""The FastAPI application of ``packrt serve``: routes, body checks, error bodies, the model's worker.

:func:`create_app` serves one loaded :class:`~packrt.serve.served.ServedModel`; :func:`build_app`
loads a path first. Each request body is read by the server itself, so its size is bounded while it
arrives and its nesting measured before the JSON parser sees it (:mod:`packrt.serve.limits`); it is
then validated by the route's pydantic model, whose schema ``/docs`` shows. Every answer other than
200, FastAPI's and Starlette's own (404, 405, validation) and unexpected exceptions included, is
OpenAI's error object (:mod:`packrt.serve.openai_shapes`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from packrt.errors import CheckpointError, PackrtError
from packrt.serve import completions, tokens
from packrt.serve.access import ApiKeyMiddleware, add_cors
from packrt.serve.access_log import AccessLog, AccessLogMiddleware, note_tokens
from packrt.serve.batching import EmbedJob, EmbedWorker, QueueFullError, Worker
from packrt.serve.choices import ChoiceRunner
from packrt.serve.decoding import DecodeJob, DecodeWorker
from packrt.serve.fields import check_fields
from packrt.serve.inputs import (
    check_dimensions,
    checked,
    cut,
    embedding_inputs,
    is_token_ids,
    tokenized_ids,
    within_bound,
)
from packrt.serve.limits import ServeLimits
from packrt.serve.metrics import Metrics, MetricsMiddleware
from packrt.serve.openai_shapes import (
    SERVER,
    ChatRequest,
    CompletionRequest,
    EmbeddingsRequest,
    RerankRequest,
    ServeError,
    embeddings_response,
    new_id,
    rerank_response,
)
from packrt.serve.served import ServedModel, TokenizedText
from packrt_io import json_depth  # the one JSON depth scan: safetensors headers and request bodies alike

Body = TypeVar("Body", bound=BaseModel)


def as_serve_error(err: BaseException) -> ServeError:
    """The answer for an exception raised while serving a request."""
    if isinstance(err, ServeError):
        return err
    if isinstance(err, CheckpointError):
        return ServeError(503, f"the model cannot serve: {err}", SERVER, code="checkpoint_changed")
    if isinstance(err, (completions.RequestTimeoutError, TimeoutError)):
        return ServeError(
            504, "the request did not finish within this server's request timeout", SERVER, code="timeout"
        )
    if isinstance(err, PackrtError) and isinstance(err, (ValueError, TypeError, IndexError)):
        return ServeError(400, str(err))
    return ServeError(500, f"internal error ({type(err).__name__}): {err}", SERVER, code="internal_error")


def _param(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    text = ""
    for part in parts:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return text


def _validation_error(errors: list[Any]) -> ServeError:
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    param = _param(tuple(first.get("loc", ())))
    return ServeError(
        422, f"{param or 'body'}: {first.get('msg', 'invalid')}", param=param or None, code="invalid_value"
    )


async def _read_body(request: Request, limits: ServeLimits) -> bytes:
    declared = request.headers.get("content-length")
    too_big = ServeError(
        413,
        f"the request body is over this server's {limits.max_body_bytes} bytes; send fewer or shorter texts",
        code="body_too_large",
    )
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.max_body_bytes:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


async def parse(request: Request, limits: ServeLimits, shape: type[Body]) -> Body:
    """The request body as ``shape``: size, nesting, JSON syntax, then the fields, each refused with its own error."""
    raw = await _read_body(request, limits)
    depth = json_depth(raw)
    if depth > limits.max_json_depth:
        raise ServeError(
            400,
            f"the JSON body nests {depth} levels deep; this server takes {limits.max_json_depth}",
            code="json_too_deep",
        )
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise ServeError(400, f"the body is not valid JSON: {err}", code="invalid_json") from None
    try:
        return shape.model_validate(data)
    except ValidationError as err:
        raise _validation_error(err.errors(include_url=False)) from None


class _App:
    """The state behind the routes: the model, its worker, the limits and the counters."""

    def __init__(self, served: ServedModel, limits: ServeLimits) -> None:
        self.served, self.limits = served, limits
        self.bound = min(limits.max_tokens_per_text, served.max_positions)
        self.worker: Worker
        capacity = limits.max_queued_requests
        if served.encoder is not None:
            encoder = served.encoder
            if self.bound < served.max_positions:
                encoder.tokenizer.enable_truncation(max_length=self.bound)
            # the directory's default prompt is before every text (ServedModel.tokenize), as encode puts it
            prompt_tokens = encoder.prompt_tokens(encoder.pipeline.prompt())
            self.worker = EmbedWorker(
                # the queued encodings, batched: no text is tokenized again
                functools.partial(encoder.embed, prompt_tokens=prompt_tokens),
                encoder.dimension,
                capacity,
                limits.max_batch_tokens,
                limits.batch_wait_s,
                self._batched,
            )
        elif served.cross_encoder is not None:
            scorer = served.cross_encoder
            if self.bound < served.max_positions:
                scorer.tokenizer.enable_truncation(max_length=self.bound)  # a pair: the longer text cut first
            # the queued pairs, batched as embeddings are: each pair one encoding, tokenized once
            self.worker = EmbedWorker(
                scorer.logits, scorer.num_labels, capacity, limits.max_batch_tokens, limits.batch_wait_s, self._batched
            )
        else:
            self.worker = DecodeWorker(served, capacity, limits.max_batch_sequences)
        self.metrics = Metrics(lambda: self.worker.pending, capacity)
        self.choices = ChoiceRunner(served, self.metrics, self.submit, limits.request_timeout_s, as_serve_error)

    def _batched(self, texts: int, tokens: int) -> None:
        self.metrics.batch(texts, tokens)

    def deadline(self) -> float:
        return time.monotonic() + self.limits.request_timeout_s

    def full(self) -> ServeError:
        seconds = str(self.limits.retry_after_s)
        return ServeError(
            429,
            f"this server already holds {self.limits.max_queued_requests} requests; retry after {seconds} s",
            "rate_limit_error",
            code="queue_full",
            headers={"Retry-After": seconds},
        )

    def require(self, kind: str, path: str, model: str | None) -> None:
        """The request is for this server: its endpoint is the model's kind, and the ``model`` it names
        (when it names one) is the served model's name, so a client pointed at the wrong server is told
        instead of answered by another model."""
        if self.served.kind != kind:
            raise ServeError(
                404,
                f"{path} is not served here: model {self.served.name!r} serves /v1/{self.served.kind}",
                code="wrong_endpoint",
            )
        if model is not None and model != self.served.name:
            raise ServeError(
                404,
                f"model {model!r} is not served here; this server serves {self.served.name!r} (GET /v1/models): "
                f"send model {self.served.name!r}, or start the server with --name {model!r}",
                param="model",
                code="model_not_found",
            )

    async def embeddings(self, request: EmbeddingsRequest) -> dict[str, Any]:
        self.require("embeddings", "/v1/embeddings", request.model)
        check_dimensions(self.served, request.dimensions)
        given = embedding_inputs(request, self.limits)
        single = isinstance(request.input, str) or is_token_ids(request.input)
        if isinstance(given[0], list):  # token ids: read as given, never tokenized
            tokenized = tokenized_ids(self.served, given, self.bound, request.truncate, single)
        else:
            tokenized = await run_in_threadpool(self.served.tokenize, given)  # the only time these are tokenized
            within_bound(tokenized, self.bound, request.truncate, "input", single)
        vectors, tokens = await self._batched_call(tokenized)
        assert self.served.encoder is not None
        vectors = cut(vectors, request.dimensions, self.served.encoder.pipeline.normalize)
        return embeddings_response(vectors, request.encoding_format, self.served.name, tokens)

    async def rerank(self, request: RerankRequest) -> dict[str, Any]:
        self.require("rerank", "/v1/rerank", request.model)
        scorer = self.served.cross_encoder
        assert scorer is not None
        if scorer.num_labels != 1:
            raise ServeError(
                400,
                f"model {self.served.name!r} gives {scorer.num_labels} scores per pair and ranking needs one; it "
                "is a classifier, not a reranker",
                code="not_a_reranker",
            )
        query = checked([request.query], "query", self.limits, single=True)[0]
        documents = checked(request.documents, "documents", self.limits)
        tokenized = await run_in_threadpool(self.served.tokenize_pairs, query, documents)  # each pair once
        within_bound(tokenized, self.bound, request.truncate, "documents", False)
        logits, tokens = await self._batched_call(tokenized)
        scores = logits if request.raw_scores else scorer.activate(logits)
        shown = documents if request.return_documents else None
        return rerank_response(new_id("rerank"), scores[:, 0], shown, request.top_n, self.served.name, tokens)

    async def _batched_call(self, tokenized: list[TokenizedText]) -> tuple[np.ndarray, int]:
        """The rows the batching worker computes for ``tokenized`` (with other requests' texts), and the tokens
        the model read for them (each text cut to the bound: min(count, bound))."""
        tokens = [len(text.encoding.ids) for text in tokenized]
        job = EmbedJob([text.encoding for text in tokenized], tokens, self.deadline())
        assert isinstance(self.worker, EmbedWorker)
        try:
            self.worker.submit(job)
        except QueueFullError:
            raise self.full() from None
        try:
            rows = await asyncio.wait_for(asyncio.wrap_future(job.future), self.limits.request_timeout_s)
        except TimeoutError:
            raise as_serve_error(completions.RequestTimeoutError()) from None
        self.metrics.add_tokens("prompt", sum(tokens))
        note_tokens(prompt=sum(tokens))
        return rows, sum(tokens)

    def _prompts(self, request: CompletionRequest | ChatRequest) -> tuple[list[completions.Prompt], bool]:
        """The request's checked prompts (a chat's one), each bound checked, and whether it is a chat; a 400
        naming ``n`` when its choices could never fit the queue."""
        path = "/v1/chat/completions" if isinstance(request, ChatRequest) else "/v1/completions"
        self.require("completions", path, request.model)
        check_fields(request)  # a field this server does not serve is a 400 naming it, before any work
        if isinstance(request, ChatRequest):
            text, max_tokens = completions.chat_text(self.served, request)
            prompts = [completions.check_prompt(self.served, self.limits, text, max_tokens, request, True)]
        else:
            given = completions.completion_prompts(request, self.limits)
            # with several prompts, an error names the one it is about by index
            names = ["prompt"] if len(given) == 1 else [f"prompt[{at}]" for at in range(len(given))]
            prompts = [
                completions.check_prompt(self.served, self.limits, each, request.max_tokens, request, False, name)
                for each, name in zip(given, names, strict=True)
            ]
        choices, capacity = request.n * len(prompts), self.limits.max_queued_requests
        if choices > capacity:
            raise ServeError(
                400,
                f"n {request.n} x {len(prompts)} prompt(s) asks for {choices} choices, more than the {capacity} this "
                "server holds at once (each choice is decoded as its own sequence); ask for fewer",
                param="n",
            )
        return prompts, isinstance(request, ChatRequest)

    async def complete(self, request: CompletionRequest | ChatRequest) -> Response:
        prompts, chat = self._prompts(request)
        ident = new_id("chatcmpl" if chat else "cmpl")
        if request.stream:
            usage = request.stream_options is not None and bool(request.stream_options.include_usage)
            return self.choices.stream(prompts, request.n, chat, ident, self.deadline(), usage)
        body, _ = await self.choices.answer(prompts, request.n, chat, ident, self.deadline())
        return JSONResponse(body)

    def submit(self, jobs: list[DecodeJob]) -> list[concurrent.futures.Future[Any]]:
        assert isinstance(self.worker, DecodeWorker)
        try:
            return self.worker.submit(jobs)
        except QueueFullError:
            raise self.full() from None


def _error_response(error: ServeError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def create_app(
    served: ServedModel,
    limits: ServeLimits | None = None,
    *,
    api_key: str | None = None,
    cors_origins: Sequence[str] = (),
    access_log: AccessLog | str | None = None,
) -> FastAPI:
    """The server's ASGI application for ``served`` (run it with uvicorn, or ``packrt serve``). With ``api_key``
    every route but ``/health`` needs ``Authorization: Bearer <api_key>``; ``cors_origins`` are the browser
    origins allowed to call it (:mod:`packrt.serve.access`); ``access_log`` (a file path, ``-`` for standard
    output) gets one JSON line per request (:mod:`packrt.serve.access_log`)."""
    state = _App(served, limits or ServeLimits())
    log = AccessLog(access_log) if isinstance(access_log, str) else access_log

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(state.worker.close)  # after uvicorn has drained the requests in flight
        if log is not None:
            log.close()

    app = FastAPI(title="packrt serve", summary=f"OpenAI-style API for {served.name}", lifespan=lifespan)
    app.state.packrt = state
    _routes(app, state)
    _handlers(app)
    if api_key:
        app.add_middleware(ApiKeyMiddleware, key=api_key)  # inside the metrics: a 401 is counted
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    add_cors(app, cors_origins)  # a preflight, which carries no key, is answered before the key check
    if log is not None:
        app.add_middleware(AccessLogMiddleware, log=log)  # outermost: every request is logged, preflights included
    return app


def _schema(shape: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": shape.model_json_schema()}}}}


def _routes(app: FastAPI, state: _App) -> None:
    limits = state.limits

    @app.post("/v1/embeddings", openapi_extra=_schema(EmbeddingsRequest))
    async def embeddings(request: Request) -> dict[str, Any]:
        return await state.embeddings(await parse(request, limits, EmbeddingsRequest))

    @app.post("/v1/rerank", openapi_extra=_schema(RerankRequest))
    @app.post("/rerank", openapi_extra=_schema(RerankRequest))
    async def rerank(request: Request) -> dict[str, Any]:
        return await state.rerank(await parse(request, limits, RerankRequest))

    @app.post("/v1/completions", openapi_extra=_schema(CompletionRequest))
    async def completion(request: Request) -> Response:
        return await state.complete(await parse(request, limits, CompletionRequest))

    @app.post("/v1/chat/completions", openapi_extra=_schema(ChatRequest))
    async def chat(request: Request) -> Response:
        return await state.complete(await parse(request, limits, ChatRequest))

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [state.served.describe()]}

    @app.get("/v1/models/{model_id:path}")  # path: a name such as "BAAI/bge-small-en" holds a slash
    async def get_model(model_id: str) -> dict[str, Any]:
        if model_id != state.served.name:
            raise ServeError(
                404,
                f"model {model_id!r} is not served here; this server serves {state.served.name!r} (GET /v1/models)",
                param="model",
                code="model_not_found",
            )
        return state.served.describe()

    @app.post("/tokenize", openapi_extra=_schema(tokens.TokenizeRequest))
    async def tokenize(request: Request) -> dict[str, Any]:
        body = await parse(request, limits, tokens.TokenizeRequest)
        return await run_in_threadpool(tokens.tokenize, state.served, body)

    @app.post("/detokenize", openapi_extra=_schema(tokens.DetokenizeRequest))
    async def detokenize(request: Request) -> dict[str, Any]:
        body = await parse(request, limits, tokens.DetokenizeRequest)
        return await run_in_threadpool(tokens.detokenize, state.served, body)

    @app.get("/health")
    async def health() -> Response:
        try:
            await run_in_threadpool(state.served.check_files)
        except CheckpointError as err:
            return _error_response(as_serve_error(err))
        return JSONResponse({"status": "ok", "model": state.served.name, "queue_depth": state.worker.pending})

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(state.metrics.render(), media_type="text/plain; version=0.0.4")


def _handlers(app: FastAPI) -> None:
    def handler(convert: Callable[[Any], ServeError]) -> Callable[[Request, Any], Awaitable[Response]]:
        async def handle(_: Request, err: Any) -> Response:
            return _error_response(convert(err))

        return handle

    def http_error(err: HTTPException) -> ServeError:
        code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code)
        return ServeError(err.status_code, str(err.detail), code=code, headers=dict(err.headers or {}))

    app.add_exception_handler(ServeError, handler(lambda err: err))
    app.add_exception_handler(HTTPException, handler(http_error))
    app.add_exception_handler(RequestValidationError, handler(lambda err: _validation_error(list(err.errors()))))
    app.add_exception_handler(Exception, handler(as_serve_error))


def build_app(
    path: str | os.PathLike[str],
    limits: ServeLimits | None = None,
    *,
    weight_residency: str | None = None,
    name: str | None = None,
    api_key: str | None = None,
    cors_origins: Sequence[str] = (),
    dtype: str | None = None,
    quantize: str | None = None,
    access_log: AccessLog | str | None = None,
) -> FastAPI:
    """Load the model at ``path`` (``dtype``, ``quantize``: as :meth:`ServedModel.load` takes them) and return its
    application (see :func:`create_app`)."""
    log = AccessLog(access_log) if isinstance(access_log, str) else access_log  # a bad path: before the load
    served = ServedModel.load(path, weight_residency=weight_residency, name=name, dtype=dtype, quantize=quantize)
    return create_app(served, limits, api_key=api_key, cors_origins=cors_origins, access_log=log)


__all__ = ["as_serve_error", "build_app", "create_app", "parse"]
