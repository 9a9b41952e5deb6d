"""``packrt serve`` speaks OpenAI's API: the ``openai`` package's own client, offline against a loopback
server, gets the vectors and the tokens packrt computes directly, in OpenAI's shapes, streamed or not."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import packrt
from packrt.models import CausalLM, SentenceEncoder, from_pretrained, load_tokenizer

# skipped where the serve extra is not installed (nox -s lowest installs no extras); CI, which sets
# PACKRT_REQUIRE_TORCH=1 and installs packrt[test], fails on the import below instead
if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")
    pytest.importorskip("openai", reason="the openai client is a test dependency of packrt serve")

import openai
from serving import running, tiny_encoder

TEXTS = ["hello world", "the cat sat on the mat", "a", "dogs and cats " * 20, "ünïcödé text 🙂"]


@pytest.fixture(scope="module")
def encoder_server(encoder_dir: Path) -> Iterator[str]:
    with running(encoder_dir) as server:
        yield server.base


@pytest.fixture(scope="module")
def llama_server(llama_dir: Path) -> Iterator[str]:
    with running(llama_dir) as server:
        yield server.base


def _client(base: str) -> Any:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=120)


def _greedy(llama_dir: Path, prompt: str, max_tokens: int, special: bool = True) -> str:
    """What packrt's own generate gives: the new tokens up to the first eos, decoded."""
    lm = from_pretrained(llama_dir)
    assert isinstance(lm, CausalLM)
    tokenizer = load_tokenizer(llama_dir)
    ids = tokenizer.encode(prompt, add_special_tokens=special).ids
    out = lm.generate(packrt.from_numpy(np.asarray([ids], dtype=np.int64)), max_tokens).numpy()[0, len(ids) :]
    new = [int(t) for t in out]
    if 2 in new:
        new = new[: new.index(2)]
    return str(tokenizer.decode(new))


def test_embeddings_through_the_openai_client_equal_sentence_encoder_vectors(
    encoder_server: str, encoder_dir: Path
) -> None:
    reference = SentenceEncoder.from_pretrained(encoder_dir).encode(TEXTS)
    client = _client(encoder_server)
    answer = client.embeddings.create(model="tiny", input=TEXTS)  # the client asks for base64 itself
    got = np.asarray([item.embedding for item in answer.data], dtype=np.float32)
    assert [item.index for item in answer.data] == list(range(len(TEXTS)))
    np.testing.assert_allclose(got, reference, atol=2e-6)
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > len(TEXTS)
    floats = client.embeddings.create(model="tiny", input=TEXTS[1], encoding_format="float")
    np.testing.assert_allclose(np.asarray(floats.data[0].embedding), reference[1], atol=2e-6)


def test_models_lists_the_served_model_and_its_kind(encoder_server: str, encoder_dir: Path) -> None:
    listed = _client(encoder_server).models.list().data
    assert [model.id for model in listed] == [encoder_dir.name]


def test_completion_through_the_openai_client_is_packrts_greedy_generation(llama_server: str, llama_dir: Path) -> None:
    prompt = "hello world the cat"
    answer = _client(llama_server).completions.create(model="tiny", prompt=prompt, max_tokens=12, temperature=0)
    choice = answer.choices[0]
    assert choice.text == _greedy(llama_dir, prompt, 12)
    assert choice.finish_reason in ("length", "stop")
    assert answer.usage.prompt_tokens == 5  # <s> and four words
    assert answer.usage.completion_tokens <= 12


def test_chat_through_the_openai_client_renders_the_models_template(llama_server: str, llama_dir: Path) -> None:
    messages = [{"role": "system", "content": "a"}, {"role": "user", "content": "hello cat"}]
    answer = _client(llama_server).chat.completions.create(
        model="tiny", messages=messages, max_tokens=10, temperature=0
    )
    rendered = "<system> a <user> hello cat <assistant>"  # tests/serving.py's CHAT_TEMPLATE
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content == _greedy(llama_dir, rendered, 10, special=False)


