"""``packrt serve --dtype`` and ``--quantize`` reach the model's load, for every kind of model a safetensors
directory serves, and the server answers with the weights so loaded; a GGUF file, whose blocks are served as
stored, refuses both before anything is read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packrt
from packrt import nn

if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")

import httpx2 as httpx
from serving import running

from packrt.serve import ServedModel
from packrt.serve.served import ServeOptionError

WAIT_S = 120.0


def _floating(module: nn.Module) -> set[Any]:
    return {p.dtype for _, p in module.named_parameters() if p.dtype.is_floating_point}


def test_dtype_serves_a_causal_lms_weights_in_that_dtype_and_it_answers(llama_dir: Path) -> None:
    served = ServedModel.load(llama_dir, dtype="bfloat16")
    assert _floating(served.module) == {packrt.bfloat16}
    with running(served) as server:
        body = {"prompt": "hello world", "max_tokens": 4, "temperature": 0}
        answer = httpx.post(f"{server.base}/v1/completions", json=body, timeout=WAIT_S)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] >= 1


def test_quantize_int8_serves_an_encoders_linears_quantized_with_close_vectors(encoder_dir: Path) -> None:
    plain = ServedModel.load(encoder_dir)
    quantized = ServedModel.load(encoder_dir, quantize="int8")
    assert any(isinstance(m, nn.QuantizedLinear) for m in quantized.module.modules())
    assert not any(isinstance(m, nn.QuantizedLinear) for m in plain.module.modules())
    texts = ["hello world", "the cat sat on the mat"]
    vectors = []
    for served in (plain, quantized):
        with running(served) as server:
            answer = httpx.post(f"{server.base}/v1/embeddings", json={"input": texts}, timeout=WAIT_S)
        assert answer.status_code == 200, answer.text
        vectors.append(np.asarray([item["embedding"] for item in answer.json()["data"]]))
    cosine = (vectors[0] * vectors[1]).sum(axis=1)  # both unit length
    assert cosine.min() > 0.99, cosine


@pytest.mark.parametrize(
    ("options", "says"), [({"dtype": "bfloat16"}, "dtype 'bfloat16'"), ({"quantize": "int8"}, "quantize 'int8'")]
)
def test_a_gguf_file_refuses_dtype_and_quantize_before_loading(
    smollm2_gguf: Path, options: dict[str, str], says: str
) -> None:
    with pytest.raises(ServeOptionError, match=f"is a GGUF file, whose quantized blocks are served as stored; {says}"):
        ServedModel.load(smollm2_gguf, **options)
