"""Directories sentence-transformers saved itself, one per module kind and pooling mode (with and without Dense,
Normalize and prompts), give its vectors: ``SentenceEncoder.encode`` against ``SentenceTransformer.encode`` on
the same padded batch, to 1e-5, keyword for keyword (``prompt_name``, ``prompt``, the default prompt).

Each directory is a random 2-layer, 32-wide BERT with all-MiniLM-L6-v2's tokenizer, put together and saved
by sentence-transformers (``SentenceTransformer(modules=[...]).save``), then loaded back by it for the
expected vectors, so the files are exactly what it writes.
"""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from packrt.errors import CheckpointError
from packrt.models import PromptNameError, SentenceEncoder, UnsupportedModelError

TEXTS = ["A man is eating food.", "The sky is blue today.", "", "serving models on small machines, quickly and well"]
PROMPTS = {"query": "query: ", "document": "passage: "}


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory, transformers: ModuleType, minilm_dir: Path) -> Path:
    """A random 32-wide BERT directory with MiniLM's tokenizer files (what a Transformer module loads)."""
    import torch

    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("tiny-bert")
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    transformers.BertModel(config).save_pretrained(str(directory))
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (minilm_dir / name).is_file():
            shutil.copy(minilm_dir / name, directory / name)
    return directory


def _saved(st: ModuleType, bert: Path, directory: Path, *steps: str, **options: Any) -> Path:
    """A sentence-transformers directory saved by sentence-transformers: Transformer, Pooling (``pooling_mode``,
    ``include_prompt``), then ``steps`` ('tanh' / 'identity' / 'gelu': a Dense step of that activation, 8
    narrower than its input; 'normalize'), with ``prompts`` / ``default_prompt_name``."""
    import torch

    torch.manual_seed(1)
    modules = importlib.import_module("sentence_transformers.sentence_transformer.modules")  # 6.x's home of them
    width = 32
    pooling = modules.Pooling(
        width, pooling_mode=options.get("pooling_mode", "mean"), include_prompt=options.get("include_prompt", True)
    )
    chain: list[Any] = [modules.Transformer(str(bert), max_seq_length=64), pooling]
    width = pooling.get_embedding_dimension()
    activations = {"tanh": torch.nn.Tanh(), "identity": torch.nn.Identity(), "gelu": torch.nn.GELU()}
    for step in steps:
        if step == "normalize":
            chain.append(modules.Normalize())
        else:
            chain.append(modules.Dense(width, width - 8, activation_function=activations[step]))
            width -= 8
    model = st.SentenceTransformer(
        modules=chain, prompts=options.get("prompts"), default_prompt_name=options.get("default_prompt_name")
    )
    model.save(str(directory))
    return directory


def _both(st: ModuleType, directory: Path, **keywords: Any) -> tuple[np.ndarray, np.ndarray]:
    """(packrt's, sentence-transformers') vectors of TEXTS from ``directory``, with the same encode keywords."""
    expected = st.SentenceTransformer(str(directory), device="cpu").encode(TEXTS, convert_to_numpy=True, **keywords)
    got = SentenceEncoder.from_pretrained(directory).encode(TEXTS, batch_size=3, **keywords)  # padded batches
    return got, np.asarray(expected, dtype=np.float32)


@pytest.mark.parametrize(
    "mode",
    ["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken", ["weightedmean", "lasttoken", "cls"]],
)
def test_every_pooling_mode_gives_sentence_transformers_vectors(
    sentence_transformers: ModuleType, tiny_bert: Path, tmp_path: Path, mode: Any
) -> None:
    directory = _saved(sentence_transformers, tiny_bert, tmp_path / "st", pooling_mode=mode)
    got, expected = _both(sentence_transformers, directory)
    assert got.shape == expected.shape == (len(TEXTS), 32 * (len(mode) if isinstance(mode, list) else 1))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "steps", [("tanh", "normalize"), ("identity",), ("gelu", "tanh", "normalize")], ids=["tanh", "identity", "two"]
)
def test_dense_steps_project_the_pooled_vector_as_sentence_transformers_does(
    sentence_transformers: ModuleType, tiny_bert: Path, tmp_path: Path, steps: tuple[str, ...]
) -> None:
    directory = _saved(sentence_transformers, tiny_bert, tmp_path / "st", *steps, pooling_mode="weightedmean")
    got, expected = _both(sentence_transformers, directory)
    width = 32 - 8 * sum(step != "normalize" for step in steps)
    assert got.shape == (len(TEXTS), width) and SentenceEncoder.from_pretrained(directory).dimension == width
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    norms = np.linalg.norm(got, axis=-1)
    assert np.allclose(norms, 1.0, atol=1e-5) == ("normalize" in steps)  # normalized only with the step


