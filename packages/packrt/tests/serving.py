"""Shared pieces of the ``packrt serve`` tests: tiny random models written by transformers'
``save_pretrained`` (with real tokenizers), and a server on a loopback port in a thread of the test
process (uvicorn's own ``Server``), stopped the way SIGTERM stops it."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2 as httpx
from peers import SMALL, save, tiny_model

from packrt.serve import ServedModel, ServeLimits, create_app

# Generous for a loaded 2-core machine: a quiet one starts a server in well under a second.
START_S = 60.0

CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
WORDS = ["<pad>", "<s>", "</s>", "<unk>", "hello", "world", "the", "cat", "sat", "on", "mat", "a", "dog", "ran"]
WORDS += ["<user>", "<assistant>", "<system>", "and", "then", "stop", "here"] + [f"w{i}" for i in range(43)]
# The served models' config fields: peers' SMALL widths, with transformers' default initializer_range
# (tiny_model draws 0.3 unless told) and the special tokens each tokenizer below names.
TINY_BERT = {**SMALL, "vocab_size": 30522, "num_attention_heads": 2, "max_position_embeddings": 128}
TINY_BERT |= {"initializer_range": 0.02, "pad_token_id": 0}
TINY_LLAMA = {**SMALL, "vocab_size": len(WORDS), "num_key_value_heads": 2, "max_position_embeddings": 256}
TINY_LLAMA |= {"initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


def tiny_encoder(directory: Path, transformers: ModuleType, minilm: Path, seed: int = 0) -> Path:
    """A sentence-transformers directory: MiniLM's tokenizer and pipeline over a random 2-layer, 32-wide BERT."""
    import torch

    torch.manual_seed(seed)
    save(tiny_model(transformers, "BertConfig", "BertModel", **TINY_BERT), directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "modules.json", "sentence_bert_config.json"):
        shutil.copy(minilm / name, directory / name)
    shutil.copytree(minilm / "1_Pooling", directory / "1_Pooling")
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    return directory


def tiny_llama(directory: Path, transformers: ModuleType, chat_template: str | None = CHAT_TEMPLATE) -> Path:
    """A random 2-layer Llama with a word-level tokenizer (words joined by spaces when decoded)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    torch.manual_seed(0)
    save(tiny_model(transformers, "LlamaConfig", "LlamaForCausalLM", **TINY_LLAMA), directory)
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tokenizer.save(str(directory / "tokenizer.json"))
    settings: dict[str, Any] = {"bos_token": "<s>", "eos_token": "</s>"}
    if chat_template is not None:
        settings["chat_template"] = chat_template
    (directory / "tokenizer_config.json").write_text(json.dumps(settings))
    return directory


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_healthy(base: str, deadline_s: float = START_S) -> None:
    until = time.monotonic() + deadline_s
    while True:
        try:
            if httpx.get(f"{base}/health", timeout=5).status_code in (200, 503):
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > until:
            raise AssertionError(f"the server at {base} did not answer /health within {deadline_s} s")
        time.sleep(0.05)


@dataclass
class Running:
    base: str  # http://127.0.0.1:PORT
    app: Any  # the FastAPI application (its state: app.state.packrt)


@contextmanager
def running(path: Path | ServedModel, limits: ServeLimits | None = None, **options: Any) -> Iterator[Running]:
    """``packrt serve``'s app for ``path`` (or a model already loaded) on a free loopback port, in a thread;
    ``options``: create_app's keywords (api_key, cors_origins)."""
    import uvicorn

    app = create_app(path if isinstance(path, ServedModel) else ServedModel.load(path), limits, **options)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base)
        yield Running(base, app)
    finally:
        server.should_exit = True
        thread.join(timeout=START_S)
