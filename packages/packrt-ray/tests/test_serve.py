"""Ray Serve: ``packrt serve``'s application answers on 127.0.0.1 through Serve's proxy, as one process computes."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2 as httpx
import numpy as np
import openai
import pytest
from ray import serve
from ray.serve._private.api import call_user_app_builder_with_args_if_necessary  # serve run's own path

import packrt
from packrt.models import SentenceEncoder, from_pretrained, load_tokenizer
from packrt_ray.serve import DEPLOYMENT_DEFAULTS, PackrtDeployment, app_builder, build_app

SMALL = {"num_cpus": 0.5}  # two replicas of an app fit the 2-CPU test cluster
HANG_GUARD_S = 300.0  # waits for Serve to act: several times what a quiet machine takes (~15 s)


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


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _vectors(body: dict[str, Any]) -> np.ndarray:
    return np.asarray([item["embedding"] for item in body["data"]])


def test_two_replicas_answer_v1_embeddings_with_single_process_vectors(
    deploy: Any, http: Any, replica_answers: Any, minilm_dir: Path
) -> None:
    base = deploy(build_app(minilm_dir, num_replicas=2, ray_actor_options=SMALL, name="minilm"), "minilm")
    replicas = replica_answers(lambda: http("GET", f"{base}/replica")[1], want=2)
    assert all(info["kind"] == "sentence-encoder" for info in replicas.values())
    # Each replica asked for half a CPU: packrt's kernels run on one thread there, not the node's two.
    assert [info["threads"] for info in replicas.values()] == [1, 1]
    requests = [
        [f"request {i} sentence {j} about {'rain' if (i + j) % 2 else 'cats'}" for j in range(3)] for i in range(8)
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:  # concurrent: the replica's worker may batch them together
        answers = list(pool.map(lambda texts: http("POST", f"{base}/v1/embeddings", {"input": texts}), requests))
    encoder = SentenceEncoder.from_pretrained(minilm_dir, weight_residency="borrowed")
    for texts, (status, body) in zip(requests, answers, strict=True):
        assert status == 200, body
        assert body["object"] == "list"
        assert body["usage"]["prompt_tokens"] > 0
        np.testing.assert_allclose(_vectors(body), encoder.encode(texts), rtol=0, atol=2e-5)


def _client(base: str) -> Any:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=HANG_GUARD_S)


def test_bind_of_a_path_string_serves_that_directory_to_the_openai_client(deploy: Any, tiny_encoder_dir: Path) -> None:
    app = PackrtDeployment.options(ray_actor_options=SMALL).bind(str(tiny_encoder_dir), model_name="tiny")
    client = _client(deploy(app, "bound"))
    assert [model.id for model in client.models.list().data] == ["tiny"]
    answer = client.embeddings.create(model="tiny", input=["one text", "two texts"])  # base64, as the client asks
    reference = SentenceEncoder.from_pretrained(tiny_encoder_dir)
    got = np.asarray([item.embedding for item in answer.data], dtype=np.float32)
    np.testing.assert_allclose(got, reference.encode(["one text", "two texts"]), atol=2e-6)
    with pytest.raises(openai.NotFoundError, match=r"model 'other' is not served here; this server serves 'tiny'"):
        client.embeddings.create(model="other", input="one text")


def test_app_builder_takes_one_args_dict_with_limits_and_deployment_options(
    deploy: Any, http: Any, tiny_encoder_dir: Path
) -> None:
    # As `serve run packrt_ray.serve:app_builder path=... num_replicas=1 max_texts_per_request=2` passes them,
    # through the function `serve run` and config files call a builder with (it checks the one parameter).
    args: dict[str, Any] = {"path": str(tiny_encoder_dir), "num_replicas": "1", "max_texts_per_request": "2"}
    args["ray_actor_options"] = SMALL
    builder: Any = app_builder  # Serve's hint says FunctionType; a plain function is one
    base = deploy(call_user_app_builder_with_args_if_necessary(builder, args), "built")
    assert http("POST", f"{base}/v1/embeddings", {"input": ["a", "b"]})[0] == 200
    status, body = http("POST", f"{base}/v1/embeddings", {"input": ["a", "b", "c"]})
    assert status == 400
    assert body["error"]["code"] == "too_many_inputs"
    assert "more than this server's 2 per request" in body["error"]["message"]


def test_the_default_deployment_lets_the_replica_queue_and_bounds_serves_queue() -> None:
    config = PackrtDeployment._deployment_config  # what Serve deploys when no option overrides it
    assert config.max_ongoing_requests == DEPLOYMENT_DEFAULTS["max_ongoing_requests"] == 64
    assert config.max_queued_requests == DEPLOYMENT_DEFAULTS["max_queued_requests"]
    assert config.max_queued_requests > config.max_ongoing_requests


def test_a_bad_text_fails_alone_while_good_requests_beside_it_succeed(
    deploy: Any, http: Any, tiny_encoder_dir: Path
) -> None:
    base = deploy(build_app(tiny_encoder_dir, ray_actor_options=SMALL, name="isolation"), "isolation")
    good = [["hello world", f"text number {i}", "the cat"] for i in range(8)]
    bad = [["hello world", "\ud800 broken", "the cat"]] * 2  # a lone surrogate: valid JSON, not UTF-8
    with ThreadPoolExecutor(max_workers=len(good) + len(bad)) as pool:
        answers = list(pool.map(lambda texts: http("POST", f"{base}/v1/embeddings", {"input": texts}), [*good, *bad]))
    reference = SentenceEncoder.from_pretrained(tiny_encoder_dir)
    for texts, (status, body) in zip(good, answers[: len(good)], strict=True):
        assert status == 200, body
        np.testing.assert_allclose(_vectors(body), reference.encode(texts), atol=2e-6)
    for status, body in answers[len(good) :]:
        assert status == 400, body
        assert (body["error"]["param"], body["error"]["code"]) == ("input[1]", "invalid_text")


def test_errors_are_openai_error_objects_as_under_packrt_serve(deploy: Any, http: Any, tiny_encoder_dir: Path) -> None:
    base = deploy(build_app(tiny_encoder_dir, ray_actor_options=SMALL, name="errors"), "errors")
    answers = {
        "no route": http("GET", f"{base}/nowhere"),
        "wrong endpoint": http("POST", f"{base}/v1/completions", {"prompt": "hi", "model": "x"}),
        "wrong model": http("POST", f"{base}/v1/embeddings", {"input": "hi", "model": "x"}),
        "invalid field": http("POST", f"{base}/v1/embeddings", {"input": "hi", "encoding_format": "hex"}),
        "too deep": http("POST", f"{base}/v1/embeddings", {"input": "hi", "user": _nested(40)}),
    }
    codes = {what: (status, body["error"]["code"]) for what, (status, body) in answers.items()}
    assert codes == {
        "no route": (404, "not_found"),
        "wrong endpoint": (404, "wrong_endpoint"),
        "wrong model": (404, "model_not_found"),
        "invalid field": (422, "invalid_value"),
        "too deep": (400, "json_too_deep"),
    }
    assert answers["invalid field"][1]["error"]["param"] == "encoding_format"


def test_completions_over_ray_through_the_openai_client_are_packrts_greedy_generation(
    deploy: Any, tiny_llama_chat_dir: Path
) -> None:
    client = _client(deploy(build_app(tiny_llama_chat_dir, ray_actor_options=SMALL, name="llama"), "llama"))
    name = tiny_llama_chat_dir.name
    prompt = "w5 w9 w17"
    answer = client.completions.create(model=name, prompt=prompt, max_tokens=6, temperature=0)
    tokenizer = load_tokenizer(tiny_llama_chat_dir)
    ids = tokenizer.encode(prompt).ids
    model = from_pretrained(tiny_llama_chat_dir)
    new = model.generate(packrt.tensor([ids]), 6, eos_token_id=None).tolist()[0][len(ids) :]
    assert answer.choices[0].text == tokenizer.decode(new)
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens, answer.usage.total_tokens) == (3, 6, 9)
    chunks = list(client.completions.create(model=name, prompt=prompt, max_tokens=6, temperature=0, stream=True))
    assert "".join(chunk.choices[0].text for chunk in chunks) == answer.choices[0].text
    assert chunks[-1].choices[0].finish_reason == answer.choices[0].finish_reason


def test_a_checkpoint_changed_under_the_replica_fails_health_and_serve_replaces_it(
    deploy: Any, http: Any, tiny_encoder_dir: Path, tmp_path: Path
) -> None:
    directory = Path(shutil.copytree(tiny_encoder_dir, tmp_path / "encoder"))
    base = deploy(build_app(directory, ray_actor_options=SMALL, name="faulty", health_check_period_s=1.0), "faulty")
    first = http("GET", f"{base}/replica")[1]["pid"]
    assert http("GET", f"{base}/health")[0] == 200
    weights = directory / "model.safetensors"
    os.utime(weights, ns=(0, os.stat(weights).st_mtime_ns + 10**9))  # what a copy over the file also changes
    status, body = http("GET", f"{base}/health")
    assert status == 503, body
    assert body["error"]["code"] == "checkpoint_changed"
    # Serve's own check_health sees the same: the replica is replaced by one that loads the file as it is now.
    deadline = time.monotonic() + HANG_GUARD_S
    pid = first
    while pid == first and time.monotonic() < deadline:
        time.sleep(1.0)
        status, body = http("GET", f"{base}/replica")
        pid = body["pid"] if status == 200 else first
    assert pid != first, f"Serve kept the replica whose checkpoint changed for {HANG_GUARD_S} s"
    assert http("GET", f"{base}/health")[0] == 200


def _long_llama(directory: Path, transformers: Any) -> Path:
    """A random llama with room for a long stream (1024 positions, no eos) and a word-level tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=128,
        num_hidden_layers=4,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        eos_token_id=None,
    )
    transformers.LlamaForCausalLM(config).save_pretrained(str(directory))
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(128)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


