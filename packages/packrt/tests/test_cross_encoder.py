"""Cross-encoder rerankers score as sentence-transformers' ``CrossEncoder`` scores: ``predict`` and ``rank`` on
directories it saved itself and on plain Hugging Face classifier directories, keyword for keyword, to 1e-5.

Each directory is a random 2-layer, 32-wide ``BertForSequenceClassification`` or
``XLMRobertaForSequenceClassification`` (or a 3-layer ``ModernBertForSequenceClassification``; 1 or 3 labels)
with all-MiniLM-L6-v2's tokenizer; the
sentence-transformers ones are saved by ``CrossEncoder(...).save``, so the files are exactly what it writes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import packrt
from packrt.errors import CheckpointError
from packrt.models import (
    CrossEncoder,
    PromptNameError,
    RankError,
    SentenceEncoder,
    SequenceClassifier,
    TextTypeError,
    UnsupportedModelError,
    describe,
    from_pretrained,
)
from packrt.models.modernbert import ModernBertClassifier
from packrt.models.sentence import BatchSizeError, EncodeArgumentError

QUERY = "how do small machines serve models"
DOCUMENTS = [
    "serving models on small machines, quickly and well",
    "The sky is blue today.",
    "",
    "A man is eating food. " * 40,  # longer than the bound: cut, the longer text first
    "models are served",
]
PAIRS = [(QUERY, document) for document in DOCUMENTS] + [("A man is eating food.", "A man eats.")]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def _classifier(transformers: ModuleType, minilm_dir: Path, directory: Path, kind: str, labels: int) -> Path:
    """A random classifier directory as transformers' save_pretrained writes it, with MiniLM's tokenizer."""
    import torch

    torch.manual_seed(labels)
    sizes: dict[str, Any] = {
        "vocab_size": 30522,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "num_labels": labels,
    }
    if kind == "bert":
        model = transformers.BertForSequenceClassification(transformers.BertConfig(**sizes))
    elif kind == "modernbert":  # local layers see two positions each way; pooled by the mean of the real tokens
        config = transformers.ModernBertConfig(
            **{**sizes, "num_hidden_layers": 3}, local_attention=4, pad_token_id=0, classifier_pooling="mean"
        )
        model = transformers.ModernBertForSequenceClassification(config)
    else:  # MiniLM's tokenizer pads with id 0 and gives the second text type 1
        config = transformers.XLMRobertaConfig(**sizes, pad_token_id=0, type_vocab_size=2)
        model = transformers.XLMRobertaForSequenceClassification(config)
    model.save_pretrained(str(directory))
    for name in TOKENIZER_FILES:
        if (minilm_dir / name).is_file():
            shutil.copy(minilm_dir / name, directory / name)
    return directory


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory, transformers: ModuleType, minilm_dir: Path) -> dict[str, Path]:
    """Plain Hugging Face classifier directories: bert and xlm-roberta, 1 and 3 labels."""
    return {
        f"{kind}-{labels}": _classifier(
            transformers, minilm_dir, tmp_path_factory.mktemp(f"{kind}-{labels}"), kind, labels
        )
        for kind in ("bert", "xlm-roberta", "modernbert")
        for labels in (1, 3)
    }


def _saved(st: ModuleType, source: Path, directory: Path, **options: Any) -> Path:
    """``source`` loaded and saved again by sentence-transformers' CrossEncoder (``max_length``, prompts...)."""
    st.CrossEncoder(str(source), device="cpu", **options).save(str(directory))
    return directory


def _both(st: ModuleType, directory: Path, pairs: Any = PAIRS, **keywords: Any) -> tuple[Any, Any]:
    expected = st.CrossEncoder(str(directory), device="cpu").predict(pairs, **keywords)
    got = CrossEncoder.from_pretrained(directory).predict(pairs, batch_size=2, **keywords)  # padded batches
    return got, expected