def test_streamed_chat_deltas_join_to_the_unstreamed_answer(llama_server: str) -> None:
    client = _client(llama_server)
    messages = [{"role": "user", "content": "the dog ran"}]
    whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=16, temperature=0)
    chunks = list(
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=16, temperature=0, stream=True)
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    joined = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert joined == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_streamed_completion_ends_with_done_and_the_same_text(llama_server: str) -> None:
    import httpx2 as httpx

    body = {"prompt": "hello world", "max_tokens": 9, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{llama_server}/v1/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)
    whole = _client(llama_server).completions.create(model="tiny", prompt="hello world", max_tokens=9, temperature=0)
    streamed = _client(llama_server).completions.create(
        model="tiny", prompt="hello world", max_tokens=9, temperature=0, stream=True
    )
    assert "".join(chunk.choices[0].text for chunk in streamed) == whole.choices[0].text


def test_sampling_with_a_seed_repeats_and_stop_strings_end_the_text(llama_server: str) -> None:
    client = _client(llama_server)
    first = client.completions.create(model="tiny", prompt="the cat", max_tokens=20, temperature=1.5, top_p=0.9, seed=7)
    again = client.completions.create(model="tiny", prompt="the cat", max_tokens=20, temperature=1.5, top_p=0.9, seed=7)
    assert first.choices[0].text == again.choices[0].text
    words = first.choices[0].text.split(" ")
    if len(words) < 3:
        pytest.fail(f"the seeded sample ended too early to test stop strings: {first.choices[0].text!r}")
    stop = words[2]
    cut = client.completions.create(
        model="tiny", prompt="the cat", max_tokens=20, temperature=1.5, top_p=0.9, seed=7, stop=[stop]
    )
    expected = first.choices[0].text[: first.choices[0].text.index(stop)]
    assert cut.choices[0].text == expected
    assert cut.choices[0].finish_reason == "stop"


def test_a_plain_encoder_directory_serves_masked_mean_pooled_normalized_vectors(
    tmp_path: Path, transformers: ModuleType, minilm_dir: Path
) -> None:
    import torch

    directory = tiny_encoder(tmp_path / "bert", transformers, minilm_dir, seed=1)
    for name in ("modules.json", "sentence_bert_config.json"):
        (directory / name).unlink()
    texts = ["hello world", "the cat sat on the mat and then ran"]
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(directory / "tokenizer.json"))
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = transformers.BertModel.from_pretrained(directory).eval()(**batch).last_hidden_state
    mask = batch["attention_mask"][:, :, None].float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    reference = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    with running(directory) as server:
        answer = _client(server.base).embeddings.create(model="bert", input=texts)
    np.testing.assert_allclose(np.asarray([d.embedding for d in answer.data]), reference, atol=1e-5)


def test_chat_content_given_as_text_parts_is_the_same_as_a_string(llama_server: str) -> None:
    client = _client(llama_server)
    as_string = [{"role": "user", "content": "hello cat"}]
    as_parts = [{"role": "user", "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "cat"}]}]
    one = client.chat.completions.create(model="tiny", messages=as_string, max_tokens=6, temperature=0)
    two = client.chat.completions.create(model="tiny", messages=as_parts, max_tokens=6, temperature=0)
    assert one.choices[0].message.content == two.choices[0].message.content
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    with pytest.raises(openai.BadRequestError, match="content part 'image_url' is not served: text parts only"):
        client.chat.completions.create(model="tiny", messages=image, max_tokens=6)


def test_a_request_for_another_model_is_a_404_naming_both_and_one_without_a_model_is_served(
    encoder_server: str, llama_server: str
) -> None:
    import httpx2 as httpx

    with pytest.raises(
        openai.NotFoundError, match=r"model 'gpt-4o' is not served here; this server serves 'tiny'"
    ) as err:
        _client(llama_server).completions.create(model="gpt-4o", prompt="hello", max_tokens=2)
    assert isinstance(err.value.body, dict)
    assert (err.value.body["param"], err.value.body["code"]) == ("model", "model_not_found")
    with pytest.raises(openai.NotFoundError, match="send model 'tiny', or start the server with --name 'other'"):
        _client(encoder_server).embeddings.create(model="other", input="hello")
    unnamed = httpx.post(f"{encoder_server}/v1/embeddings", json={"input": "hello"}, timeout=120)
    assert unnamed.status_code == 200, unnamed.text
    assert unnamed.json()["model"] == "tiny"