def test_a_truncation_during_a_streamed_completion_ends_the_stream_cleanly_and_the_replica_lives(
    deploy: Any, http: Any, transformers: Any, tmp_path: Path
) -> None:
    directory = _long_llama(tmp_path / "long-llama", transformers)
    base = deploy(build_app(directory, ray_actor_options=SMALL, name="leased"), "leased")
    replica = http("GET", f"{base}/replica")[1]["pid"]
    weights = directory / "model.safetensors"
    body = {"model": "long-llama", "prompt": "w5 w9", "max_tokens": 500, "temperature": 0, "stream": True}
    events: list[str] = []
    truncation = threading.Thread(target=os.truncate, args=(weights, 100))  # held by the replica's lease
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=HANG_GUARD_S) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line:
                events.append(line)
                if line.startswith("data: {") and truncation.ident is None:
                    truncation.start()  # the stream runs on the replica: truncate the file under it now
    truncation.join(HANG_GUARD_S)
    assert weights.stat().st_size == 100
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2][len("data: ") :])["error"]["code"] == "checkpoint_changed", events[-3:]
    assert 1 < len(events) < 500, len(events)  # it had started, and it stopped at the step after the truncation
    assert http("GET", f"{base}/replica")[1]["pid"] == replica  # the same process: no SIGBUS ended it
    assert http("GET", f"{base}/health")[0] == 503