@pytest.mark.parametrize("name", ["bert-1", "bert-3", "xlm-roberta-1", "xlm-roberta-3", "modernbert-1", "modernbert-3"])
def test_a_classifier_directory_gives_transformers_logits(
    plain: dict[str, Path], transformers: ModuleType, name: str
) -> None:
    import torch

    directory = plain[name]
    reference = transformers.AutoModelForSequenceClassification.from_pretrained(str(directory)).eval()
    ids = torch.randint(5, 30000, (3, 11))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    ids[1, 7:] = 0
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).logits.numpy()
    model = from_pretrained(directory)
    assert isinstance(model, ModernBertClassifier if name.startswith("modernbert") else SequenceClassifier)
    got = model(packrt.from_numpy(ids.numpy()), packrt.from_numpy(mask.numpy())).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("name", ["bert-1", "bert-3", "xlm-roberta-1", "xlm-roberta-3", "modernbert-1", "modernbert-3"])
def test_predict_on_a_plain_directory_matches_sentence_transformers(
    plain: dict[str, Path], sentence_transformers: ModuleType, name: str
) -> None:
    got, expected = _both(sentence_transformers, plain[name])
    assert got.shape == expected.shape == ((len(PAIRS),) if name.endswith("-1") else (len(PAIRS), 3))
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("name", ["bert-1", "xlm-roberta-3"])
def test_predict_on_a_directory_sentence_transformers_saved_matches_it(
    plain: dict[str, Path], sentence_transformers: ModuleType, tmp_path: Path, name: str
) -> None:
    directory = _saved(sentence_transformers, plain[name], tmp_path / "ce")
    assert (directory / "modules.json").is_file()
    got, expected = _both(sentence_transformers, directory)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_the_saved_max_length_cuts_pairs_as_sentence_transformers_does(
    plain: dict[str, Path], sentence_transformers: ModuleType, tmp_path: Path
) -> None:
    directory = _saved(sentence_transformers, plain["bert-1"], tmp_path / "ce", max_length=12)
    encoder = CrossEncoder.from_pretrained(directory)
    assert encoder.max_seq_length == 12
    got, expected = _both(sentence_transformers, directory)
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize(
    "keywords",
    [
        {"apply_softmax": True},
        {"activation_fn": "identity"},
        {"prompt": "rerank: "},
    ],
    ids=["apply_softmax", "identity", "prompt"],
)
def test_predict_keywords_give_what_sentence_transformers_gives(
    plain: dict[str, Path], sentence_transformers: ModuleType, keywords: dict[str, Any]
) -> None:
    import torch

    theirs = dict(keywords)
    if keywords.get("activation_fn") == "identity":
        theirs["activation_fn"] = torch.nn.Identity()
    expected = sentence_transformers.CrossEncoder(str(plain["bert-3"]), device="cpu").predict(PAIRS, **theirs)
    got = CrossEncoder.from_pretrained(plain["bert-3"]).predict(PAIRS, **keywords)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_saved_prompts_and_the_default_prompt_go_before_the_first_text(
    plain: dict[str, Path], sentence_transformers: ModuleType, tmp_path: Path
) -> None:
    prompts = {"query": "query: ", "web": "web search: "}
    directory = _saved(
        sentence_transformers, plain["bert-1"], tmp_path / "ce", prompts=prompts, default_prompt_name="query"
    )
    for keywords in ({}, {"prompt_name": "web"}, {"prompt": "x: "}):
        got, expected = _both(sentence_transformers, directory, **keywords)
        np.testing.assert_allclose(got, expected, atol=1e-5)
    with pytest.raises(PromptNameError, match=r"prompt_name 'nope' is not among this model's prompts"):
        CrossEncoder.from_pretrained(directory).predict(PAIRS, prompt_name="nope")


