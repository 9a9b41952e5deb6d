"""``GET /metrics``: the server's counters in Prometheus' text format (version 0.0.4), kept by hand.

- ``packrt_requests_total{endpoint,status}``: answered requests (streams counted when they end);
- ``packrt_request_seconds_sum`` / ``_count{endpoint}``: time from arrival to the last byte sent;
- ``packrt_tokens_total{kind}``: ``prompt`` tokens read and ``completion`` tokens generated;
- ``packrt_batches_total`` / ``packrt_batch_texts_total``: embedding model calls and the texts in them;
- ``packrt_queue_depth``: requests waiting or running now; ``packrt_queue_capacity`` its bound.

:class:`MetricsMiddleware` is pure ASGI, so it sees every answer, those of the error handlers and of
routes that do not exist included, and times a streamed response to its end.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

_ENDPOINTS = (
    "/v1/embeddings",
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/rerank",
    "/rerank",
    "/v1/models",
    "/tokenize",
    "/detokenize",
    "/health",
    "/metrics",
)
_ONE_MODEL = "/v1/models/{id}"  # every model's page counts under one label, not one label per id sent


def endpoint_of(path: str) -> str:
    """The ``endpoint`` label of a request path: a route's own path, ``/v1/models/{id}`` for a model's page, and
    ``other`` for a path the server has no route for (so a client cannot grow the label set without bound)."""
    if path in _ENDPOINTS:
        return path
    if path.startswith("/v1/models/") and len(path) > len("/v1/models/"):
        return _ONE_MODEL
    return "other"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Thread-safe counters; :meth:`render` writes them out."""

    def __init__(self, depth: Callable[[], int], capacity: int) -> None:
        self._lock = threading.Lock()
        self.requests: defaultdict[tuple[str, int], int] = defaultdict(int)
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.counts: defaultdict[str, int] = defaultdict(int)
        self.tokens: defaultdict[str, int] = defaultdict(int)
        self.batches = 0
        self.batch_texts = 0
        self._depth, self._capacity = depth, capacity

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(endpoint, status)] += 1
            self.seconds[endpoint] += seconds
            self.counts[endpoint] += 1

    def add_tokens(self, kind: str, count: int) -> None:
        with self._lock:
            self.tokens[kind] += count

    def batch(self, texts: int, tokens: int) -> None:
        with self._lock:
            self.batches += 1
            self.batch_texts += texts

    def render(self) -> str:
        with self._lock:
            lines = [
                "# HELP packrt_requests_total Requests answered, by endpoint and HTTP status.",
                "# TYPE packrt_requests_total counter",
            ]
            for (endpoint, status), count in sorted(self.requests.items()):
                lines.append(f'packrt_requests_total{{endpoint="{_label(endpoint)}",status="{status}"}} {count}')
            lines += [
                "# HELP packrt_request_seconds Time from a request's arrival to its last byte.",
                "# TYPE packrt_request_seconds summary",
            ]
            for endpoint in sorted(self.counts):
                shown = _label(endpoint)
                lines.append(f'packrt_request_seconds_sum{{endpoint="{shown}"}} {self.seconds[endpoint]:.6f}')
                lines.append(f'packrt_request_seconds_count{{endpoint="{shown}"}} {self.counts[endpoint]}')
            lines += [
                "# HELP packrt_tokens_total Tokens read (prompt) and generated (completion).",
                "# TYPE packrt_tokens_total counter",
            ]
            for kind in ("prompt", "completion"):
                lines.append(f'packrt_tokens_total{{kind="{kind}"}} {self.tokens[kind]}')
            lines += [
                "# HELP packrt_batches_total Embedding model calls.",
                "# TYPE packrt_batches_total counter",
                f"packrt_batches_total {self.batches}",
                "# HELP packrt_batch_texts_total Texts embedded across all model calls.",
                "# TYPE packrt_batch_texts_total counter",
                f"packrt_batch_texts_total {self.batch_texts}",
                "# HELP packrt_queue_depth Requests waiting or running now.",
                "# TYPE packrt_queue_depth gauge",
                f"packrt_queue_depth {self._depth()}",
                "# HELP packrt_queue_capacity Requests that may wait or run at once (429 beyond).",
                "# TYPE packrt_queue_capacity gauge",
                f"packrt_queue_capacity {self._capacity}",
            ]
        return "\n".join(lines) + "\n"


class MetricsMiddleware:
    """Counts each HTTP answer by endpoint (unknown paths as ``other``) and status, timed to its end."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        endpoint = endpoint_of(path)
        started = time.perf_counter()
        status = [500]

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.request(endpoint, status[0], time.perf_counter() - started)


__all__ = ["Metrics", "MetricsMiddleware"]