@pytest.mark.parametrize("include_prompt", [True, False])
@pytest.mark.parametrize(
    "keywords", [{}, {"prompt_name": "document"}, {"prompt": "Represent this: "}], ids=["default", "named", "given"]
)
def test_prompts_are_put_before_each_text_as_sentence_transformers_puts_them(
    sentence_transformers: ModuleType, tiny_bert: Path, tmp_path: Path, keywords: dict[str, str], include_prompt: bool
) -> None:
    directory = _saved(
        sentence_transformers,
        tiny_bert,
        tmp_path / "st",
        "normalize",
        pooling_mode="mean",
        include_prompt=include_prompt,
        prompts=PROMPTS,
        default_prompt_name="query",
    )
    got, expected = _both(sentence_transformers, directory, **keywords)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    without = SentenceEncoder.from_pretrained(directory).encode(TEXTS, prompt="")
    assert not np.allclose(got, without, atol=1e-4)  # the prompt changed the vectors: it was applied


def test_a_prompt_name_the_directory_does_not_define_is_refused_with_the_names_it_has(
    sentence_transformers: ModuleType, tiny_bert: Path, tmp_path: Path
) -> None:
    directory = _saved(sentence_transformers, tiny_bert, tmp_path / "st", prompts=PROMPTS)
    encoder = SentenceEncoder.from_pretrained(directory)
    with pytest.raises(PromptNameError, match=r"prompt_name 'search' is not among this model's prompts \['document'"):
        encoder.encode(TEXTS, prompt_name="search")
    with pytest.raises(ValueError, match="pass one of them"):  # also the builtin a Python user catches
        encoder.encode(TEXTS, prompt_name="search")


def test_a_dense_activation_packrt_does_not_apply_is_refused_by_name(
    sentence_transformers: ModuleType, tiny_bert: Path, tmp_path: Path
) -> None:
    directory = _saved(sentence_transformers, tiny_bert, tmp_path / "st", "tanh")
    config = directory / "2_Dense" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "activation_function": "torch.nn.Softplus"}))
    with pytest.raises(
        UnsupportedModelError, match=r"activation_function 'torch.nn.Softplus' is not one SentenceEncoder"
    ):
        SentenceEncoder.from_pretrained(directory)


def test_dense_weights_that_do_not_fit_its_config_are_refused_naming_the_tensor(
    sentence_transformers: ModuleType, tiny_bert: Path, tmp_path: Path
) -> None:
    directory = _saved(sentence_transformers, tiny_bert, tmp_path / "st", "tanh")
    config = directory / "2_Dense" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "out_features": 20}))
    with pytest.raises(CheckpointError, match=r"tensor 'linear.weight' is shape \(24, 32\), expected shape \(20, 32\)"):
        SentenceEncoder.from_pretrained(directory)


def test_a_dense_step_saved_as_a_pickle_only_is_refused_with_the_fix(
    sentence_transformers: ModuleType, tiny_bert: Path, tmp_path: Path
) -> None:
    directory = _saved(sentence_transformers, tiny_bert, tmp_path / "st", "tanh")
    (directory / "2_Dense" / "model.safetensors").rename(directory / "2_Dense" / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"read from model.safetensors; save it again with sentence-transformers"):
        SentenceEncoder.from_pretrained(directory)