def test_the_saved_activation_is_the_default(
    plain: dict[str, Path], sentence_transformers: ModuleType, tmp_path: Path
) -> None:
    import torch

    directory = _saved(sentence_transformers, plain["bert-1"], tmp_path / "ce", activation_fn=torch.nn.Tanh())
    encoder = CrossEncoder.from_pretrained(directory)
    assert encoder.activation == "tanh"
    got, expected = _both(sentence_transformers, directory)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_an_activation_packrt_does_not_apply_is_refused_by_name(plain: dict[str, Path], tmp_path: Path) -> None:
    directory = tmp_path / "ce"
    shutil.copytree(plain["bert-1"], directory)
    config = json.loads((directory / "config.json").read_text())
    config["sentence_transformers"] = {"activation_fn": "torch.nn.modules.activation.Softplus"}
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match=r"activation_fn 'torch.nn.modules.activation.Softplus' is not one"):
        CrossEncoder.from_pretrained(directory)


def test_one_pair_gives_one_score_and_tensors_when_asked(
    plain: dict[str, Path], sentence_transformers: ModuleType
) -> None:
    encoder = CrossEncoder.from_pretrained(plain["bert-1"])
    expected = sentence_transformers.CrossEncoder(str(plain["bert-1"]), device="cpu").predict(PAIRS[0])
    one = encoder.predict(PAIRS[0])
    assert np.ndim(one) == 0
    np.testing.assert_allclose(one, expected, atol=1e-5)
    tensor = encoder.predict(PAIRS, convert_to_tensor=True)
    assert isinstance(tensor, packrt.Tensor) and tensor.shape == (len(PAIRS),)
    rows = encoder.predict(PAIRS, convert_to_numpy=False)
    assert isinstance(rows, list) and len(rows) == len(PAIRS) and all(isinstance(r, packrt.Tensor) for r in rows)
    assert encoder.predict([]).shape == (0,)


def test_padding_never_changes_a_pairs_score(plain: dict[str, Path]) -> None:
    encoder = CrossEncoder.from_pretrained(plain["xlm-roberta-1"])
    alone = np.array([encoder.predict(pair) for pair in PAIRS])
    np.testing.assert_allclose(encoder.predict(PAIRS, batch_size=len(PAIRS)), alone, atol=1e-6)


@pytest.mark.parametrize("keywords", [{}, {"top_k": 2, "return_documents": True}, {"top_k": 0}])
def test_rank_orders_documents_as_sentence_transformers_does(
    plain: dict[str, Path], sentence_transformers: ModuleType, keywords: dict[str, Any]
) -> None:
    expected = sentence_transformers.CrossEncoder(str(plain["bert-1"]), device="cpu").rank(QUERY, DOCUMENTS, **keywords)
    got = CrossEncoder.from_pretrained(plain["bert-1"]).rank(QUERY, DOCUMENTS, **keywords)
    assert [r["corpus_id"] for r in got] == [r["corpus_id"] for r in expected]
    assert [r.get("text") for r in got] == [r.get("text") for r in expected]
    np.testing.assert_allclose([r["score"] for r in got], [r["score"] for r in expected], atol=1e-5)


def test_rank_on_a_model_of_several_labels_is_refused(plain: dict[str, Path]) -> None:
    with pytest.raises(RankError, match=r"gives 3 scores per pair and ranking needs one"):
        CrossEncoder.from_pretrained(plain["bert-3"]).rank(QUERY, DOCUMENTS)


def test_bad_inputs_are_refused_naming_the_entry(plain: dict[str, Path]) -> None:
    encoder = CrossEncoder.from_pretrained(plain["bert-1"])
    with pytest.raises(TextTypeError, match=r"inputs\[1\] is \('b', None\), not a pair of str"):
        encoder.predict([("a", "b"), ("b", None)])
    with pytest.raises(TextTypeError, match=r"takes pairs of texts"):
        encoder.predict("just one text")
    with pytest.raises(TextTypeError, match=r"got a single str; wrap it as \[document\]"):
        encoder.rank(QUERY, "one document")
    with pytest.raises(BatchSizeError, match=r"batch_size must be a positive int, got 0"):
        encoder.predict(PAIRS, batch_size=0)
    with pytest.raises(EncodeArgumentError, match=r"activation_fn 'softplus' is not one packrt applies"):
        encoder.predict(PAIRS, activation_fn="softplus")
    with pytest.raises(EncodeArgumentError, match=r"top_k must be a non-negative int or None, got -1"):
        encoder.rank(QUERY, DOCUMENTS, top_k=-1)
    with pytest.raises(EncodeArgumentError, match=r"device 'cuda', but the model is on cpu; move it first"):
        encoder.predict(PAIRS, device="cuda")


