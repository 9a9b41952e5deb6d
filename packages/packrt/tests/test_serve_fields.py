"""Every field of OpenAI's requests is honoured or refused by ``packrt serve``: ``echo``, ``logprobs`` /
``top_logprobs``, ``stream_options.include_usage``, ``dimensions`` and token-id input work (checked against
transformers' logits and the server's own text answers); ``tools``, ``response_format`` other than text,
``best_of`` other than ``n`` and the rest are a 400 whose error object names the field."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")
    pytest.importorskip("openai", reason="the openai client is a test dependency of packrt serve")

import httpx2 as httpx
import openai
from serving import running

from packrt.models import SentenceEncoder, load_tokenizer

WAIT_S = 120.0
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def llama_server(llama_dir: Path) -> Iterator[str]:
    with running(llama_dir) as server:
        yield server.base


@pytest.fixture(scope="module")
def encoder_server(encoder_dir: Path) -> Iterator[str]:
    with running(encoder_dir) as server:
        yield server.base


def _client(base: str) -> Any:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=WAIT_S)


def _post(base: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{base}{path}", json=body, timeout=WAIT_S)


def _refused(response: httpx.Response, param: str) -> str:
    """The message of a 400 in OpenAI's error shape naming ``param``."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["type"]) == (param, "invalid_request_error"), error
    message: str = error["message"]
    return message


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    out: np.ndarray = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return out


def _reference_logprobs(transformers: ModuleType, llama_dir: Path, ids: list[int]) -> np.ndarray:
    """transformers' log_softmax of the logits at each position of ``ids`` (float64)."""
    import torch

    model = transformers.LlamaForCausalLM.from_pretrained(llama_dir).eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double().numpy()
    return _log_softmax(logits)


