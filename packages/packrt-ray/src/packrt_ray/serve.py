"""Online serving with Ray Serve: sentence embeddings and greedy generation over HTTP.

:class:`PackrtServer` is the replica. It loads its model once, with
``weight_residency="borrowed"`` unless told otherwise, so every replica on a node serves the same
mapped checkpoint. Requests that arrive together are batched by ``@serve.batch`` into one model
call. :func:`build_app` checks the directory in the driver and returns the bound application;
``num_replicas``, ``autoscaling_config``, ``ray_actor_options`` and any other deployment option
are passed to Serve as Serve takes them. Run it with ``serve.run(app, route_prefix=...)``.

HTTP routes, under the application's route prefix (bodies are JSON objects):

- ``POST /embed`` ``{"texts": ["...", ...]}`` -> ``{"embeddings": [[...], ...], "dimension": d}``:
  sentence-encoder directories only; the vectors are those ``SentenceEncoder.encode`` gives.
- ``POST /generate`` ``{"input_ids": [[...], ...], "max_new_tokens": n, "eos_token_id": id}`` ->
  ``{"tokens": [[...], ...]}``: causal LMs only; each row is its prompt followed by its new tokens,
  exactly what ``model.generate`` gives for that prompt alone (greedy). ``input_ids`` may be one
  flat list for a single prompt; ``eos_token_id`` (an id or a list) is optional.
- ``GET /memory`` -> this replica's :class:`~packrt_ray.memory.WeightMemory` as JSON.
- ``GET /`` -> the model's kind, directory and residency, the process id and packrt's thread count.

A malformed body, or a route the model's kind cannot serve, is answered with a 4xx status and
``{"error": <packrt exception class>, "message": ...}``; the same errors are raised as exceptions
when the replica is called through a deployment handle (``handle.embed.remote(texts)``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from ray import serve
from ray.serve.deployment import Application
from starlette.requests import Request
from starlette.responses import JSONResponse

import packrt
from packrt.errors import PackrtError
from packrt_ray.model import ModelKindError, ModelSource, RequestError, load

_T = TypeVar("_T")
DEFAULT_MAX_BATCH_SIZE = 16
DEFAULT_BATCH_WAIT_TIMEOUT_S = 0.005


@dataclass(frozen=True)
class _Generation:
    """One generate call as the batch sees it: its prompts, its token budget, its stop ids."""

    prompts: tuple[tuple[int, ...], ...]
    max_new_tokens: int
    eos: tuple[int, ...]


def _int_list(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise RequestError(f"{what} must be a non-empty list of token ids, got {json.dumps(value)[:80]}")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise RequestError(f"{what} must hold token ids (ints >= 0), got {json.dumps(value)[:80]}")
    return tuple(value)


def _prompts(value: Any) -> tuple[tuple[int, ...], ...]:
    """``input_ids`` as prompts: a list of lists of ids, or one flat list for a single prompt."""
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return (_int_list(value, "input_ids"),)
    if not isinstance(value, list) or not value:
        raise RequestError(
            f"input_ids must be a list of prompts (lists of token ids), got {json.dumps(value)[:80]}; send "
            '{"input_ids": [[1, 2, 3]], "max_new_tokens": 8}'
        )
    return tuple(_int_list(row, f"input_ids[{i}]") for i, row in enumerate(value))


def _config_int(directory: str, name: str) -> int | None:
    try:
        with open(os.path.join(directory, "config.json"), encoding="utf-8") as file:
            value = json.load(file).get(name)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


class PackrtServer:
    """A Ray Serve replica serving one packrt model (deploy it with :func:`build_app`).

    Args:
        source: the resolved model directory (:meth:`ModelSource.resolve`).
        max_new_tokens: the most new tokens one generate request may ask for.
        max_batch_size: the most requests one model call takes (``@serve.batch``).
        batch_wait_timeout_s: how long a batch waits for more requests once it has one.
    """

    def __init__(
        self,
        source: ModelSource,
        *,
        max_new_tokens: int = 256,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        batch_wait_timeout_s: float = DEFAULT_BATCH_WAIT_TIMEOUT_S,
    ) -> None:
        self.loaded = load(source)
        self.max_new_tokens = max_new_tokens
        self.vocab_size = _config_int(source.path, "vocab_size") if source.kind == "causal-lm" else None
        # Serve's batch wrappers take their limits per replica; its type hints call them plain callables.
        self._embed_batch.set_max_batch_size(max_batch_size)  # type: ignore[attr-defined]
        self._embed_batch.set_batch_wait_timeout_s(batch_wait_timeout_s)  # type: ignore[attr-defined]
        self._generate_batch.set_max_batch_size(max_batch_size)  # type: ignore[attr-defined]
        self._generate_batch.set_batch_wait_timeout_s(batch_wait_timeout_s)  # type: ignore[attr-defined]

    @property
    def source(self) -> ModelSource:
        """The directory, kind and residency this replica loaded."""
        return self.loaded.source

    def info(self) -> dict[str, Any]:
        """The model's kind, directory and residency, this replica's process id and packrt's thread count."""
        s = self.source
        return {
            "kind": s.kind,
            "model_dir": s.path,
            "weight_residency": s.weight_residency,
            "pid": os.getpid(),
            "threads": packrt.get_num_threads(),
        }

    def memory(self) -> dict[str, Any]:
        """This replica's :class:`~packrt_ray.memory.WeightMemory`, as a JSON-ready dict."""
        return self.loaded.memory().as_dict()

    async def embed(self, texts: Any) -> list[list[float]]:
        """Unit-length embeddings of ``texts``, batched with other callers' texts into one encode."""
        self.source.require(("sentence-encoder",), "the embed route")
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise RequestError(
                f'texts must be a list of strings, got {json.dumps(texts)[:80]}; send {{"texts": ["a sentence"]}}'
            )
        return _unwrap(await self._embed_batch(texts))

    async def generate(
        self, input_ids: Any, max_new_tokens: Any, eos_token_id: int | list[int] | None = None
    ) -> list[list[int]]:
        """Greedy generation: each prompt followed by its new tokens, as ``model.generate`` gives it alone."""
        self.source.require(("causal-lm",), "the generate route")
        call = self._check_generation(_prompts(input_ids), max_new_tokens, eos_token_id)
        return _unwrap(await self._generate_batch(call))

    def _check_generation(self, prompts: tuple[tuple[int, ...], ...], budget: Any, eos: Any) -> _Generation:
        if isinstance(budget, bool) or not isinstance(budget, int) or not 0 <= budget <= self.max_new_tokens:
            raise RequestError(
                f"max_new_tokens must be an int from 0 to {self.max_new_tokens} (this deployment's limit), got "
                f"{budget!r}; ask for fewer tokens or deploy with a larger max_new_tokens"
            )
        stops = () if eos is None else _int_list([eos] if isinstance(eos, int) else eos, "eos_token_id")
        if self.vocab_size is not None and stops and max(stops) >= self.vocab_size:
            raise RequestError(f"eos_token_id holds id {max(stops)}, beyond the vocabulary of {self.vocab_size}")
        positions = getattr(self.loaded.causal_lm, "max_positions", None)
        for i, prompt in enumerate(prompts):
            if self.vocab_size is not None and max(prompt) >= self.vocab_size:
                raise RequestError(f"input_ids[{i}] holds id {max(prompt)}, beyond the vocabulary of {self.vocab_size}")
            if positions is not None and len(prompt) + budget > positions:
                raise RequestError(
                    f"input_ids[{i}]: {len(prompt)} prompt tokens + {budget} new ones exceed the model's {positions} "
                    "positions; shorten the prompt or ask for fewer tokens"
                )
        return _Generation(prompts, budget, stops)

    @serve.batch(max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=DEFAULT_BATCH_WAIT_TIMEOUT_S)
    async def _embed_batch(self, calls: list[list[str]]) -> list[list[list[float]] | Exception]:
        flat = [text for call in calls for text in call]
        encoder = self.loaded.sentence_encoder
        try:
            vectors = await asyncio.to_thread(encoder.encode, flat, batch_size=max(len(flat), 1))
        except Exception as err:  # one failure answers every caller of this batch
            return [err for _ in calls]
        out: list[list[list[float]] | Exception] = []
        begin = 0
        for call in calls:
            out.append(vectors[begin : begin + len(call)].tolist())
            begin += len(call)
        return out

    @serve.batch(max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=DEFAULT_BATCH_WAIT_TIMEOUT_S)
    async def _generate_batch(self, calls: list[_Generation]) -> list[list[list[int]] | Exception]:
        # Prompts of one length and one set of stop ids run as one unpadded generate call, so each
        # row's tokens are those it gets alone; a group that fails fails only its own callers.
        groups: dict[tuple[int, tuple[int, ...]], list[tuple[int, int]]] = {}
        for c, call in enumerate(calls):
            for r, prompt in enumerate(call.prompts):
                groups.setdefault((len(prompt), call.eos), []).append((c, r))
        results: list[list[list[int]] | Exception] = [[[] for _ in call.prompts] for call in calls]
        for (_, eos), members in groups.items():
            try:
                rows = await asyncio.to_thread(self._generate_group, [calls[c] for c, _ in members], members, eos)
            except Exception as err:
                for c, _ in members:
                    results[c] = err
                continue
            for (c, r), row in zip(members, rows, strict=True):
                target = results[c]
                if not isinstance(target, Exception):
                    target[r] = row
        return results

    def _generate_group(
        self, calls: list[_Generation], members: list[tuple[int, int]], eos: tuple[int, ...]
    ) -> list[list[int]]:
        prompts = np.asarray([call.prompts[r] for call, (_, r) in zip(calls, members, strict=True)], dtype=np.int64)
        budget = max(call.max_new_tokens for call in calls)
        model = self.loaded.causal_lm
        tokens = np.asarray(model.generate(packrt.from_numpy(prompts), budget, eos_token_id=eos or None).numpy())
        rows = []
        for i, call in enumerate(calls):
            new = tokens[i, prompts.shape[1] :][: call.max_new_tokens].tolist()
            stop = next((j for j, t in enumerate(new) if t in eos), None)
            rows.append(prompts[i].tolist() + (new if stop is None else new[: stop + 1]))
        return rows

    async def __call__(self, request: Request) -> JSONResponse:
        """The HTTP entry: routes by path under the route prefix (see the module docstring)."""
        path = request.url.path
        root = str(request.scope.get("root_path", ""))
        route = (path[len(root) :] if root and path.startswith(root) else path).rstrip("/") or "/"
        routes = {("GET", "/"), ("GET", "/memory"), ("POST", "/embed"), ("POST", "/generate")}
        if (request.method, route) not in routes:
            known = ", ".join(f"{m} {p}" for m, p in sorted(routes, key=lambda r: r[1]))
            status = 405 if route in {p for _, p in routes} else 404
            return _error(status, RequestError(f"no route {request.method} {route!r}; this deployment has {known}"))
        try:
            if route == "/":
                return JSONResponse(self.info())
            if route == "/memory":
                return JSONResponse(self.memory())
            body = await _json_body(request, route)
            if route == "/embed":
                vectors = await self.embed(body.get("texts"))
                dimension = len(vectors[0]) if vectors else self.loaded.sentence_encoder.dimension
                return JSONResponse({"embeddings": vectors, "dimension": dimension})
            tokens = await self.generate(body.get("input_ids"), body.get("max_new_tokens"), body.get("eos_token_id"))
            return JSONResponse({"tokens": tokens})
        except PackrtError as err:
            return _error(404 if isinstance(err, ModelKindError) else 400, err)