def test_describe_names_a_classifier_a_sequence_classification_head(
    plain: dict[str, Path], sentence_transformers: ModuleType, tmp_path: Path
) -> None:
    assert describe(plain["bert-1"]).head == "sequence-classification"
    saved = describe(_saved(sentence_transformers, plain["xlm-roberta-1"], tmp_path / "ce"))
    assert (saved.head, saved.architecture) == ("sequence-classification", "XLMRobertaForSequenceClassification")
    with pytest.raises(UnsupportedModelError, match=r"a cross-encoder: it scores pairs of texts, it gives no sentence"):
        SentenceEncoder.from_pipeline(describe(plain["bert-1"]).pipeline())


def test_an_encoder_without_a_classifier_is_no_cross_encoder(encoder_dir: Path) -> None:
    with pytest.raises(UnsupportedModelError, match=r"not a sequence classifier; a cross-encoder \(reranker\) is a"):
        CrossEncoder.from_pretrained(encoder_dir)


def test_a_cross_encoder_over_a_causal_lm_is_refused_by_step(plain: dict[str, Path], tmp_path: Path) -> None:
    directory = tmp_path / "ce"
    shutil.copytree(plain["bert-1"], directory)
    steps = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_LogitScore",
            "type": "sentence_transformers.cross_encoder.modules.LogitScore",
        },
    ]
    (directory / "modules.json").write_text(json.dumps(steps))
    (directory / "config_sentence_transformers.json").write_text(json.dumps({"model_type": "CrossEncoder"}))
    with pytest.raises(UnsupportedModelError, match=r"lists the CrossEncoder steps \['Transformer', 'LogitScore'\]"):
        CrossEncoder.from_pretrained(directory)


def test_a_classifier_checkpoint_without_its_head_names_the_missing_tensor(
    plain: dict[str, Path], tmp_path: Path
) -> None:
    from safetensors.numpy import load_file, save_file

    directory = tmp_path / "ce"
    shutil.copytree(plain["bert-1"], directory)
    tensors = load_file(str(directory / "model.safetensors"))
    del tensors["classifier.weight"]
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"classifier\.weight"):
        CrossEncoder.from_pretrained(directory)


