"""Who may call ``packrt serve``: an API key (``--api-key``, or ``PACKRT_API_KEY``) and browser origins
(``--cors-origin``).

With a key, every request but ``GET /health`` (which a load balancer or an orchestrator probes without
credentials) needs ``Authorization: Bearer KEY``, as OpenAI's clients send their ``api_key``; one
without it, or with another key, is a 401 in OpenAI's error shape (``code: "invalid_api_key"``) with
``WWW-Authenticate: Bearer``. Keys are compared in constant time. A browser's CORS preflight
(``OPTIONS`` with ``Access-Control-Request-Method``) carries no credentials, so the CORS layer, outside
the key check, answers it for the origins allowed; it answers nothing to other origins.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from packrt.serve.openai_shapes import error_body

# the route a health probe reaches without credentials
OPEN_PATHS = frozenset({"/health"})
ENV_KEY = "PACKRT_API_KEY"


def api_key_from(given: str | None) -> str | None:
    """The key the server requires: ``given`` (``--api-key``), else the ``PACKRT_API_KEY`` environment
    variable; None (no key asked) when neither is set or it is empty."""
    key = given if given is not None else os.environ.get(ENV_KEY)
    return key or None


class ApiKeyMiddleware:
    """Refuses with a 401 every HTTP request but :data:`OPEN_PATHS` that lacks ``Authorization: Bearer <key>``."""

    def __init__(self, app: Any, key: str) -> None:
        self.app, self.key = app, key.encode("utf-8")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path", "") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"authorization", b"")
        scheme, _, token = given.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.key):
            await self.app(scope, receive, send)
            return
        message = (
            "this server needs an API key: send the header 'Authorization: Bearer <key>' with the key it was "
            "started with (--api-key or PACKRT_API_KEY; an OpenAI client's api_key)"
            if not given
            else "the API key sent in the Authorization header is not this server's; send the key it was started "
            "with, as 'Authorization: Bearer <key>'"
        )
        body = json.dumps(error_body(message, "invalid_request_error", None, "invalid_api_key")).encode("utf-8")
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode("ascii")),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def add_cors(app: FastAPI, origins: Sequence[str]) -> None:
    """CORS for ``origins`` (``*`` allows every origin), when any; added last, so it runs first: a preflight is
    answered before the key check, which it could never pass."""
    if not origins:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(origins),
        allow_methods=["GET", "POST", "OPTIONS"],
        allow_headers=["*"],
        # browsers refuse credentials with a wildcard origin: they are allowed for named origins only
        allow_credentials="*" not in origins,
    )


__all__ = ["ENV_KEY", "OPEN_PATHS", "ApiKeyMiddleware", "add_cors", "api_key_from"]