def _unwrap(outcome: _T | Exception) -> _T:
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


async def _json_body(request: Request, route: str) -> Mapping[str, Any]:
    try:
        body = await request.json()
    except ValueError as err:
        raise RequestError(f"POST {route}: the body is not JSON ({err}); send a JSON object") from None
    if not isinstance(body, dict):
        raise RequestError(f"POST {route}: the body is a JSON {type(body).__name__}, expected a JSON object")
    return body


def _error(status: int, err: Exception) -> JSONResponse:
    return JSONResponse({"error": type(err).__name__, "message": str(err)}, status_code=status)


PackrtDeployment = serve.deployment(name="packrt")(PackrtServer)


def build_app(
    model_dir: str | os.PathLike[str],
    *,
    weight_residency: str = "borrowed",
    max_new_tokens: int = 256,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    batch_wait_timeout_s: float = DEFAULT_BATCH_WAIT_TIMEOUT_S,
    **deployment_options: Any,
) -> Application:
    """The Serve application for ``model_dir``, checked here in the driver, ready for ``serve.run``.

    ``deployment_options`` go to ``Deployment.options`` as Serve takes them: ``num_replicas``
    (an int, or ``"auto"``), ``autoscaling_config``, ``ray_actor_options`` (``{"num_cpus": 1}``,
    ``{"num_gpus": 1}``), ``max_ongoing_requests``, ``name``, ... A missing directory raises
    :class:`~packrt_ray.model.ModelDirectoryError` before anything is deployed.
    """
    source = ModelSource.resolve(model_dir, weight_residency=weight_residency)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"build_app: max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    deployment = PackrtDeployment.options(**deployment_options) if deployment_options else PackrtDeployment
    return deployment.bind(
        source,
        max_new_tokens=max_new_tokens,
        max_batch_size=max_batch_size,
        batch_wait_timeout_s=batch_wait_timeout_s,
    )


__all__ = ["DEFAULT_BATCH_WAIT_TIMEOUT_S", "DEFAULT_MAX_BATCH_SIZE", "PackrtDeployment", "PackrtServer", "build_app"]