@pytest.fixture(scope="module")
def qwen3_reranker(tmp_path_factory: pytest.TempPathFactory, transformers: ModuleType) -> Path:
    """A random Qwen3ForSequenceClassification (one label, pad id 0), with a word-level tokenizer that joins a
    pair with a separator and ends it with an end token, padding on the left as Qwen's tokenizers do."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("qwen3-reranker")
    config = transformers.Qwen3Config(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
        num_labels=1,
        pad_token_id=0,
        initializer_range=0.2,
    )
    transformers.Qwen3ForSequenceClassification(config).save_pretrained(str(directory))
    vocab = {"<pad>": 0, "<end>": 1, "<sep>": 2, **{f"w{i}": i for i in range(3, 128)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A <end>", pair="$A <sep> $B <end>", special_tokens=[("<end>", 1), ("<sep>", 2)]
    )
    tokenizer.save(str(directory / "tokenizer.json"))
    settings = {"eos_token": "<end>", "pad_token": "<pad>", "padding_side": "left"}
    (directory / "tokenizer_config.json").write_text(
        json.dumps(settings | {"tokenizer_class": "PreTrainedTokenizerFast"})
    )
    return directory


WORD_PAIRS = [("w5 w9", "w17 w18 w19"), ("w3", "w4"), ("w20 w21 w22 w23", "w24 w25 w26 w27 w28 w29"), ("w7", "w7 w8")]


def test_a_decoder_reranker_scores_as_sentence_transformers_does(
    qwen3_reranker: Path, sentence_transformers: ModuleType, transformers: ModuleType
) -> None:
    """Qwen3ForSequenceClassification: each row's score read at its last token that is not padding, the batch
    padded on the right here and on the left by sentence-transformers."""
    import torch

    from packrt.models.classifier import DecoderClassifier

    expected = sentence_transformers.CrossEncoder(str(qwen3_reranker), device="cpu").predict(WORD_PAIRS)
    encoder = CrossEncoder.from_pretrained(qwen3_reranker)
    assert isinstance(encoder.model, DecoderClassifier)
    np.testing.assert_allclose(encoder.predict(WORD_PAIRS, batch_size=4), expected, atol=1e-5)
    reference = transformers.Qwen3ForSequenceClassification.from_pretrained(str(qwen3_reranker)).eval()
    ids = np.asarray([[5, 9, 2, 17, 1, 0, 0], [0, 0, 3, 4, 2, 8, 1]], dtype=np.int64)  # right- and left-padded
    with torch.no_grad():
        logits = reference(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy((ids != 0) * 1)).logits
    got = encoder.model(packrt.from_numpy(ids), packrt.from_numpy((ids != 0).astype(np.int64))).numpy()
    np.testing.assert_allclose(got, logits.numpy(), atol=1e-5)
    assert describe(qwen3_reranker).head == "sequence-classification"


def test_a_cross_encoder_modules_json_that_is_no_list_is_refused_naming_it(
    plain: dict[str, Path], tmp_path: Path
) -> None:
    directory = tmp_path / "ce"
    shutil.copytree(plain["bert-1"], directory)
    (directory / "modules.json").write_text(json.dumps({"0": "Transformer"}))
    (directory / "config_sentence_transformers.json").write_text(json.dumps({"model_type": "CrossEncoder"}))
    with pytest.raises(CheckpointError, match=r"modules\.json' must hold a JSON list of modules"):
        CrossEncoder.from_pretrained(directory)


@pytest.mark.parametrize("name", ["bert-1", "xlm-roberta-3", "modernbert-1", "qwen3"])
def test_a_bf16_classifier_is_no_farther_from_fp32_than_transformers_bf16(
    plain: dict[str, Path], qwen3_reranker: Path, transformers: ModuleType, tmp_path: Path, name: str
) -> None:
    """A classifier saved in bf16 gives logits no farther (mean absolute error over padded batches) from the fp32
    model's than transformers' own bf16 run gives."""
    import torch

    source = qwen3_reranker if name == "qwen3" else plain[name]
    exact = transformers.AutoModelForSequenceClassification.from_pretrained(str(source)).eval()
    half = transformers.AutoModelForSequenceClassification.from_pretrained(str(source)).eval().to(torch.bfloat16)
    half.save_pretrained(str(tmp_path / "bf16"))
    model = from_pretrained(tmp_path / "bf16")
    assert {p.dtype for p in model.parameters()} == {packrt.bfloat16}
    rng = np.random.default_rng(0)
    theirs, ours = [], []
    for _ in range(4):
        ids = rng.integers(5, 120, (3, 12)).astype(np.int64)
        mask = np.ones_like(ids)
        mask[1, 8:] = 0
        ids[mask == 0] = 0  # the pad id of every model here
        with torch.no_grad():
            batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
            reference = exact(**batch).logits.float().numpy()
            theirs.append(np.abs(half(**batch).logits.float().numpy() - reference))
        got = model(packrt.from_numpy(ids), packrt.from_numpy(mask)).to(packrt.float32).numpy()
        ours.append(np.abs(got - reference))
    ours_mean, theirs_mean = np.concatenate(ours).mean(), np.concatenate(theirs).mean()
    # a few logits per batch: independent roundings move the ratio by about +-0.05 (measured 1.05 for modernbert,
    # whose module road rounds each step in bf16 as transformers does; below 1 for the others)
    assert ours_mean <= 1.1 * theirs_mean, (
        f"{name}: bf16 mean abs error {ours_mean:.3e} against transformers' {theirs_mean:.3e}"
    )
