"""``packrt serve`` finds a model's chat template where transformers and llama.cpp keep it: transformers 5's
``chat_template.jinja`` beside the weights, an older ``tokenizer_config.json``'s ``chat_template``, and a GGUF
file's ``tokenizer.chat_template`` (with its bos/eos token strings), so a chat request is rendered by the model's
own template instead of refused; and it serves a GGUF file packed unless told otherwise."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType

import pytest

if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")

from serving import CHAT_TEMPLATE, tiny_llama

from packrt.errors import CheckpointError
from packrt.serve import completions
from packrt.serve.openai_shapes import ChatRequest, ServeError
from packrt.serve.served import ServedModel

JINJA = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }} {% endfor %}{{ eos_token }}"


def _chat(content: str) -> ChatRequest:
    return ChatRequest.model_validate({"messages": [{"role": "user", "content": content}]})


def test_a_chat_template_jinja_file_is_the_template(tmp_path: Path, transformers: ModuleType) -> None:
    directory = tiny_llama(tmp_path, transformers, chat_template=None)
    (directory / "chat_template.jinja").write_text(JINJA, encoding="utf-8")
    served = ServedModel.load(directory)
    assert served.chat_template == JINJA
    assert completions.render_chat(served, _chat("hello world")) == "[user] hello world </s>"


def test_the_jinja_file_wins_over_tokenizer_config(tmp_path: Path, transformers: ModuleType) -> None:
    directory = tiny_llama(tmp_path, transformers, chat_template=CHAT_TEMPLATE)
    (directory / "chat_template.jinja").write_text(JINJA, encoding="utf-8")
    assert ServedModel.load(directory).chat_template == JINJA


def test_a_jinja_file_that_is_not_text_is_refused_naming_it(tmp_path: Path, transformers: ModuleType) -> None:
    directory = tiny_llama(tmp_path, transformers, chat_template=None)
    (directory / "chat_template.jinja").write_bytes(b"\xff\xfe{{ bad")
    with pytest.raises(CheckpointError, match=r"chat_template\.jinja' cannot be read as UTF-8 text"):
        ServedModel.load(directory)


def test_without_any_template_chat_is_a_400_naming_where_it_looked(tmp_path: Path, transformers: ModuleType) -> None:
    directory = tiny_llama(tmp_path, transformers, chat_template=None)
    settings = json.loads((directory / "tokenizer_config.json").read_text())
    assert "chat_template" not in settings
    served = ServedModel.load(directory)
    with pytest.raises(ServeError, match=r"no chat_template\.jinja, no chat_template in its tokenizer_config"):
        completions.render_chat(served, _chat("hello"))


def test_a_gguf_files_own_chat_template_and_special_tokens_are_read(smollm2_gguf: Path) -> None:
    served = ServedModel.load(smollm2_gguf)
    assert served.chat_template is not None and "<|im_start|>" in served.chat_template
    assert served.special_tokens == {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    text = completions.render_chat(served, _chat("What is 2+2?"))
    assert text.endswith("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"), text


def _residencies(served: ServedModel) -> set[str]:
    from packrt import nn

    return {m.weight_residency for m in served.module.modules() if isinstance(m, nn.Linear | nn.BlockQuantizedLinear)}


def test_a_gguf_file_is_served_packed_unless_told_and_a_directory_packed_where_it_fits(
    smollm2_gguf: Path, tmp_path: Path, transformers: ModuleType
) -> None:
    """A GGUF file is packed by default: its dequantized tensors have no mapped copy to borrow, and an F16 one's
    packed weights are converted once instead of on every call. A directory is ``auto``: packed where the pack
    fits (a borrowed float weight computes on one core), borrowed only when told."""
    assert _residencies(ServedModel.load(smollm2_gguf)) == {"packed"}
    assert _residencies(ServedModel.load(smollm2_gguf, weight_residency="borrowed")) == {"borrowed"}
    directory = tiny_llama(tmp_path, transformers)
    assert _residencies(ServedModel.load(directory)) == {"auto"}
    assert _residencies(ServedModel.load(directory, weight_residency="borrowed")) == {"borrowed"}
