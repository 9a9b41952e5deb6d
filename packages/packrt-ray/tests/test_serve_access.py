"""packrt-ray's application takes ``packrt serve``'s ``--api-key`` and ``--cors-origin``: the replica's app needs
the key on every route but ``/health`` and answers the allowed origins' preflights, and ``app_builder`` maps
``api_key`` and ``cors_origins`` to the application, never to Serve's deployment options. No cluster is started:
the replica class is built in this process, the builder's call to ``build_app`` is captured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from packrt_ray import serve as ray_serve
from packrt_ray.model import RequestError
from packrt_ray.serve import PackrtServer, app_builder


def test_the_replicas_app_needs_the_api_key_and_answers_the_allowed_origins(tiny_encoder_dir: Path) -> None:
    replica = PackrtServer(tiny_encoder_dir, api_key="sk-ray", cors_origins=["http://app.example"])
    with TestClient(replica.__serve_build_asgi_app__()) as client:
        assert client.get("/health").status_code == 200  # a probe needs no key
        refused = client.get("/v1/models")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        assert client.get("/v1/models", headers={"Authorization": "Bearer sk-ray"}).status_code == 200
        preflight = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
        answer = client.options("/v1/embeddings", headers=preflight)
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == "http://app.example"
        other = client.options("/v1/embeddings", headers={**preflight, "Origin": "http://elsewhere.example"})
        assert "access-control-allow-origin" not in other.headers


def test_app_builder_gives_api_key_and_cors_origins_to_the_app_not_to_serves_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: dict[str, Any] = {}
    monkeypatch.setattr(ray_serve, "build_app", lambda path, **options: built.update(options, path=path))
    args = {"path": "/models/m", "api_key": "sk-ray", "cors_origins": "http://a.example, http://b.example"}
    app_builder({**args, "num_replicas": "2"})
    assert (built["api_key"], built["cors_origins"]) == ("sk-ray", ("http://a.example", "http://b.example"))
    assert built["num_replicas"] == 2  # a deployment option, as before
    app_builder({"path": "/models/m", "cors_origins": ["*"]})
    assert (built["api_key"], built["cors_origins"]) == (None, ("*",))


def test_app_builder_refuses_cors_origins_that_are_not_strings() -> None:
    with pytest.raises(RequestError, match=r"cors_origins must be a list of origins or one string .* got \[1\]"):
        app_builder({"path": "/models/m", "cors_origins": [1]})
