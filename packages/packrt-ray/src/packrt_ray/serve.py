"""``packrt serve``'s application on Ray Serve: the same routes, limits and error bodies, per replica.

:class:`PackrtServer` is the replica. It loads its model once (``weight_residency="borrowed"``
unless told otherwise, so every replica on a node serves the same mapped checkpoint) and serves
it with :func:`packrt.serve.create_app` through ``@serve.ingress``: ``POST /v1/embeddings``,
``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /health``, ``GET /v1/models``,
``GET /metrics`` and ``GET /docs`` answer as they do under ``packrt serve`` (OpenAI's shapes, each
text checked before it joins a batch, every error OpenAI's error object), under the application's
route prefix. Two routes are Ray's own: ``GET /replica`` (kind, directory, residency, process id,
packrt's thread count) and ``GET /memory`` (this replica's :class:`~packrt_ray.memory.WeightMemory`).

Three ways to deploy it, all with the same options:

- ``PackrtDeployment.bind("/models/minilm")`` (the deployment with Serve's defaults and this
  module's :data:`DEPLOYMENT_DEFAULTS`);
- :func:`build_app` ``(model_dir, limits=..., **deployment_options)`` from Python, which checks
  the directory in the driver first;
- :func:`app_builder`, Serve's application builder of one args dict:
  ``serve run packrt_ray.serve:app_builder path=/models/minilm num_replicas=2`` or a Serve config
  file (docs/guides/serving.md has one).

Serve's ``check_health`` fails once a mapped checkpoint file changed under the replica (the test
``GET /health`` makes), so Serve replaces the replica instead of letting it serve wrong numbers.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.serve.deployment import Application

import packrt
from packrt.serve import ServedModel, ServeLimits, create_app
from packrt.serve.access import api_key_from
from packrt_ray.model import ModelSource, RequestError, load

# Serve's own default of 5 requests in flight per replica would leave the app's token batching
# little to merge and refuse work the replica's queue could hold; Serve's queue in front of the
# replicas is bounded too, so a burst beyond both gets Serve's 503 instead of an unbounded wait.
DEPLOYMENT_DEFAULTS: dict[str, Any] = {
    "max_ongoing_requests": ServeLimits().max_queued_requests,
    "max_queued_requests": 4 * ServeLimits().max_queued_requests,
    "health_check_period_s": 10.0,
}
_LIMIT_FIELDS = {f.name: f for f in dataclasses.fields(ServeLimits)}
# the builder's keys that reach the replica, not Deployment.options (an api_key there would be Serve's error)
_BUILDER_KEYS = ("path", "weight_residency", "limits", "model_name", "api_key", "cors_origins")
# Deployment options that are numbers: ``serve run k=v`` passes them as strings, which Serve refuses.
_NUMERIC_OPTIONS = {
    "num_replicas": int,
    "max_ongoing_requests": int,
    "max_queued_requests": int,
    "health_check_period_s": float,
    "health_check_timeout_s": float,
    "graceful_shutdown_timeout_s": float,
}


def _limits(value: ServeLimits | Mapping[str, Any] | None) -> ServeLimits:
    if value is None or isinstance(value, ServeLimits):
        return value or ServeLimits()
    unknown = sorted(set(value) - set(_LIMIT_FIELDS))
    if unknown:
        raise RequestError(
            f"limits: unknown field(s) {', '.join(unknown)}; ServeLimits has {', '.join(sorted(_LIMIT_FIELDS))}"
        )
    return ServeLimits(**{k: _typed(k, v) for k, v in value.items()})


def _typed(key: str, value: Any) -> Any:
    """``value`` as the ServeLimits field ``key`` takes it: ``serve run k=v`` passes every value as a string."""
    if not isinstance(value, str):
        return value
    kind = float if _LIMIT_FIELDS[key].type in (float, "float") else int
    try:
        return kind(value)
    except ValueError:
        raise RequestError(f"limits.{key} must be a number, got {value!r}") from None


class PackrtServer:
    """A Ray Serve replica serving one packrt model with ``packrt serve``'s application.

    Args:
        model_dir: the model directory (a path every node can read), or a :class:`ModelSource`
            resolved in the driver.
        limits: the :class:`~packrt.serve.ServeLimits` each request is held to (or a dict of its
            fields); ``packrt serve``'s defaults when None.
        weight_residency: how a path given as ``model_dir`` is loaded (a ModelSource carries its own).
        model_name: the name requests must give as ``model`` and answers carry (``packrt serve
            --name``); the directory's name when None.
        api_key: every route but ``/health`` then needs ``Authorization: Bearer <api_key>`` (``packrt serve
            --api-key``); None: the replica's ``PACKRT_API_KEY`` environment variable, if set, as under
            ``packrt serve``.
        cors_origins: the browser origins allowed to call the application (``packrt serve --cors-origin``).
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | ModelSource,
        *,
        limits: ServeLimits | Mapping[str, Any] | None = None,
        weight_residency: str = "borrowed",
        model_name: str | None = None,
        api_key: str | None = None,
        cors_origins: Sequence[str] = (),
    ) -> None:
        source = (
            model_dir
            if isinstance(model_dir, ModelSource)
            else ModelSource.resolve(model_dir, weight_residency=weight_residency)
        )
        self.limits = _limits(limits)
        self.api_key, self.cors_origins = api_key_from(api_key), tuple(cors_origins)
        self.loaded = load(source)
        self.served = ServedModel.from_loaded(
            source.path, self.loaded.model, encoder=self.loaded.encoder, name=model_name
        )

    def __serve_build_asgi_app__(self) -> FastAPI:
        """The replica's application: ``packrt serve``'s, plus ``GET /replica`` and ``GET /memory``."""
        app = create_app(self.served, self.limits, api_key=self.api_key, cors_origins=self.cors_origins)
        app.add_api_route("/replica", self.info, methods=["GET"])
        app.add_api_route("/memory", self.memory, methods=["GET"])
        return app

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

    def check_health(self) -> None:
        """Serve's health check: :class:`~packrt.errors.CheckpointError` once a mapped checkpoint file
        changed identity, size or modification time since the load (the replica is then replaced)."""
        self.served.check_files()


