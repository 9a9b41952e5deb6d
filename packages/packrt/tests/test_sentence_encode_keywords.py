"""``SentenceEncoder.encode`` has sentence-transformers' ``encode`` signature, and each keyword gives what it gives
there: compared with ``SentenceTransformer.encode`` on the real all-MiniLM-L6-v2, keyword by keyword."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import packrt
from packrt.models import SentenceEncoder
from packrt.models.embedding_quantization import PrecisionError, quantize_embeddings
from packrt.models.sentence import EncodeArgumentError

TEXTS = ["A man is eating food.", "Someone is having a meal.", "The sky is blue today.", "", "a much longer text " * 5]


@pytest.fixture(scope="module")
def st_model(minilm_dir: Path, sentence_transformers: ModuleType) -> Any:
    return sentence_transformers.SentenceTransformer(str(minilm_dir), device="cpu")


@pytest.fixture(scope="module")
def encoder(minilm_dir: Path) -> SentenceEncoder:
    return SentenceEncoder.from_pretrained(minilm_dir)


def test_the_signature_is_sentence_transformers_encode_in_its_order(st_model: Any) -> None:
    theirs = list(inspect.signature(type(st_model).encode).parameters)[1:13]  # self .. truncate_dim
    ours = list(inspect.signature(SentenceEncoder.encode).parameters)[1:13]
    assert ours == theirs
    assert theirs[0] == "inputs" and theirs[-1] == "truncate_dim"


def test_a_single_str_gives_one_vector(encoder: SentenceEncoder, st_model: Any) -> None:
    got = encoder.encode("A man is eating food.")
    assert got.shape == (384,)
    np.testing.assert_allclose(got, st_model.encode("A man is eating food."), rtol=1e-4, atol=1e-5)


def test_the_batch_size_changes_no_vector(encoder: SentenceEncoder, st_model: Any) -> None:
    expected = st_model.encode(TEXTS, batch_size=2)
    for batch_size in (1, 2, 32):
        np.testing.assert_allclose(encoder.encode(TEXTS, batch_size=batch_size), expected, rtol=1e-4, atol=1e-5)


def test_normalize_embeddings_and_truncate_dim_as_sentence_transformers_orders_them(
    encoder: SentenceEncoder, st_model: Any
) -> None:
    for keywords in ({"truncate_dim": 64}, {"truncate_dim": 64, "normalize_embeddings": True}, {"truncate_dim": 1000}):
        got = encoder.encode(TEXTS, **keywords)
        expected = st_model.encode(TEXTS, **keywords)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    cut = encoder.encode(TEXTS, truncate_dim=64)
    assert not np.allclose(np.linalg.norm(cut[:3], axis=-1), 1.0)  # cut after the Normalize step: shorter


def test_token_embeddings_are_each_texts_token_states_without_padding(encoder: SentenceEncoder, st_model: Any) -> None:
    got = encoder.encode(TEXTS, output_value="token_embeddings")
    expected = st_model.encode(TEXTS, output_value="token_embeddings")
    assert [g.shape for g in got] == [tuple(e.shape) for e in expected]
    for ours, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_each_precision_quantizes_as_sentence_transformers_does(
    encoder: SentenceEncoder, st_model: Any, precision: str
) -> None:
    from sentence_transformers.util.quantization import quantize_embeddings as theirs

    floats = st_model.encode(TEXTS)
    np.testing.assert_array_equal(quantize_embeddings(floats, precision), theirs(floats, precision=precision))  # type: ignore[arg-type]
    got = encoder.encode(TEXTS, precision=precision)
    expected = st_model.encode(TEXTS, precision=precision)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    # the float vectors agree to ~1e-7, so a value on a step's edge may land one step over: never more
    difference = np.abs(got.astype(np.int16) - expected.astype(np.int16))
    if precision.endswith("binary"):
        assert (difference == 0).mean() > 0.99
    else:
        assert difference.max() <= 1 and (difference == 0).mean() > 0.99


def test_int8_ranges_need_two_embeddings_or_more(encoder: SentenceEncoder) -> None:
    with pytest.raises(PrecisionError, match=r"one embedding has none; encode two or more texts"):
        encoder.encode(["only one"], precision="int8")
    with pytest.raises(ValueError, match=r"precision='int8' takes each dimension's range"):
        encoder.encode("only one", precision="int8")


def test_convert_to_tensor_gives_a_packrt_tensor_and_no_numpy_a_list_of_them(encoder: SentenceEncoder) -> None:
    expected = encoder.encode(TEXTS)
    tensor = encoder.encode(TEXTS, convert_to_tensor=True)
    assert isinstance(tensor, packrt.Tensor) and tuple(tensor.shape) == expected.shape
    np.testing.assert_array_equal(tensor.numpy(), expected)
    rows = encoder.encode(TEXTS, convert_to_numpy=False)
    assert isinstance(rows, list) and all(isinstance(row, packrt.Tensor) for row in rows)
    np.testing.assert_array_equal(np.stack([row.numpy() for row in rows]), expected)


def test_the_models_own_device_is_accepted_and_another_refused_with_the_move(encoder: SentenceEncoder) -> None:
    np.testing.assert_array_equal(encoder.encode(TEXTS, device="cpu"), encoder.encode(TEXTS))
    with pytest.raises(EncodeArgumentError, match=r"device 'cuda', but the model is on cpu; move it first"):
        encoder.encode(TEXTS, device="cuda")


@pytest.mark.parametrize(
    ("keywords", "pattern"),
    [
        ({"output_value": None}, r"output_value None is not one packrt gives"),
        ({"output_value": "logits"}, r"output_value 'logits' is not one packrt gives"),
        ({"precision": "float16"}, r"precision 'float16' is not one of float32, int8"),
        ({"truncate_dim": 0}, r"truncate_dim must be a positive int or None, got 0"),
    ],
)
def test_a_keyword_value_encode_does_not_take_is_refused_naming_it(
    encoder: SentenceEncoder, keywords: dict[str, Any], pattern: str
) -> None:
    with pytest.raises(EncodeArgumentError, match=pattern):
        encoder.encode(TEXTS, **keywords)


def test_a_progress_bar_changes_no_vector(encoder: SentenceEncoder, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    np.testing.assert_array_equal(encoder.encode(TEXTS, show_progress_bar=True), encoder.encode(TEXTS))
    assert "Batches" in capsys.readouterr().err
