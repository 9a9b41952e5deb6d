"""Ray Serve: two replicas answer HTTP on 127.0.0.1 with what one process computes."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ray import serve

import packrt
from packrt.models import SentenceEncoder, from_pretrained
from packrt_ray.serve import build_app

SMALL = {"num_cpus": 0.5}  # two replicas of each app fit the 2-CPU test cluster


@pytest.fixture
def deploy(serve_url: str) -> Any:
    """``deploy(app, name) -> base URL``; every application deployed is deleted after the test."""
    names: list[str] = []

    def run(app: Any, name: str) -> str:
        names.append(name)
        serve.run(app, name=name, route_prefix=f"/{name}")
        return f"{serve_url}/{name}"

    yield run
    for name in names:
        serve.delete(name)


def test_two_replicas_answer_embed_requests_with_single_process_vectors(
    deploy: Any, http: Any, replica_answers: Any, minilm_dir: Path
) -> None:
    base = deploy(build_app(minilm_dir, num_replicas=2, ray_actor_options=SMALL, name="minilm"), "minilm")
    replicas = replica_answers(lambda: http("GET", base)[1], want=2)
    assert all(info["kind"] == "sentence-encoder" for info in replicas.values())
    # Each replica asked for half a CPU: packrt's kernels run on one thread there, not the node's two.
    assert [info["threads"] for info in replicas.values()] == [1, 1]
    requests = [
        [f"request {i} sentence {j} about {'rain' if (i + j) % 2 else 'cats'}" for j in range(3)] for i in range(12)
    ]
    with ThreadPoolExecutor(max_workers=6) as pool:  # concurrent: @serve.batch may merge them
        answers = list(pool.map(lambda texts: http("POST", f"{base}/embed", {"texts": texts}), requests))
    encoder = SentenceEncoder.from_pretrained(minilm_dir, weight_residency="borrowed")
    for texts, (status, body) in zip(requests, answers, strict=True):
        assert status == 200, body
        assert body["dimension"] == 384
        np.testing.assert_allclose(np.asarray(body["embeddings"]), encoder.encode(texts), rtol=0, atol=2e-5)


def test_generate_over_http_returns_the_tokens_of_a_single_process_generate(
    deploy: Any, http: Any, tiny_llama_dir: Path
) -> None:
    base = deploy(build_app(tiny_llama_dir, num_replicas=2, ray_actor_options=SMALL, name="llama"), "llama")
    prompts = [[1, 2, 3], [9, 8, 7], [4, 5], [60, 61, 62, 63], [3], [10, 20, 30]]
    budgets = [5, 3, 6, 4, 7, 5]

    def ask(i: int) -> tuple[int, Any]:
        return http("POST", f"{base}/generate", {"input_ids": [prompts[i]], "max_new_tokens": budgets[i]})

    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(ask, range(len(prompts))))
    model = from_pretrained(tiny_llama_dir, weight_residency="borrowed")
    for prompt, budget, (status, body) in zip(prompts, budgets, answers, strict=True):
        assert status == 200, body
        alone = model.generate(packrt.tensor([prompt]), budget, eos_token_id=None).tolist()[0]  # none asked
        assert body["tokens"] == [alone]


def test_a_request_of_several_prompts_gets_each_prompts_own_tokens(
    deploy: Any, http: Any, tiny_llama_dir: Path
) -> None:
    base = deploy(build_app(tiny_llama_dir, ray_actor_options=SMALL, name="llama_rows"), "llama_rows")
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8]]
    status, body = http("POST", f"{base}/generate", {"input_ids": prompts, "max_new_tokens": 4, "eos_token_id": 5})
    assert status == 200, body
    model = from_pretrained(tiny_llama_dir)
    assert body["tokens"] == [model.generate(packrt.tensor([p]), 4, eos_token_id=5).tolist()[0] for p in prompts]


def _errors(http: Callable[..., tuple[int, Any]], base: str) -> dict[str, tuple[int, Any]]:
    return {
        "wrong kind": http("POST", f"{base}/generate", {"input_ids": [[1, 2]], "max_new_tokens": 2}),
        "bad texts": http("POST", f"{base}/embed", {"texts": "not a list"}),
        "not json": http("POST", f"{base}/embed", None),
        "no route": http("GET", f"{base}/nowhere"),
        "wrong method": http("GET", f"{base}/embed"),
    }


def test_http_errors_are_4xx_naming_the_packrt_error_and_the_fix(deploy: Any, http: Any, minilm_dir: Path) -> None:
    base = deploy(build_app(minilm_dir, ray_actor_options=SMALL, name="minilm_errors"), "minilm_errors")
    answers = _errors(http, base)
    assert answers["wrong kind"][0] == 404
    assert answers["wrong kind"][1]["error"] == "ModelKindError"
    assert "needs a causal-lm model" in answers["wrong kind"][1]["message"]
    assert answers["bad texts"][0] == 400
    assert "texts must be a list of strings" in answers["bad texts"][1]["message"]
    assert answers["not json"][0] == 400
    assert answers["not json"][1]["error"] == "RequestError"
    assert answers["no route"][0] == 404
    assert "POST /embed" in answers["no route"][1]["message"]
    assert answers["wrong method"][0] == 405


def test_a_handle_call_raises_the_packrt_error_itself(deploy: Any, tiny_llama_dir: Path) -> None:
    deploy(build_app(tiny_llama_dir, ray_actor_options=SMALL, name="llama_handle", max_new_tokens=8), "llama_handle")
    handle = serve.get_app_handle("llama_handle")
    from packrt_ray import RequestError

    with pytest.raises(RequestError, match=r"max_new_tokens must be an int from 0 to 8"):
        handle.generate.remote([[1, 2]], 50).result(timeout_s=180)
    assert handle.generate.remote([[1, 2]], 2).result(timeout_s=180)[0][:2] == [1, 2]
