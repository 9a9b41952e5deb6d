"""Structured access logs (``packrt serve --access-log FILE``, ``-`` for standard output): one JSON object per
line and per HTTP request, written when its answer has been sent (a stream: when it ended)::

    {"time": "2026-12-07T16:09:13.123Z", "method": "POST", "path": "/v1/completions", "status": 200,
     "duration_ms": 41.7, "request_id": "9f1c...", "client": "127.0.0.1:52144",
     "prompt_tokens": 5, "completion_tokens": 12}

``time`` is when the request arrived (UTC); ``duration_ms`` runs to its last byte; ``request_id`` is the
request's ``X-Request-Id`` header when it sends a usable one (up to 128 printable ASCII characters), else a
new one, and the answer carries it back in ``X-Request-Id`` so a client's report can be found in the log;
``prompt_tokens`` and ``completion_tokens`` are there where the request read or generated tokens (the
embeddings, rerank and completion routes), else absent. Every request is logged: 401s, 404s, CORS
preflights and errors included. With this log on, uvicorn's own access lines are off (one line per request).
"""

from __future__ import annotations

import contextvars
import datetime
import json
import sys
import threading
import time
import uuid
from typing import Any, TextIO

from packrt.errors import PackrtError

# the current request's token counts: a dict the middleware puts in the request's context, which the routes fill
# (a stream's body runs in a task of its own, which shares the dict though not later changes of the variable)
_TOKENS: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar("packrt_access_tokens", default=None)
_MAX_ID = 128


def note_tokens(prompt: int | None = None, completion: int | None = None) -> None:
    """Record the current request's prompt and completion token counts for its access log line (nothing when no
    access log is kept)."""
    record = _TOKENS.get()
    if record is None:
        return
    if prompt is not None:
        record["prompt_tokens"] = prompt
    if completion is not None:
        record["completion_tokens"] = completion


class AccessLogError(PackrtError, OSError):
    """The access log's file cannot be opened for appending."""


class AccessLog:
    """Where the lines go: ``target`` a file path (appended to, opened now: AccessLogError when it cannot be) or
    ``-`` (standard output)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._lock = threading.Lock()
        try:
            self._stream: TextIO = sys.stdout if target == "-" else open(target, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as err:
            raise AccessLogError(
                f"access log {target!r} cannot be opened for appending ({err.strerror or err}); pass a writable "
                "file path to --access-log, or - for standard output"
            ) from err

    def write(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, separators=(",", ":"), ensure_ascii=False) + "\n"
        with self._lock:  # one whole line at a time, whatever thread writes
            self._stream.write(line)
            self._stream.flush()

    def close(self) -> None:
        if self._stream is not sys.stdout:
            self._stream.close()


def _request_id(headers: list[tuple[bytes, bytes]]) -> str:
    for name, value in headers:
        if name.lower() == b"x-request-id" and 0 < len(value) <= _MAX_ID and value.isascii():
            text = value.decode("ascii")
            if text.isprintable():
                return text
    return uuid.uuid4().hex


class AccessLogMiddleware:
    """Writes each HTTP request's line to ``log`` once its answer is sent (see the module docstring)."""

    def __init__(self, app: Any, log: AccessLog) -> None:
        self.app, self.log = app, log

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrived = datetime.datetime.now(datetime.UTC)
        started = time.perf_counter()
        ident = _request_id(list(scope.get("headers") or []))
        status = [500]  # an exception that escaped every handler: uvicorn answers 500
        tokens: dict[str, int] = {}
        reset = _TOKENS.set(tokens)

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", ident.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            _TOKENS.reset(reset)
            client = scope.get("client")
            entry: dict[str, Any] = {
                "time": arrived.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "method": scope.get("method", ""),
                "path": scope.get("path", ""),
                "status": status[0],
                "duration_ms": round((time.perf_counter() - started) * 1000.0, 3),
                "request_id": ident,
                "client": f"{client[0]}:{client[1]}" if client else None,
            }
            self.log.write(entry | tokens)


__all__ = ["AccessLog", "AccessLogError", "AccessLogMiddleware", "note_tokens"]
