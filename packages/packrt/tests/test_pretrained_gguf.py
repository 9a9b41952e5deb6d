"""GGUF files (llama.cpp's format) load with one from_pretrained call and compute what transformers computes.

Tiny random transformers models are written here as GGUF files laid out the way llama.cpp's converter
lays them out (its names, its metadata keys, a llama model's query/key rows permuted into its rotary
order), in each GGML type packrt reads. Served by packrt, the F32 file must give the original model's
logits within 1e-4 (which fails if the permutation is not undone), and every type must give what
transformers' own GGUF loading gives. Each refusal (architecture, quant type, rope scaling, shapes,
names) names what it found and lists what is supported.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from gguf_files import assert_logits_match_transformers_gguf, gguf_writer, permute_rows, write_gguf
from peers import (
    VOCAB,
    assert_greedy_matches,
    assert_greedy_matches_but_near_ties,
    logits,
    max_logits_diff,
    tiny_model,
)

import packrt
import packrt_io
from packrt import nn
from packrt.errors import CheckpointError
from packrt.models import UnsupportedModelError, from_pretrained, pretrained
from packrt.models import gguf as gguf_models
from packrt.models.config_schema import ConfigError
from packrt.models.gguf import from_gguf, supported_architectures, unpermute_rows
from packrt.models.gguf_tokenizer import load_tokenizer
from packrt_kernels_cpu import settings as kernel_settings

SMALL = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
}
# the K-quants (which gguf cannot quantise to) are checked block by block in packrt-io
KINDS = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]


@pytest.fixture(scope="module")
def models(transformers: ModuleType, torch: ModuleType) -> dict[str, Any]:
    """A tiny llama (untied head) and a tiny qwen2 (tied, q/k/v biases), random and wide-initialised."""
    torch.manual_seed(0)
    llama = tiny_model(transformers, "LlamaConfig", "LlamaForCausalLM", **SMALL)
    qwen2 = tiny_model(transformers, "Qwen2Config", "Qwen2ForCausalLM", **SMALL, tie_word_embeddings=True)
    return {"llama": llama, "qwen2": qwen2}


def _ids(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (2, 9)).astype(np.int64)


def test_the_supported_architectures_are_llama_qwen2_qwen3_gemma3_and_phi3() -> None:
    assert supported_architectures() == ("llama", "qwen2", "qwen3", "gemma3", "phi3")


def test_unpermuting_inverts_llama_cpp_rotary_row_order() -> None:
    rows = np.arange(48, dtype=np.float32).reshape(24, 2)
    np.testing.assert_array_equal(unpermute_rows(permute_rows(rows, 3), 3), rows)
    assert not np.array_equal(permute_rows(rows, 3), rows)


@pytest.mark.parametrize("residency", ["borrowed", "packed"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_an_f32_gguf_gives_the_original_models_logits_within_1e_4(
    gguf: ModuleType, torch: ModuleType, models: dict[str, Any], tmp_path: Path, arch: str, residency: str
) -> None:
    path = write_gguf(gguf, models[arch], tmp_path / f"{arch}.gguf")
    model = from_pretrained(path, weight_residency=residency)
    assert not model.training
    ids = _ids()
    diff = max_logits_diff(torch, model, models[arch], ids)
    assert diff <= 1e-4, f"{arch} GGUF under {residency}: max abs logits diff {diff:.2e} against the original"
    assert_greedy_matches(torch, model, models[arch], ids, 8)


def test_a_llama_3_file_with_rope_freqs_gives_the_logits_of_the_model_it_was_written_from(
    gguf: ModuleType, torch: ModuleType, transformers: ModuleType, tmp_path: Path
) -> None:
    """Llama 3.x files carry their rope scaling as ``rope_freqs.weight`` (one divisor per rotary pair), not as
    metadata: dropping it moves the logits (2.2 on a real file), so it is applied, over prompts longer than the
    pretrained context the scaling blends around."""
    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0}
    rope |= {"high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    torch.manual_seed(3)
    original = tiny_model(transformers, "LlamaConfig", "LlamaForCausalLM", **SMALL, rope_parameters=rope)
    path = write_gguf(gguf, original, tmp_path / "llama3.gguf")
    assert "rope_freqs.weight" in packrt_io.open_gguf(path).tensors
    model = from_pretrained(path)
    ids = np.random.default_rng(4).integers(0, VOCAB, (2, 24)).astype(np.int64)
    diff = max_logits_diff(torch, model, original, ids)
    assert diff <= 1e-4, f"llama3-scaled GGUF: max abs logits diff {diff:.2e} against the original"
    assert_greedy_matches(torch, model, original, ids[:, :9], 16)
    damaged = tmp_path / "damaged.gguf"
    data = bytearray(path.read_bytes())
    freqs = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "rope_freqs.weight")
    data[freqs.data_offset : freqs.data_offset + 4] = np.float32(0.0).tobytes()
    damaged.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"damaged.gguf': tensor 'rope_freqs.weight' must hold positive finite"):
        from_pretrained(damaged)


@pytest.mark.parametrize("kind", KINDS)
def test_every_ggml_type_gives_transformers_gguf_logits(
    gguf: ModuleType, torch: ModuleType, gguf_reference: Any, models: dict[str, Any], tmp_path: Path, kind: str
) -> None:
    path = write_gguf(gguf, models["llama"], tmp_path / f"{kind}.gguf", kind)
    assert_logits_match_transformers_gguf(torch, path, gguf_reference(path), _ids(1), kind)


@pytest.mark.parametrize("residency", ["packed", "borrowed"])
@pytest.mark.parametrize("kind", [k for k in KINDS if k.startswith("Q")])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_quantised_linears_serve_their_blocks_and_give_transformers_gguf_logits(
    gguf: ModuleType,
    torch: ModuleType,
    gguf_reference: Any,
    models: dict[str, Any],
    tmp_path: Path,
    arch: str,
    kind: str,
    residency: str,
) -> None:
    """Without a dtype every quantised linear keeps its blocks (borrowed: the file's pages) and multiplies from
    them, a head tied to the embedding included (qwen2: the head reads the same tensor's blocks); the embedding,
    a lookup, dequantises the rows it picks. Prompts and decode steps quantise the activations to int8 per 32
    values as llama.cpp does, so their logits are within a few percent of transformers' float32 ones, and where
    the greedy tokens part, transformers' own best two were that close; with ``PACKRT_BLOCK_PREFILL=float`` a
    prompt's rows stay float32 against dequantised panels, within 1e-4 of transformers'."""
    path = write_gguf(gguf, models[arch], tmp_path / f"{kind}.gguf", kind)
    model = from_pretrained(path, weight_residency=residency)
    blocks = [m for m in model.modules() if isinstance(m, nn.BlockQuantizedLinear)]
    assert len(blocks) == 7 * SMALL["num_hidden_layers"] + 1 and {m.block_format for m in blocks} == {kind}
    assert isinstance(model.embed, nn.BlockQuantizedEmbedding) and model.embed.block_format == kind
    assert model.lm_head.weight is not model.embed.weight
    reference = gguf_reference(path)
    ids = _ids(1)
    with kernel_settings.override(block_prefill="float"):
        diff = max_logits_diff(torch, model, reference, ids)  # a prompt: many rows, the float panels
    assert diff <= 1e-4, f"{kind} blocks under {residency}: max abs logits diff {diff:.2e} against transformers"
    scale = float(np.abs(logits(torch, reference, ids)).max())
    # int8 activations round each value by up to half of its block's max / 127; on these wide-initialised
    # models that moves a logit by up to ~5% of the largest, ~10% at worst over a prompt's 18 rows (a wrong scale
    # or offset moves it by all of it)
    for rows, name, bound in ((ids, "a prompt", 0.12), (ids[:1, :1], "one decode row", 0.08)):
        step = max_logits_diff(torch, model, reference, rows)
        assert step <= bound * scale, f"{kind} blocks, {name}: logits {step:.2e} from transformers' (of {scale:.1f})"
    assert_greedy_matches_but_near_ties(torch, model, reference, ids, 8, margin=0.08 * scale)
    if residency == "borrowed":
        rows = {row.path: row for row in nn.memory_report(model)}
        assert rows["layers.1.mlp.down"].mapped > 0 and rows["layers.1.mlp.down"].converted == 0


def test_a_head_tied_to_a_quantised_embedding_packs_no_second_copy_of_the_table(
    gguf: ModuleType, models: dict[str, Any], tmp_path: Path
) -> None:
    model = from_pretrained(write_gguf(gguf, models["qwen2"], tmp_path / "tied.gguf", "Q8_0"))
    model(packrt.from_numpy(_ids(1)))  # packs every layer
    table = model.embed.weight.nbytes
    assert model.embed.resident_pack_bytes == table
    assert model.lm_head.resident_pack_bytes == 0, "the head multiplies the embedding's packed blocks"
    rows = {row.path: row for row in nn.memory_report(model)}
    assert rows["embed"].packed == table and rows["lm_head"].packed == 0


def test_stored_types_and_quantised_blocks_serve_as_stored_unless_a_dtype_is_asked(
    gguf: ModuleType, models: dict[str, Any], tmp_path: Path
) -> None:
    path = write_gguf(gguf, models["llama"], tmp_path / "f16.gguf", "F16")
    as_stored = from_pretrained(path, weight_residency="borrowed")
    assert as_stored.layers[0].mlp.up.weight.dtype is packrt.float16
    assert as_stored.layers[0].attention_norm.weight.dtype is packrt.float32
    cast = from_pretrained(path, dtype=packrt.bfloat16)
    assert cast.layers[0].mlp.up.weight.dtype is packrt.bfloat16
    q8 = write_gguf(gguf, models["llama"], tmp_path / "q8.gguf", "Q8_0")
    blocks = from_pretrained(q8).layers[0].mlp.up
    assert isinstance(blocks, nn.BlockQuantizedLinear) and blocks.block_format == "Q8_0"
    assert blocks.weight.dtype is packrt.uint8 and tuple(blocks.weight.shape) == (128, 64 // 32 * 34)
    dequantised = from_pretrained(q8, dtype=packrt.float32).layers[0].mlp.up
    assert type(dequantised) is nn.Linear and dequantised.weight.dtype is packrt.float32


def test_memory_report_shows_mapped_views_blocks_included_and_converted_copies(
    gguf: ModuleType, models: dict[str, Any], tmp_path: Path
) -> None:
    path = write_gguf(gguf, models["llama"], tmp_path / "mixed.gguf", "Q8_0")
    report = nn.memory_report(from_pretrained(path, weight_residency="borrowed"))
    rows = {row.path: row for row in report}
    assert rows["layers.0.attention_norm"].mapped > 0 and rows["layers.0.attention_norm"].converted == 0
    # the Q8_0 blocks of a linear and of the token embedding are served from the file's pages; llama's query and
    # key rows, stored permuted, are the only copies
    for path_name in ("layers.0.mlp.up", "embed", "lm_head"):
        assert rows[path_name].mapped > 0 and rows[path_name].converted == 0, path_name
    assert any("rows un-permuted" in origin for origin in rows["layers.0.attention.q_proj"].origins)
    assert report.files() == (str(path),)
    text = str(report)
    assert "converted:" in text and "Q8_0 rows un-permuted" in text and "dequantised" not in text
    dequantised = nn.memory_report(from_pretrained(path, weight_residency="borrowed", dtype=packrt.float32))
    assert "Q8_0 dequantised to float32 from mixed.gguf" in {o for row in dequantised for o in row.origins}
    f32 = nn.memory_report(from_pretrained(write_gguf(gguf, models["qwen2"], tmp_path / "f.gguf")))
    assert f32.converted() == 0, "an F32 qwen2 file (no permuted rows) is served from its pages alone"


def test_a_rewritten_file_is_refused_before_the_next_call(
    gguf: ModuleType, models: dict[str, Any], tmp_path: Path
) -> None:
    path = write_gguf(gguf, models["qwen2"], tmp_path / "m.gguf")
    model = from_pretrained(path, weight_residency="borrowed")
    ids = packrt.from_numpy(_ids())
    model(ids)
    with open(path, "r+b") as handle:
        handle.seek(-4, 2)
        handle.write(b"\0\0\0\0")
    with pytest.raises(CheckpointError, match=r"m.gguf'.*changed: it was modified in place"):
        model(ids)


def _phi2(gguf: ModuleType, models: dict[str, Any], path: Path) -> None:
    with gguf_writer(gguf, path, "phi2") as writer:
        writer.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))


def _mxfp4(gguf: ModuleType, models: dict[str, Any], path: Path) -> None:
    write_gguf(gguf, models["llama"], path, "MXFP4")


def _yarn(gguf: ModuleType, models: dict[str, Any], path: Path) -> None:
    write_gguf(gguf, models["llama"], path, rope_scaling_type=gguf.RopeScalingType.YARN)


def _set_uint32(path: Path, key: str, value: int) -> None:
    """The uint32 metadata value ``key`` of the GGUF file ``path`` rewritten in place to ``value``."""
    data = bytearray(path.read_bytes())
    at = data.index(key.encode()) + len(key) + 4  # the uint32 value follows its type tag
    data[at : at + 4] = value.to_bytes(4, "little")
    path.write_bytes(bytes(data))


def _feed_forward_length_96(gguf: ModuleType, models: dict[str, Any], path: Path) -> None:
    write_gguf(gguf, models["llama"], path)
    _set_uint32(path, "llama.feed_forward_length", 96)


def _no_head_count(gguf: ModuleType, models: dict[str, Any], path: Path) -> None:
    with gguf_writer(gguf, path, "llama") as writer:
        writer.add_uint32("llama.block_count", 1)
        writer.add_uint32("llama.embedding_length", 32)
        writer.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))


# (writes the file, the error, what its message says): each names what the file holds and what packrt reads
REFUSED = [
    pytest.param(
        _phi2,
        UnsupportedModelError,
        r"general.architecture 'phi2' .*supported GGUF architectures: llama",
        id="an-unknown-architecture-listing-the-supported",
    ),
    pytest.param(
        _mxfp4,
        CheckpointError,
        r"stored as MXFP4, which packrt does not read; supported: F32, F16, BF16",
        id="an-unknown-quant-type",
    ),
    pytest.param(
        _yarn,
        UnsupportedModelError,
        r"packrt does not implement llama\.rope\.scaling\.type 'yarn' yet",
        id="an-unimplemented-rope-scaling",
    ),
    pytest.param(
        _feed_forward_length_96,
        CheckpointError,
        r"tensor 'blk.0.ffn_gate.weight' has shape \(128, 64\), but .*\(96, 64\)",
        id="metadata-that-disagrees-with-the-tensors-naming-the-tensor",
    ),
    pytest.param(
        _no_head_count,
        CheckpointError,
        r"metadata 'llama\.attention\.head_count' \(packrt's 'num_attention_heads'\) is missing.*; the file's metadata",
        id="missing-metadata-named-by-its-gguf-key",
    ),
]


@pytest.mark.parametrize(("write", "error", "match"), REFUSED)
def test_a_file_packrt_cannot_serve_is_refused_naming_what_it_found(
    gguf: ModuleType,
    models: dict[str, Any],
    tmp_path: Path,
    write: Callable[[ModuleType, dict[str, Any], Path], None],
    error: type[Exception],
    match: str,
) -> None:
    path = tmp_path / "m.gguf"
    write(gguf, models, path)
    with pytest.raises(error, match=match):
        from_pretrained(path)


@pytest.mark.parametrize("load", [from_pretrained, from_gguf], ids=["from_pretrained", "from_gguf"])
def test_metadata_asking_for_more_layers_than_the_file_holds_is_refused_before_any_module_is_declared(
    gguf: ModuleType,
    transformers: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    load: Callable[..., nn.Module],
) -> None:
    one_layer = tiny_model(transformers, "LlamaConfig", "LlamaForCausalLM", **{**SMALL, "num_hidden_layers": 1})
    path = write_gguf(gguf, one_layer, tmp_path / "m.gguf")
    _set_uint32(path, "llama.block_count", 20_000)
    declared: list[str] = []
    monkeypatch.setattr(packrt, "meta_init", lambda: pytest.fail("a model was declared before the capacity check"))
    monkeypatch.setattr(nn.Module, "__init__", lambda module, *args, **kwargs: declared.append(type(module).__name__))
    with pytest.raises(
        ConfigError,
        match=r"GGUF file '[^']*m\.gguf': metadata 'llama\.block_count' \(packrt's 'num_hidden_layers'\) is 20000, "
        r"but the weight files \('[^']*m\.gguf'\) hold tensors for 1 layer\(s\); the file's metadata is incomplete",
    ):
        load(path)
    assert declared == [], f"modules {declared[:3]} were built before the file's layer count was checked"


def test_a_gguf_load_checks_the_weight_residency_once(
    gguf: ModuleType, models: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_gguf(gguf, models["qwen2"], tmp_path / "m.gguf")
    checked: list[str] = []

    def count(residency: str | None, where: str) -> None:
        checked.append(where)

    for module in (pretrained, gguf_models):  # every loader that names check_residency
        monkeypatch.setattr(module, "check_residency", count)
    from_pretrained(path, weight_residency="borrowed")
    assert checked == ["from_pretrained"]
    checked.clear()
    from_gguf(path, weight_residency="borrowed")
    assert checked == ["from_gguf"]


def test_the_tokenizer_json_beside_a_gguf_file_is_preferred(
    gguf: ModuleType, models: dict[str, Any], tmp_path: Path
) -> None:
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tokenizer_models

    path = write_gguf(gguf, models["qwen2"], tmp_path / "m.gguf")
    with pytest.raises(CheckpointError, match=r"tokenizer.ggml.model None is not one packrt builds"):
        load_tokenizer(path)
    beside = Tokenizer(tokenizer_models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    beside.pre_tokenizer = pre_tokenizers.Whitespace()
    beside.save(str(tmp_path / "tokenizer.json"))
    assert load_tokenizer(path).encode("b a c").ids == [1, 0, 2]


def test_a_byte_level_bpe_is_built_from_the_metadata(gguf: ModuleType, models: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "tok.gguf"
    with gguf_writer(gguf, path, "llama") as writer:
        tokens = ["<|endoftext|>", "h", "e", "l", "o", "Ġ", "w", "he", "ll", "hell", "hello", "Ġw"]
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("smollm")
        writer.add_token_list(tokens)
        writer.add_token_types([3] + [1] * (len(tokens) - 1))
        writer.add_token_merges(["h e", "l l", "he ll", "hell o", "Ġ w"])
        writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 32), np.float32))
    tokenizer = load_tokenizer(path)
    encoded = tokenizer.encode("hello<|endoftext|> w")
    assert encoded.tokens == ["hello", "<|endoftext|>", "Ġw"]
    assert encoded.ids == [10, 0, 11]
    assert tokenizer.decode(encoded.ids, skip_special_tokens=False) == "hello<|endoftext|> w"
    writer_bad = tmp_path / "sp.gguf"
    with gguf_writer(gguf, writer_bad, "llama") as w:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("deepseek-coder")
        w.add_token_list(tokens)
        w.add_tensor("token_embd.weight", np.zeros((2, 32), np.float32))
    with pytest.raises(CheckpointError, match=r"tokenizer.ggml.pre 'deepseek-coder' is a split packrt does not know"):
        load_tokenizer(writer_bad)


def test_merges_of_tokens_the_list_does_not_hold_are_a_checkpoint_error_naming_the_key(
    gguf: ModuleType, tmp_path: Path
) -> None:
    """The tokenizers library raises a bare Exception there; the file and the key are named instead."""
    path = tmp_path / "merges.gguf"
    with gguf_writer(gguf, path, "llama") as writer:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("smollm")
        writer.add_token_list(["a", "b"])
        writer.add_token_merges(["a c"])
        writer.add_tensor("token_embd.weight", np.zeros((2, 32), np.float32))
    with pytest.raises(CheckpointError, match=r"merges\.gguf': tokenizer.ggml.merges does not fit tokenizer.ggml"):
        load_tokenizer(path)