def test_packrt_serve_gives_the_default_prompt_and_dense_vectors_sentence_transformers_gives(
    sentence_transformers: ModuleType, tiny_bert: Path, tmp_path: Path
) -> None:
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")
    import httpx2 as httpx
    from serving import running

    directory = _saved(
        sentence_transformers,
        tiny_bert,
        tmp_path / "st",
        "tanh",
        "normalize",
        prompts=PROMPTS,
        default_prompt_name="query",
    )
    expected = sentence_transformers.SentenceTransformer(str(directory), device="cpu").encode(TEXTS)
    with running(directory) as server:
        answer = httpx.post(f"{server.base}/v1/embeddings", json={"input": TEXTS}, timeout=120)
    assert answer.status_code == 200, answer.text
    got = np.asarray([item["embedding"] for item in answer.json()["data"]], dtype=np.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory, transformers: ModuleType) -> Path:
    """A random 2-layer Qwen3ForCausalLM (tied head, as Qwen3-Embedding-0.6B) with a word-level tokenizer that
    appends an end token and pads on the left, as Qwen3-Embedding's does."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("tiny-qwen3")
    config = transformers.Qwen3Config(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    transformers.Qwen3ForCausalLM(config).save_pretrained(str(directory))
    vocab = {"<pad>": 0, "<end>": 1, **{f"w{i}": i for i in range(2, 128)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(single="$A <end>", special_tokens=[("<end>", 1)])
    tokenizer.save(str(directory / "tokenizer.json"))
    settings = {"eos_token": "<end>", "pad_token": "<pad>", "padding_side": "left"}
    (directory / "tokenizer_config.json").write_text(
        json.dumps(settings | {"tokenizer_class": "PreTrainedTokenizerFast"})
    )
    return directory


DECODER_TEXTS = ["w5 w9 w17", "w3", "w20 w21 w22 w23 w24 w25 w26", "w7 w7"]


@pytest.mark.parametrize("mode", ["lasttoken", "mean"])
def test_a_decoder_embedding_model_gives_sentence_transformers_vectors(
    sentence_transformers: ModuleType, tiny_qwen3: Path, tmp_path: Path, mode: str
) -> None:
    """Qwen3-Embedding's shape: a qwen3 base model saved by sentence-transformers (config.json says
    Qwen3Model, no head), last-token pooling, Normalize, an instruction prompt; its batches padded on the left
    there, on the right here (rotary attention depends on relative positions only)."""
    modules = importlib.import_module("sentence_transformers.sentence_transformer.modules")
    chain = [modules.Transformer(str(tiny_qwen3)), modules.Pooling(32, pooling_mode=mode), modules.Normalize()]
    saved = sentence_transformers.SentenceTransformer(modules=chain, prompts={"query": "w40 w41 w42 "})
    saved.save(str(tmp_path / "st"))
    assert json.loads((tmp_path / "st" / "config.json").read_text())["architectures"] == ["Qwen3Model"]
    reference = sentence_transformers.SentenceTransformer(str(tmp_path / "st"), device="cpu")
    encoder = SentenceEncoder.from_pretrained(tmp_path / "st")
    for keywords in ({}, {"prompt_name": "query"}):
        expected = reference.encode(DECODER_TEXTS, convert_to_numpy=True, **keywords)
        got = encoder.encode(DECODER_TEXTS, batch_size=4, **keywords)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert encoder.dimension == 32


def test_a_decoder_base_model_alone_is_refused_as_a_causal_lm(
    sentence_transformers: ModuleType, tiny_qwen3: Path, tmp_path: Path
) -> None:
    from packrt.models import describe

    modules = importlib.import_module("sentence_transformers.sentence_transformer.modules")
    chain = [modules.Transformer(str(tiny_qwen3)), modules.Pooling(32, pooling_mode="lasttoken")]
    sentence_transformers.SentenceTransformer(modules=chain).save(str(tmp_path / "st"))
    (tmp_path / "st" / "modules.json").unlink()  # the base model's directory, without the pipeline
    with pytest.raises(UnsupportedModelError, match=r"architecture 'Qwen3Model' is the qwen3 base model, without"):
        describe(tmp_path / "st")


def test_packrt_serve_answers_embeddings_for_a_decoder_embedding_model(
    sentence_transformers: ModuleType, tiny_qwen3: Path, tmp_path: Path
) -> None:
    pytest.importorskip("fastapi", reason="packrt serve needs the serve extra (pip install 'packrt[serve]')")
    import httpx2 as httpx
    from serving import running

    modules = importlib.import_module("sentence_transformers.sentence_transformer.modules")
    chain = [modules.Transformer(str(tiny_qwen3)), modules.Pooling(32, pooling_mode="lasttoken"), modules.Normalize()]
    sentence_transformers.SentenceTransformer(modules=chain).save(str(tmp_path / "st"))
    expected = sentence_transformers.SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(DECODER_TEXTS)
    with running(tmp_path / "st") as server:
        answer = httpx.post(f"{server.base}/v1/embeddings", json={"input": DECODER_TEXTS}, timeout=120)
    assert answer.status_code == 200, answer.text  # an embeddings endpoint, not completions
    got = np.asarray([item["embedding"] for item in answer.json()["data"]], dtype=np.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _gemma_fields(transformers: ModuleType) -> Any:
    """EmbeddingGemma's shape at 32 wide: Gemma 3's text model attending in both directions, a local layer
    (window 6: three positions each way, as transformers reads it) and a global one."""
    return transformers.Gemma3TextConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
        max_position_embeddings=128,
        sliding_window=6,
        layer_types=["sliding_attention", "full_attention"],
        use_bidirectional_attention=True,
        query_pre_attn_scalar=8,
        initializer_range=0.2,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
    )


@pytest.fixture(scope="module")
def tiny_embeddinggemma(tmp_path_factory: pytest.TempPathFactory, transformers: ModuleType) -> Path:
    """A random bidirectional Gemma3TextModel (EmbeddingGemma's base model) with a word-level tokenizer that puts
    a start and an end token around each text."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("tiny-embeddinggemma")
    transformers.Gemma3TextModel(_gemma_fields(transformers)).save_pretrained(str(directory))
    vocab = {"<pad>": 0, "<end>": 1, "<start>": 2, **{f"w{i}": i for i in range(3, 128)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<start> $A <end>", special_tokens=[("<start>", 2), ("<end>", 1)]
    )
    tokenizer.save(str(directory / "tokenizer.json"))
    settings = {"bos_token": "<start>", "eos_token": "<end>", "pad_token": "<pad>", "padding_side": "right"}
    (directory / "tokenizer_config.json").write_text(
        json.dumps(settings | {"tokenizer_class": "PreTrainedTokenizerFast"})
    )
    return directory


GEMMA_TEXTS = ["w5 w9 w17", "w3", "w20 w21 w22 w23 w24 w25 w26 w27 w28 w29 w30", "w7 w7 w8 w9 w10"]


def test_embeddinggemma_gives_sentence_transformers_vectors(
    sentence_transformers: ModuleType, tiny_embeddinggemma: Path, tmp_path: Path
) -> None:
    """EmbeddingGemma's pipeline: a bidirectional Gemma3TextModel, mean pooling, two Dense projections without
    bias, Normalize, and its query prompt; texts longer than the local window, padded batches."""
    import torch

    modules = importlib.import_module("sentence_transformers.sentence_transformer.modules")
    chain = [
        modules.Transformer(str(tiny_embeddinggemma)),
        modules.Pooling(32, pooling_mode="mean"),
        modules.Dense(32, 48, bias=False, activation_function=torch.nn.Identity()),
        modules.Dense(48, 32, bias=False, activation_function=torch.nn.Identity()),
        modules.Normalize(),
    ]
    saved = sentence_transformers.SentenceTransformer(modules=chain, prompts={"query": "w40 w41 "})
    saved.save(str(tmp_path / "st"))
    reference = sentence_transformers.SentenceTransformer(str(tmp_path / "st"), device="cpu")
    encoder = SentenceEncoder.from_pretrained(tmp_path / "st")
    for keywords in ({}, {"prompt_name": "query"}):
        expected = reference.encode(GEMMA_TEXTS, convert_to_numpy=True, **keywords)
        got = encoder.encode(GEMMA_TEXTS, batch_size=4, **keywords)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_bidirectional_gemma3_gives_transformers_logits_and_does_not_generate(
    transformers: ModuleType, tmp_path: Path
) -> None:
    import torch

    import packrt
    from packrt.models import from_pretrained

    torch.manual_seed(1)
    reference = transformers.Gemma3ForCausalLM(_gemma_fields(transformers)).eval()
    reference.save_pretrained(str(tmp_path))
    ids = torch.randint(3, 128, (2, 14))
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).logits.numpy()
    model = from_pretrained(tmp_path)
    got = model(packrt.from_numpy(ids.numpy()), packrt.from_numpy(mask.numpy())).numpy()
    np.testing.assert_allclose(got[mask.numpy() != 0], expected[mask.numpy() != 0], atol=1e-4)
    with pytest.raises(UnsupportedModelError, match=r"attends in both directions .* no next token to generate"):
        model.generate(packrt.from_numpy(ids.numpy()[:1]), 4)


def test_a_modernbert_embedding_model_gives_sentence_transformers_vectors(
    sentence_transformers: ModuleType, transformers: ModuleType, minilm_dir: Path, tmp_path: Path
) -> None:
    """gte-modernbert's shape: a ModernBertModel (global and local layers, rotary, no token types) under mean
    pooling and Normalize, with MiniLM's tokenizer; texts longer than the local window, padded batches."""
    import torch

    torch.manual_seed(2)
    base = tmp_path / "modernbert"
    config = transformers.ModernBertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=48,
        local_attention=4,
        pad_token_id=0,
    )
    transformers.ModernBertModel(config).save_pretrained(str(base))
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (minilm_dir / name).is_file():
            shutil.copy(minilm_dir / name, base / name)
    modules = importlib.import_module("sentence_transformers.sentence_transformer.modules")
    chain = [modules.Transformer(str(base)), modules.Pooling(32, pooling_mode="mean"), modules.Normalize()]
    sentence_transformers.SentenceTransformer(modules=chain).save(str(tmp_path / "st"))
    expected = sentence_transformers.SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(TEXTS)
    got = SentenceEncoder.from_pretrained(tmp_path / "st").encode(TEXTS, batch_size=3)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_bf16_bidirectional_gemma3_is_no_farther_from_fp32_than_transformers_bf16(
    transformers: ModuleType, tmp_path: Path
) -> None:
    """EmbeddingGemma's base model saved in bf16: its hidden states no farther (mean absolute error over the real
    tokens of padded batches) from the fp32 model's than transformers' own bf16 run."""
    import torch

    import packrt
    from packrt.models import from_pretrained

    torch.manual_seed(3)
    exact = transformers.Gemma3ForCausalLM(_gemma_fields(transformers)).eval()
    half = transformers.Gemma3ForCausalLM(_gemma_fields(transformers)).eval()
    half.load_state_dict(exact.state_dict())
    half = half.to(torch.bfloat16)
    half.save_pretrained(str(tmp_path))
    model = from_pretrained(tmp_path)
    rng = np.random.default_rng(0)
    theirs, ours = [], []
    for _ in range(4):
        ids = rng.integers(3, 128, (2, 16)).astype(np.int64)
        mask = np.ones_like(ids)
        mask[1, 11:] = 0
        keep = mask.astype(bool)
        with torch.no_grad():
            batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
            reference = exact.model(**batch).last_hidden_state.numpy()
            theirs.append(np.abs(half.model(**batch).last_hidden_state.float().numpy() - reference)[keep])
        got = model.hidden_states(packrt.from_numpy(ids), packrt.from_numpy(mask)).to(packrt.float32).numpy()
        ours.append(np.abs(got - reference)[keep])
    ours_mean, theirs_mean = np.concatenate(ours).mean(), np.concatenate(theirs).mean()
    assert ours_mean <= theirs_mean, f"bf16 mean abs error {ours_mean:.3e} against transformers' {theirs_mean:.3e}"