def test_a_truncation_during_a_batched_embedding_request_is_a_json_503_and_the_replica_lives(
    deploy: Any, http: Any, minilm_dir: Path, tmp_path: Path
) -> None:
    directory = Path(shutil.copytree(minilm_dir, tmp_path / "minilm"))
    limits = {"max_batch_tokens": 128}  # one text per model call: a request of many texts is many calls
    base = deploy(build_app(directory, limits=limits, ray_actor_options=SMALL, name="leased-minilm"), "leased-minilm")
    replica = http("GET", f"{base}/replica")[1]["pid"]
    texts = [" ".join(f"word{i}" for i in range(start, start + 100)) for start in range(256)]
    answer: list[tuple[int, Any]] = []
    request = threading.Thread(target=lambda: answer.append(http("POST", f"{base}/v1/embeddings", {"input": texts})))
    request.start()
    time.sleep(1.0)  # the replica is a few calls into the request's 256 (about 2.5 s of them)
    os.truncate(directory / "model.safetensors", 100)  # held by the replica's lease until the call in flight ends
    request.join(HANG_GUARD_S)
    status, body = answer[0]
    assert status == 503, body
    assert body["error"]["code"] == "checkpoint_changed"
    assert http("GET", f"{base}/replica")[1]["pid"] == replica  # the same process: no SIGBUS ended it


def test_the_readmes_serve_config_file_validates_and_its_builder_applies_every_key(tiny_encoder_dir: Path) -> None:
    # What `serve run config.yaml` / `serve deploy` do with it, short of deploying: Serve's own schema
    # reads the file, its builder call hands `args` to app_builder, whose deployment carries each key.
    import yaml
    from ray._common.utils import import_attr
    from ray.serve.schema import ServeDeploySchema

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    found = re.search(r"```yaml\n(.*?)```", readme, re.DOTALL)
    assert found is not None, "packages/packrt-ray/README.md lost its Serve config file example"
    (spec,) = ServeDeploySchema.model_validate(yaml.safe_load(found.group(1))).applications
    args = {**spec.args, "path": str(tiny_encoder_dir)}  # the example's path exists on no test machine
    deployment = call_user_app_builder_with_args_if_necessary(import_attr(spec.import_path), args)._bound_deployment
    config = deployment._deployment_config
    assert (config.max_queued_requests, config.autoscaling_config.max_replicas) == (256, 4)
    assert deployment.ray_actor_options["num_cpus"] == 1
    assert deployment.init_kwargs["model_name"] == "all-MiniLM-L6-v2"
    limits = deployment.init_kwargs["limits"]
    assert (limits.max_texts_per_request, limits.request_timeout_s) == (64, 30)