PackrtDeployment = serve.deployment(name="packrt", **DEPLOYMENT_DEFAULTS)(serve.ingress()(PackrtServer))


def build_app(
    model_dir: str | os.PathLike[str],
    *,
    weight_residency: str = "borrowed",
    limits: ServeLimits | Mapping[str, Any] | None = None,
    model_name: str | None = None,
    api_key: str | None = None,
    cors_origins: Sequence[str] = (),
    **deployment_options: Any,
) -> Application:
    """The Serve application for ``model_dir``, checked here in the driver, ready for ``serve.run``.

    ``limits`` bounds each request as under ``packrt serve`` (:class:`~packrt.serve.ServeLimits` or a
    dict of its fields); ``model_name`` is the name requests give as ``model`` (the directory's
    name when None); ``api_key`` and ``cors_origins`` reach the replica's application as ``packrt serve``'s
    ``--api-key`` and ``--cors-origin`` (:class:`PackrtServer`). ``deployment_options`` go to
    ``Deployment.options`` as Serve takes them: ``num_replicas`` (an int, or ``"auto"``), ``autoscaling_config``,
    ``ray_actor_options`` (``{"num_cpus": 1}``), ``max_ongoing_requests``, ``max_queued_requests``, ``name``, ...
    A missing directory raises :class:`~packrt_ray.model.ModelDirectoryError`, a bad limit a
    :class:`~packrt.serve.LimitsError` or :class:`~packrt_ray.model.RequestError`, before anything is deployed.
    """
    source = ModelSource.resolve(model_dir, weight_residency=weight_residency)
    checked = _limits(limits)
    deployment = PackrtDeployment.options(**deployment_options) if deployment_options else PackrtDeployment
    return deployment.bind(
        source, limits=checked, model_name=model_name, api_key=api_key, cors_origins=tuple(cors_origins)
    )


def _option(key: str, value: Any) -> Any:
    kind = _NUMERIC_OPTIONS.get(key)
    if kind is None or not isinstance(value, str) or value == "auto":
        return value
    try:
        return kind(value)
    except ValueError:
        raise RequestError(f"deployment option {key} must be a number, got {value!r}") from None


def app_builder(args: dict[str, Any]) -> Application:
    """Serve's application builder: one dict, as ``serve run packrt_ray.serve:app_builder path=DIR k=v``
    or a config file's ``args`` give it.

    ``path`` (required), ``weight_residency`` and ``model_name`` name the model; ``api_key`` and ``cors_origins``
    (a list, or one string of origins separated by commas, as ``serve run cors_origins=a,b`` gives it) go to the
    application as :func:`build_app` takes them; ``limits`` (a dict), or any
    :class:`~packrt.serve.ServeLimits` field given at the top level (``max_texts_per_request=64``),
    bounds the requests; every other key is a deployment option (``num_replicas``,
    ``autoscaling_config``, ``ray_actor_options``, ``max_ongoing_requests``, ``max_queued_requests``...).
    """
    if not isinstance(args, Mapping) or "path" not in args:
        raise RequestError(
            f"app_builder needs a dict with the model directory as 'path', got {args!r}; run "
            "`serve run packrt_ray.serve:app_builder path=/models/minilm`"
        )
    options = {k: _option(k, v) for k, v in args.items() if k not in _BUILDER_KEYS and k not in _LIMIT_FIELDS}
    limits = dict(args.get("limits") or {})
    limits.update({k: v for k, v in args.items() if k in _LIMIT_FIELDS})
    residency = str(args.get("weight_residency", "borrowed"))
    name, key = args.get("model_name"), args.get("api_key")
    return build_app(
        str(args["path"]),
        weight_residency=residency,
        limits=limits,
        model_name=None if name is None else str(name),
        api_key=None if key is None else str(key),
        cors_origins=_origins(args.get("cors_origins")),
        **options,
    )


def _origins(value: Any) -> tuple[str, ...]:
    """``cors_origins`` as the builder gets it: a list of origins, or one string of them separated by commas."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(origin.strip() for origin in value.split(",") if origin.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(origin, str) for origin in value):
        return tuple(value)
    raise RequestError(
        f"cors_origins must be a list of origins or one string of them separated by commas, got {value!r}; "
        "e.g. cors_origins=http://localhost:3000,https://app.example"
    )


__all__ = ["DEPLOYMENT_DEFAULTS", "PackrtDeployment", "PackrtServer", "app_builder", "build_app"]