CHAT = {"messages": [{"role": "user", "content": "hello cat"}], "max_tokens": 4}
REFUSED = [
    ("/v1/chat/completions", {"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "never makes a"),
    ("/v1/chat/completions", {"tool_choice": "auto"}, "tool_choice", "makes no tool calls"),
    ("/v1/chat/completions", {"functions": [{"name": "f"}]}, "functions", "function calling"),
    ("/v1/chat/completions", {"function_call": "auto"}, "function_call", "makes no tool calls"),
    ("/v1/chat/completions", {"response_format": {"type": "json_object"}}, "response_format", "not served"),
    ("/v1/chat/completions", {"response_format": {"type": "json_schema"}}, "response_format", "ask for JSON"),
    ("/v1/chat/completions", {"logit_bias": {"five": 10}}, "logit_bias", "not a token id"),
    ("/v1/chat/completions", {"logit_bias": {"5": 150}}, "logit_bias", "in [-100, 100]"),
    ("/v1/completions", {"logit_bias": {"999999": 1}}, "logit_bias", "not in the model's vocabulary"),
    ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs", "needs logprobs: true"),
    ("/v1/chat/completions", {"logprobs": True, "stream": True}, "logprobs", "send stream: false"),
    ("/v1/chat/completions", {"stream_options": {"include_usage": True}}, "stream_options", "stream: true"),
    ("/v1/completions", {"best_of": 3}, "best_of", "send best_of equal to n"),
    ("/v1/completions", {"n": 2, "best_of": 3}, "best_of", "best_of is 3 with n 2"),
    ("/v1/completions", {"n": 65}, "n", "asks for 65 choices, more than the 64"),
    ("/v1/completions", {"prompt": ["hello"] * 40, "n": 2}, "n", "n 2 x 40 prompt(s)"),
    ("/v1/completions", {"prompt": []}, "prompt", "empty list"),
    ("/v1/completions", {"prompt": [[4], [5, 999]]}, "prompt[1]", "prompt[1][1] is token id 999"),
    ("/v1/completions", {"suffix": "the end"}, "suffix", "does not fill in"),
    ("/v1/completions", {"logprobs": 1, "stream": True}, "logprobs", "send stream: false"),
]


@pytest.mark.parametrize(("path", "extra", "param", "says"), REFUSED, ids=[f"{p}-{k}" for _, _, p, k in REFUSED])
def test_a_field_this_server_does_not_serve_is_a_400_naming_it(
    llama_server: str, path: str, extra: dict[str, Any], param: str, says: str
) -> None:
    body = {**(CHAT if "chat" in path else {"prompt": "hello", "max_tokens": 4}), **extra}
    assert says in _refused(_post(llama_server, path, body), param)


def test_the_values_that_ask_for_nothing_are_served(llama_server: str) -> None:
    """What clients send by default (LangChain sends zero penalties and n: 1) is no reason to refuse."""
    defaults = {
        "n": 1,
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "logit_bias": {},
        "tool_choice": "none",
        "response_format": {"type": "text"},
        "user": "someone",
        "logprobs": False,
    }
    plain = _post(llama_server, "/v1/chat/completions", {**CHAT, **GREEDY})
    answer = _post(llama_server, "/v1/chat/completions", {**CHAT, **GREEDY, **defaults})
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"] == plain.json()["choices"][0]["message"]
    assert answer.json()["choices"][0]["logprobs"] is None


def test_echo_puts_the_prompt_before_the_completion_streamed_or_not(llama_server: str) -> None:
    client = _client(llama_server)
    plain = client.completions.create(model="tiny", prompt="hello world the", max_tokens=6, **GREEDY)
    echoed = client.completions.create(model="tiny", prompt="hello world the", max_tokens=6, echo=True, **GREEDY)
    assert echoed.choices[0].text == "hello world the" + plain.choices[0].text
    assert echoed.usage == plain.usage
    streamed = client.completions.create(
        model="tiny", prompt="hello world the", max_tokens=6, echo=True, stream=True, **GREEDY
    )
    assert "".join(chunk.choices[0].text for chunk in streamed) == echoed.choices[0].text


def test_include_usage_ends_a_stream_with_a_chunk_of_no_choices_carrying_the_usage(llama_server: str) -> None:
    client = _client(llama_server)
    whole = client.chat.completions.create(model="tiny", **CHAT, **GREEDY)
    chunks = list(
        client.chat.completions.create(
            model="tiny", **CHAT, **GREEDY, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.model_dump() == whole.usage.model_dump()
    assert all(chunk.usage is None for chunk in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason
    without = list(client.chat.completions.create(model="tiny", **CHAT, **GREEDY, stream=True))
    assert all(chunk.choices for chunk in without)  # no usage chunk unless asked
    text = list(
        client.completions.create(
            model="tiny", prompt="the cat", max_tokens=5, stream=True, stream_options={"include_usage": True}
        )
    )
    assert text[-1].choices == [] and text[-1].usage is not None and text[-1].usage.prompt_tokens == 3


def test_completion_logprobs_are_the_models_log_softmax_at_each_new_token(
    llama_server: str, llama_dir: Path, transformers: ModuleType
) -> None:
    client = _client(llama_server)
    answer = client.completions.create(model="tiny", prompt="hello world the cat", max_tokens=8, logprobs=3, **GREEDY)
    choice = answer.choices[0]
    logprobs = choice.logprobs
    assert "".join(logprobs.tokens) == choice.text
    assert logprobs.text_offset == [len("".join(logprobs.tokens[:i])) for i in range(len(logprobs.tokens))]
    tokenizer = load_tokenizer(llama_dir)
    prompt = tokenizer.encode("hello world the cat").ids
    new = [tokenizer.token_to_id(word) for word in choice.text.split()]
    reference = _reference_logprobs(transformers, llama_dir, prompt + new)
    for at, token in enumerate(new):
        row = reference[len(prompt) + at - 1]
        assert logprobs.token_logprobs[at] == pytest.approx(row[token], abs=1e-4)
        top = logprobs.top_logprobs[at]
        assert len(top) == 3  # greedy: the chosen token is the likeliest, one of the three
        assert max(top.values()) == pytest.approx(row.max(), abs=1e-4)
        assert sorted(top.values()) == pytest.approx(sorted(np.sort(row)[-3:]), abs=1e-4)


def test_echo_with_logprobs_and_no_new_tokens_scores_the_prompt(
    llama_server: str, llama_dir: Path, transformers: ModuleType
) -> None:
    """lm-evaluation-harness's log-likelihood request: the prompt's own tokens scored, the first one by nothing."""
    body = {"prompt": "hello world the cat", "max_tokens": 0, "echo": True, "logprobs": 0}
    answer = _post(llama_server, "/v1/completions", body)
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    assert choice["text"] == "hello world the cat"
    logprobs = choice["logprobs"]
    ids = load_tokenizer(llama_dir).encode("hello world the cat").ids  # <s> hello world the cat
    assert logprobs["tokens"] == ["", "hello", "world", "the", "cat"]
    assert logprobs["text_offset"] == [0, 0, 6, 12, 16]
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    reference = _reference_logprobs(transformers, llama_dir, ids)
    expected = [reference[at - 1, ids[at]] for at in range(1, len(ids))]
    np.testing.assert_allclose(logprobs["token_logprobs"][1:], expected, atol=1e-4)
    assert [list(top.values()) for top in logprobs["top_logprobs"][1:]] == [[v] for v in logprobs["token_logprobs"][1:]]


def test_chat_logprobs_list_each_token_with_its_top_alternatives(llama_server: str) -> None:
    answer = _client(llama_server).chat.completions.create(
        model="tiny", **CHAT, **GREEDY, logprobs=True, top_logprobs=4
    )
    content = answer.choices[0].logprobs.content
    assert "".join(entry.token for entry in content) == answer.choices[0].message.content
    for entry in content:
        assert entry.bytes == list(entry.token.encode("utf-8"))
        assert len(entry.top_logprobs) == 4
        values = [alt.logprob for alt in entry.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert entry.logprob == pytest.approx(values[0])  # greedy: the chosen token is the likeliest
    plain = _client(llama_server).chat.completions.create(model="tiny", **CHAT, **GREEDY, logprobs=True)
    assert all(entry.top_logprobs == [] for entry in plain.choices[0].logprobs.content)


def test_a_prompt_of_token_ids_is_the_same_prompt_as_its_text(llama_server: str, llama_dir: Path) -> None:
    client = _client(llama_server)
    ids = load_tokenizer(llama_dir).encode("hello world the cat").ids
    as_text = client.completions.create(model="tiny", prompt="hello world the cat", max_tokens=8, **GREEDY)
    as_ids = client.completions.create(model="tiny", prompt=ids, max_tokens=8, **GREEDY)
    nested = client.completions.create(model="tiny", prompt=[ids], max_tokens=8, echo=True, **GREEDY)
    assert as_ids.choices[0].text == as_text.choices[0].text
    assert as_ids.usage == as_text.usage
    # echo decodes the ids (this word-level tokenizer does not mark <s> as special, so its text shows it)
    assert nested.choices[0].text == load_tokenizer(llama_dir).decode(ids) + as_text.choices[0].text
    message = _refused(_post(llama_server, "/v1/completions", {"prompt": [4, 99999]}), "prompt")
    assert "prompt[1] is token id 99999, outside this model's vocabulary" in message


def test_token_id_input_embeds_as_the_text_those_ids_encode(encoder_server: str, encoder_dir: Path) -> None:
    reference = SentenceEncoder.from_pretrained(encoder_dir)
    texts = ["hello world", "the cat sat on the mat"]
    ids = [reference.tokenizer.encode(text).ids for text in texts]  # what the model reads: [CLS] ... [SEP]
    expected = reference.encode(texts)
    client = _client(encoder_server)
    both = client.embeddings.create(model="tiny", input=ids)
    one = client.embeddings.create(model="tiny", input=ids[1])
    np.testing.assert_allclose([item.embedding for item in both.data], expected, atol=2e-6)
    np.testing.assert_allclose(one.data[0].embedding, expected[1], atol=2e-6)
    assert both.usage.prompt_tokens == sum(len(each) for each in ids)
    vocab = reference.tokenizer.get_vocab_size()
    message = _refused(_post(encoder_server, "/v1/embeddings", {"input": [[101, 102], [101, vocab]]}), "input[1]")
    assert f"holds token id {vocab}, outside this model's vocabulary" in message
    _refused(_post(encoder_server, "/v1/embeddings", {"input": [[101, 102], "text"]}), "input[1]")
    _refused(_post(encoder_server, "/v1/embeddings", {"input": [[101, 102], []]}), "input[1]")


def test_token_id_input_over_the_bound_is_cut_or_refused_as_text_is(encoder_dir: Path) -> None:
    from packrt.serve import ServeLimits

    with running(encoder_dir, ServeLimits(max_tokens_per_text=8)) as server:
        long = list(range(1000, 1020))
        cut = _post(server.base, "/v1/embeddings", {"input": long, "encoding_format": "float"})
        first = _post(server.base, "/v1/embeddings", {"input": long[:8], "encoding_format": "float"})
        assert cut.status_code == first.status_code == 200, cut.text
        assert cut.json()["usage"]["prompt_tokens"] == 8  # the tokens the model read
        assert cut.json()["data"] == first.json()["data"]
        refused = _post(server.base, "/v1/embeddings", {"input": long, "truncate": False})
        assert "input has 20 tokens" in _refused(refused, "input")


def test_dimensions_of_a_model_that_does_not_say_it_is_matryoshka_is_a_400_unless_its_full_size(
    encoder_server: str,
) -> None:
    message = _refused(_post(encoder_server, "/v1/embeddings", {"input": "hello", "dimensions": 16}), "dimensions")
    assert "does not say it was trained to be cut" in message and "send dimensions: 32" in message
    over = _refused(_post(encoder_server, "/v1/embeddings", {"input": "hello", "dimensions": 64}), "dimensions")
    assert "more than the 32 numbers" in over
    full = _client(encoder_server).embeddings.create(model="tiny", input="hello", dimensions=32)
    assert len(full.data[0].embedding) == 32


@pytest.fixture(scope="module")
def matryoshka_dir(encoder_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("matryoshka") / "tiny"
    shutil.copytree(encoder_dir, directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "matryoshka_dimensions": [8, 16, 32]}))
    return directory


def test_dimensions_of_a_matryoshka_model_cut_each_vector_and_make_it_unit_length(matryoshka_dir: Path) -> None:
    texts = ["hello world", "the cat sat on the mat"]
    full = SentenceEncoder.from_pretrained(matryoshka_dir).encode(texts)
    with running(matryoshka_dir) as server:
        answer = _client(server.base).embeddings.create(model="tiny", input=texts, dimensions=16)
        got = np.asarray([item.embedding for item in answer.data])
        expected = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
        np.testing.assert_allclose(got, expected, atol=2e-6)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
        message = _refused(_post(server.base, "/v1/embeddings", {"input": "a", "dimensions": 12}), "dimensions")
        assert "trained to be cut to [8, 16, 32] only" in message


def test_token_id_input_to_a_model_that_pools_without_its_default_prompt_is_a_400(
    encoder_dir: Path, tmp_path: Path
) -> None:
    """Its batch masks the prompt's first tokens out of the pooling; ids carry no prompt, so the mask would drop
    the client's own tokens: such a model takes text only."""
    directory = tmp_path / "prompted"
    shutil.copytree(encoder_dir, directory)
    settings = {"prompts": {"query": "query: "}, "default_prompt_name": "query"}
    (directory / "config_sentence_transformers.json").write_text(json.dumps(settings))
    pooling = json.loads((directory / "1_Pooling" / "config.json").read_text())
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "include_prompt": False}))
    with running(directory) as server:
        refused = _post(server.base, "/v1/embeddings", {"input": [101, 7592, 102]})
        assert "send the text instead" in _refused(refused, "input")
        assert _post(server.base, "/v1/embeddings", {"input": "hello"}).status_code == 200


def test_logprobs_of_an_answer_cut_by_a_stop_string_cover_only_its_text(llama_server: str) -> None:
    client = _client(llama_server)
    whole = client.completions.create(model="tiny", prompt="hello world", max_tokens=12, logprobs=1, **GREEDY)
    words = whole.choices[0].text.split(" ")
    if len(words) < 4:
        pytest.fail(f"the greedy text ended too early to test a stop string: {whole.choices[0].text!r}")
    cut = client.completions.create(
        model="tiny", prompt="hello world", max_tokens=12, logprobs=1, stop=[" " + words[3]], **GREEDY
    )
    assert cut.choices[0].finish_reason == "stop"
    assert "".join(cut.choices[0].logprobs.tokens) == cut.choices[0].text == " ".join(words[:3])
    # a shorter scoring call sums in another order: the same values to float32's rounding
    assert cut.choices[0].logprobs.token_logprobs == pytest.approx(whole.choices[0].logprobs.token_logprobs[:3])
