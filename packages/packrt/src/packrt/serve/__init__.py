"""``packrt serve``: a model directory behind an OpenAI-style HTTP API (the ``serve`` extra: FastAPI, uvicorn).

- ``POST /v1/embeddings`` for encoders (sentence-transformers or Hugging Face encoder directories),
  ``POST /rerank`` (also ``/v1/rerank``, Cohere's shape) for cross-encoders (``...ForSequenceClassification``
  or sentence-transformers CrossEncoder directories), ``POST /v1/completions`` and
  ``POST /v1/chat/completions`` for causal LMs (``stream: true`` as server-sent events ending with
  ``data: [DONE]``);
- ``GET /health`` (503 once a mapped checkpoint file changed under the model), ``GET /v1/models`` and
  ``GET /v1/models/{id}``, ``POST /tokenize`` and ``POST /detokenize`` (llama.cpp's shapes),
  ``GET /metrics`` (Prometheus text), ``GET /docs`` (the OpenAPI page).

``api_key`` (``--api-key``, or the ``PACKRT_API_KEY`` environment variable) makes every route but
``/health`` need ``Authorization: Bearer <key>``; ``cors_origins`` (``--cors-origin``) lets those browser
origins call the server (:mod:`packrt.serve.access`); ``access_log`` (``--access-log FILE``, ``-`` for standard
output) writes one JSON line per request (:mod:`packrt.serve.access_log`).

Every request is bounded by :class:`ServeLimits`; every error body is OpenAI's error object. One worker
thread runs the model: embedding texts and rerank pairs are batched by tokens (:mod:`packrt.serve.batching`).
:func:`serve` runs the application with uvicorn, which on SIGTERM stops accepting connections and
finishes the requests in flight before the process exits. See docs/guides/serving.md.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from packrt.serve.limits import LimitsError, ServeLimits

if TYPE_CHECKING:
    from packrt.serve.app import build_app, create_app
    from packrt.serve.served import ServedModel

# The application's names import FastAPI (the serve extra) on first use, not with the package: the packrt
# command builds its `serve` options from ServeLimits, and must work without the extra.
_LAZY = {"build_app": "packrt.serve.app", "create_app": "packrt.serve.app", "ServedModel": "packrt.serve.served"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'packrt.serve' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def serve(
    path: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ServeLimits | None = None,
    *,
    weight_residency: str | None = None,
    name: str | None = None,
    drain_s: int = 30,
    api_key: str | None = None,
    cors_origins: Sequence[str] = (),
    dtype: str | None = None,
    quantize: str | None = None,
    access_log: str | None = None,
) -> None:
    """Load ``path`` and serve it on ``host:port`` until SIGINT or SIGTERM; requests in flight then get
    up to ``drain_s`` seconds to finish. ``weight_residency`` None: borrowed, packed for a GGUF file
    (:func:`packrt.serve.served.default_residency`). ``api_key`` None: the ``PACKRT_API_KEY`` environment
    variable's, if set (:func:`packrt.serve.access.api_key_from`). ``dtype`` and ``quantize`` as
    :meth:`ServedModel.load` takes them. ``access_log`` (a file, ``-`` for standard output) gets one JSON line per
    request (:mod:`packrt.serve.access_log`), and uvicorn's own access lines are then off."""
    import uvicorn

    from packrt.serve.access import api_key_from
    from packrt.serve.app import build_app

    key = api_key_from(api_key)
    app = build_app(
        path,
        limits,
        weight_residency=weight_residency,
        name=name,
        api_key=key,
        cors_origins=cors_origins,
        dtype=dtype,
        quantize=quantize,
        access_log=access_log,
    )
    uvicorn.run(
        app,
        host=host,
        port=port,
        timeout_graceful_shutdown=drain_s,
        log_level="info",
        access_log=access_log is None,  # ours is the one line per request
    )


__all__ = ["LimitsError", "ServeLimits", "ServedModel", "build_app", "create_app", "serve"]
