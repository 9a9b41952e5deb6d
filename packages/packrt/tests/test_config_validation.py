"""from_pretrained checks config.json against its family's schema, and the files themselves, before building.

Each test is one rule, over the attack cases that break it: wrong types, values out of range, rope
dicts that lack a key, enum values nobody defines, settings packrt does not implement, sizes the
weight files cannot hold, files that are not regular files, JSON and tokenizer files that do not
parse, and weight dtypes the model cannot serve. Every refusal is a packrt error naming the file,
the field (or tensor) and the value, and saying what to do; nothing is built before it.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoints import random_weights, write_checkpoint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packrt
from packrt.errors import CheckpointError, PackrtError
from packrt.models import (
    SentenceEncoder,
    UnsupportedModelError,
    bert,
    from_pretrained,
    gemma3,
    gpt2,
    llama,
    phi3,
    qwen3,
)
from packrt.models.config_schema import SCHEMAS, ConfigError, validate
from packrt.models.gguf_tokenizer import read_tokenizer_json
from packrt.models.hfconfig import HFConfig
from packrt.models.kinds import FAMILIES
from packrt.models.pretrained import supported

SMALL = {"vocab_size": 50, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32}
CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16, **SMALL},
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 16, **SMALL},
    "bert": {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 16, **SMALL},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 16, "head_dim": 8, **SMALL},
    "gemma3": {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "hidden_size": 16,
        "head_dim": 8,
        "num_key_value_heads": 1,
        **SMALL,
    },
    "phi3": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 16, **SMALL},
    "gpt2": {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": 50,
        "n_embd": 16,
        "n_layer": 2,
        "n_head": 2,
        "n_positions": 32,
    },
}


def weights(family: str, dtype: Any = np.float32) -> dict[str, np.ndarray]:
    """Random weights of the family's small config, in transformers' names and layouts."""
    return random_weights(CONFIGS[family], dtype)


def write(
    directory: Path, family: str, config: dict[str, Any] | str, tensors: dict[str, np.ndarray] | None = None
) -> Path:
    """``config`` (perhaps a broken one) beside the family's small random weights (or ``tensors``)."""
    return write_checkpoint(directory, config, tensors, weights_of=CONFIGS[family])


def without(config: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k != key}


def test_each_family_from_the_attack_baseline_loads(tmp_path: Path) -> None:
    for family in CONFIGS:
        model = from_pretrained(write(tmp_path / family, family, CONFIGS[family]))
        assert model(packrt.zeros(1, 3, dtype=packrt.int64)).shape[:2] == (1, 3)


def test_every_model_type_packrt_builds_has_a_config_schema() -> None:
    # a family that unwraps its config (gemma3's image-text checkpoint) is checked by the schema of what it unwraps
    wrapped = {kind for family in FAMILIES if family.unwrap is not None for kind in family.model_types}
    assert wrapped == {"gemma3"} and "gemma3_text" in SCHEMAS
    own = set(supported()) - wrapped
    assert own <= set(SCHEMAS), f"model types without a schema: {own - set(SCHEMAS)}"


LLAMA, GPT2, BERT, QWEN2 = CONFIGS["llama"], CONFIGS["gpt2"], CONFIGS["bert"], CONFIGS["qwen2"]
QWEN3, GEMMA3, PHI3 = CONFIGS["qwen3"], CONFIGS["gemma3"], CONFIGS["phi3"]
INF, NAN = math.inf, math.nan
# Phi-4-mini's rotary settings, at the tiny model's size: 8-wide heads, 6 features rotated in 3 pairs
LONGROPE = {
    "rope_type": "longrope",
    "partial_rotary_factor": 0.75,
    "short_factor": [1.0, 1.5, 2.0],
    "long_factor": [2.0, 4.0, 8.0],
    "original_max_position_embeddings": 16,
}

# (family, config, field named, value shown, message)
INVALID = [
    # types: an int is never a bool or a float, a number is finite, a flag is a bool
    ("llama", {**LLAMA, "hidden_size": True}, "hidden_size", "True", "expected a positive integer"),
    ("llama", {**LLAMA, "num_hidden_layers": 2.0}, "num_hidden_layers", "2.0", "expected a positive integer"),
    ("gpt2", {**GPT2, "n_head": "2"}, "n_head", "'2'", "expected a positive integer"),
    ("llama", {**LLAMA, "rms_norm_eps": "1e-6"}, "rms_norm_eps", "'1e-6'", "finite positive number"),
    ("bert", {**BERT, "layer_norm_eps": INF}, "layer_norm_eps", "inf", "finite positive number"),
    ("gpt2", {**GPT2, "layer_norm_epsilon": NAN}, "layer_norm_epsilon", "nan", "finite positive number"),
    ("llama", {**LLAMA, "tie_word_embeddings": "yes"}, "tie_word_embeddings", "'yes'", "expected true or false"),
    ("llama", {**LLAMA, "pad_token_id": 1.5}, "pad_token_id", "1.5", "expected a token id"),
    ("llama", {**LLAMA, "eos_token_id": [1, True]}, "eos_token_id", "[1, True]", "expected a token id"),
    # ranges
    ("llama", {**LLAMA, "num_attention_heads": 0}, "num_attention_heads", "0", "expected a positive integer"),
    ("llama", {**LLAMA, "vocab_size": -5}, "vocab_size", "-5", "expected a positive integer"),
    ("llama", without(LLAMA, "intermediate_size"), "intermediate_size", "missing", "required"),
    ("bert", {**BERT, "layer_norm_eps": 0}, "layer_norm_eps", "0", "finite positive number"),
    ("llama", {**LLAMA, "rope_theta": 0}, "rope_theta", "0", "finite positive number"),
    ("llama", {**LLAMA, "rope_theta": -1.0}, "rope_theta", "-1.0", "finite positive number"),
    ("llama", {**LLAMA, "rope_theta": NAN}, "rope_theta", "nan", "finite positive number"),
    (
        "llama",
        {**LLAMA, "rope_parameters": {"rope_type": "default", "rope_theta": INF}},
        "rope_parameters.rope_theta",
        "inf",
        "finite",
    ),
    (
        "llama",
        {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 0}},
        "rope_scaling.factor",
        "0",
        "finite positive",
    ),
    ("llama", {**LLAMA, "pad_token_id": 50}, "pad_token_id", "50", r"outside the vocabulary \[0, 50\)"),
    ("gpt2", {**GPT2, "pad_token_id": -1}, "pad_token_id", "-1", "expected a token id"),
    # heads and widths consistent
    ("bert", {**BERT, "num_attention_heads": 3}, "num_attention_heads", "3", "does not divide hidden_size=16"),
    ("gpt2", {**GPT2, "n_head": 5}, "n_head", "5", "does not divide n_embd=16"),
    ("llama", {**LLAMA, "num_key_value_heads": 3}, "num_key_value_heads", "3", "does not divide num_attention_heads"),
    ("llama", {**LLAMA, "head_dim": 7}, "head_dim", "7", "must be even for rotary positions"),
    ("llama", {**LLAMA, "num_attention_heads": 16}, "head_dim", "1", r"hidden_size // num_attention_heads = 1"),
    # rope dicts complete and well formed
    ("llama", {**LLAMA, "rope_scaling": {"rope_type": "linear"}}, "rope_scaling", "rope_type", "lacks 'factor'"),
    (
        "llama",
        {**LLAMA, "rope_parameters": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0}},
        "rope_parameters",
        "llama3",
        "lacks 'low_freq_factor'",
    ),
    (
        "llama",
        {
            **LLAMA,
            "rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4, "high_freq_factor": 4},
        },
        "rope_parameters.high_freq_factor",
        "4.0",
        "above low_freq_factor",
    ),
    ("llama", {**LLAMA, "rope_scaling": "linear"}, "rope_scaling", "'linear'", "expected an object"),
    # enum values nobody defines
    ("llama", {**LLAMA, "hidden_act": "swishy"}, "hidden_act", "'swishy'", "not a value transformers knows"),
    (
        "llama",
        {**LLAMA, "rope_scaling": {"type": "banana", "factor": 2}},
        "rope_scaling.type",
        "'banana'",
        "not a rope type",
    ),
    ("qwen2", {**QWEN2, "layer_types": ["full_attention", "x"]}, "layer_types[1]", "'x'", "not a value"),
    ("qwen2", {**QWEN2, "layer_types": ["full_attention"]}, "layer_types", "full_attention", "listing 1 layers"),
    # the newer decoders' own fields
    ("qwen3", {**QWEN3, "head_dim": 7}, "head_dim", "7", "must be even for rotary positions"),
    ("gemma3", {**GEMMA3, "query_pre_attn_scalar": 0}, "query_pre_attn_scalar", "0", "finite positive number"),
    ("gemma3", {**GEMMA3, "final_logit_softcapping": "30"}, "final_logit_softcapping", "'30'", "finite positive"),
    ("gemma3", {**GEMMA3, "rope_local_base_freq": -1.0}, "rope_local_base_freq", "-1.0", "finite positive"),
    (
        "gemma3",
        {**GEMMA3, "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": NAN}}},
        "rope_parameters.sliding_attention.rope_theta",
        "nan",
        "finite positive",
    ),
    (
        "gemma3",
        {**GEMMA3, "rope_parameters": {"full_attention": {"rope_type": "linear"}}},
        "rope_parameters.full_attention",
        "linear",
        "lacks 'factor'",
    ),
    ("gemma3", {**GEMMA3, "sliding_window_pattern": 0}, "sliding_window_pattern", "0", "positive integer"),
    (
        "phi3",
        {**PHI3, "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 1.5}},
        "rope_parameters.partial_rotary_factor",
        "1.5",
        r"in \(0, 1\]",
    ),
    (
        "phi3",
        {**PHI3, "partial_rotary_factor": 0.125},  # an older file's top-level factor
        "partial_rotary_factor",
        "0.125",
        r"rotates 1 of the head's 8 features; rotary features pair up",
    ),
    (
        "phi3",
        {**PHI3, "rope_parameters": {**LONGROPE, "long_factor": [1.0, 2.0]}},
        "rope_parameters.long_factor",
        "[1.0, 2.0]",
        "listing 2 factors, but short_factor lists 3",
    ),
    (
        "phi3",
        {**PHI3, "rope_parameters": {**LONGROPE, "short_factor": [1.0] * 4, "long_factor": [1.0] * 4}},
        "rope_parameters.short_factor",
        "[1.0, 1.0, 1.0, 1.0]",
        "listing 4 factors, but the head rotates 6 features in 3 pairs",
    ),
    (
        "phi3",
        {**PHI3, "rope_parameters": {k: v for k, v in LONGROPE.items() if k != "original_max_position_embeddings"}},
        "rope_parameters.original_max_position_embeddings",
        "None",
        "expected a positive integer",
    ),
]


# the classes from_pretrained declares a model with, by family module
MODEL_CLASSES = (
    (llama, "LlamaForCausalLM"),
    (gpt2, "GPT2LMHeadModel"),
    (bert, "BertEncoder"),
    (qwen3, "Qwen3ForCausalLM"),
    (gemma3, "Gemma3ForCausalLM"),
    (phi3, "Phi3ForCausalLM"),
)
Refuse = Callable[..., str]


@pytest.fixture
def refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Refuse:
    """``refused(family, config, match, **options)``: from_pretrained over ``config`` (beside the family's weights,
    in tmp_path) with ``options`` raises a ConfigError matching ``match``, a PackrtError and a ValueError naming
    config.json, before any model class is called or a model is declared (meta_init); returns its message."""

    def refuse(family: str, config: dict[str, Any], match: str, **options: Any) -> str:
        # config.json as json writes it (NaN / Infinity too, as transformers does)
        directory = write(tmp_path, family, config)
        built: list[str] = []
        for module, name in MODEL_CLASSES:
            monkeypatch.setattr(module, name, lambda *args, _name=name, **kwargs: built.append(_name))
        monkeypatch.setattr(packrt, "meta_init", lambda: pytest.fail("a model was declared before the config check"))
        with pytest.raises(ConfigError, match=match) as info:
            from_pretrained(directory, **options)
        text = str(info.value)
        assert str(directory / "config.json") in text, text
        assert isinstance(info.value, PackrtError) and isinstance(info.value, ValueError)
        assert not built, f"{built} was declared before config.json was checked"
        return text

    return refuse


@pytest.mark.parametrize(("family", "config", "field", "value", "message"), INVALID)
def test_an_invalid_config_value_is_refused_naming_file_field_value_and_fix_before_building(
    refused: Refuse, family: str, config: dict[str, Any], field: str, value: str, message: str
) -> None:
    text = refused(family, config, message)
    assert f"field '{field}'" in text and value in text and ";" in text, text


UNSUPPORTED = [
    (
        "llama",
        {**LLAMA, "rope_parameters": {"rope_type": "dynamic", "factor": 4.0}},
        "rope_type 'dynamic'",
        "default, linear",
    ),
    ("llama", {**LLAMA, "rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope_type 'dynamic'", "llama3"),
    ("llama", {**LLAMA, "hidden_act": "gelu"}, "hidden_act 'gelu'", "silu"),
    ("bert", {**BERT, "position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key'", "absolute"),
    ("bert", {**BERT, "hidden_act": "gelu_new"}, "hidden_act 'gelu_new'", "gelu"),
    ("gpt2", {**GPT2, "activation_function": "gelu_fast"}, "activation_function 'gelu_fast'", "gelu_new"),
    ("qwen2", {**QWEN2, "layer_types": ["full_attention", "chunked_attention"]}, "'chunked_attention'", "sliding"),
    (
        "phi3",
        {**PHI3, "rope_scaling": {"type": "su", "short_factor": [1.0] * 4, "long_factor": [1.0] * 4}},
        "rope_type 'su'",
        "llama3",
    ),
    ("qwen3", {**QWEN3, "rope_parameters": {"rope_type": "dynamic", "factor": 4.0}}, "rope_type 'dynamic'", "linear"),
    ("gemma3", {**GEMMA3, "hidden_activation": "gelu"}, "hidden_activation 'gelu'", "gelu_pytorch_tanh"),
    (
        "gemma3",
        {**GEMMA3, "rope_parameters": {"sliding_attention": {"rope_type": "dynamic", "factor": 2.0}}},
        "rope_type 'dynamic'",
        "llama3",
    ),
]


@pytest.mark.parametrize(("family", "config", "setting", "listed"), UNSUPPORTED)
def test_a_valid_setting_packrt_does_not_implement_says_so_and_lists_what_is_supported(
    tmp_path: Path, family: str, config: dict[str, Any], setting: str, listed: str
) -> None:
    directory = write(tmp_path, family, config)
    with pytest.raises(
        UnsupportedModelError, match=rf"packrt does not implement .*{setting}.* yet; supported: .*{listed}"
    ):
        from_pretrained(directory)


CAPACITY = [
    ("gpt2", {**GPT2, "n_layer": 10**9}, "n_layer", "hold tensors for 2 layer"),
    ("llama", {**LLAMA, "num_hidden_layers": 3}, "num_hidden_layers", "hold tensors for 2 layer"),
    ("llama", {**LLAMA, "head_dim": 10**30}, "head_dim", "larger than any dimension"),
    ("bert", {**BERT, "intermediate_size": 2**40}, "intermediate_size", "larger than any dimension"),
    ("gpt2", {**GPT2, "vocab_size": 10**12}, "vocab_size", "larger than any dimension"),
]


@pytest.mark.parametrize(("family", "config", "field", "message"), CAPACITY)
@pytest.mark.parametrize("strict", [True, False])
def test_layers_and_widths_beyond_what_the_weight_files_hold_are_refused_from_the_headers(
    refused: Refuse, tmp_path: Path, family: str, config: dict[str, Any], field: str, message: str, strict: bool
) -> None:
    text = refused(family, config, rf"config\.json': field '{field}' is {config[field]}, ", strict=strict)
    assert message in text and str(tmp_path / "model.safetensors") in text, text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    field=st.sampled_from(["hidden_size", "num_attention_heads", "rms_norm_eps", "rope_theta", "num_hidden_layers"]),
    value=st.one_of(
        st.booleans(),
        st.floats(allow_nan=True),
        st.integers(max_value=0),
        st.text(max_size=3),
        st.none(),
        st.lists(st.integers(), max_size=2),
    ),
)
def test_validation_refuses_with_a_config_error_or_accepts_never_a_builtin_error(field: str, value: Any) -> None:
    config = HFConfig({**LLAMA, field: value}, "/models/x/config.json")
    usable = field in ("rms_norm_eps", "rope_theta") and isinstance(value, float) and math.isfinite(value) and value > 0
    if usable:
        validate(config)
    else:
        with pytest.raises(ConfigError, match=rf"config\.json': field '{field}' is "):
            validate(config)


# -- the files themselves ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_config_json_that_is_not_a_regular_file_is_refused_without_opening_it(tmp_path: Path, kind: str) -> None:
    directory = write(tmp_path, "llama", LLAMA)
    (directory / "config.json").unlink()
    if kind == "fifo":
        os.mkfifo(directory / "config.json")  # opening it for reading would block forever
    else:
        (directory / "config.json").mkdir()
    found = r"a FIFO \(named pipe\)" if kind == "fifo" else "a directory"
    with pytest.raises(CheckpointError, match=rf"config\.json' is {found}, not a regular file"):
        from_pretrained(directory)


NOT_JSON = [
    ("[" * 100_000 + "]" * 100_000, "nests its JSON too deeply"),
    ('{"model_type": "llama",', "cannot be read as JSON"),
    ("", "cannot be read as JSON"),
]


@pytest.mark.parametrize(("text", "message"), NOT_JSON, ids=["deeply-nested", "truncated", "empty"])
def test_a_config_json_that_does_not_parse_is_a_checkpoint_error_naming_the_file(
    tmp_path: Path, text: str, message: str
) -> None:
    directory = write(tmp_path, "llama", text)
    with pytest.raises(CheckpointError, match=rf"config\.json' {message}"):
        from_pretrained(directory)


def test_a_config_json_that_is_not_utf8_is_a_checkpoint_error_naming_the_file(tmp_path: Path) -> None:
    directory = write(tmp_path, "llama", LLAMA)
    (directory / "config.json").write_bytes(b'{"model_type": "\xff"}')
    with pytest.raises(CheckpointError, match=r"config\.json' is not UTF-8"):
        from_pretrained(directory)


@pytest.mark.parametrize("damage", ["truncated", "not-json", "fifo"])
def test_a_tokenizer_json_the_tokenizers_library_cannot_read_is_a_checkpoint_error_naming_it(
    tmp_path: Path, minilm_dir: Path, damage: str
) -> None:
    directory = tmp_path / "minilm"
    shutil.copytree(minilm_dir, directory, ignore=shutil.ignore_patterns("model.safetensors"))
    (directory / "model.safetensors").symlink_to(minilm_dir / "model.safetensors")
    tokenizer = directory / "tokenizer.json"
    text = tokenizer.read_text()
    tokenizer.unlink()
    if damage == "fifo":
        os.mkfifo(tokenizer)
    else:
        tokenizer.write_text(text[: len(text) // 2] if damage == "truncated" else '{"version": 3}')
    problem = "is a FIFO" if damage == "fifo" else "cannot be read by the tokenizers library"
    with pytest.raises(CheckpointError, match=rf"tokenizer\.json' {problem}"):
        SentenceEncoder.from_pretrained(directory)
    assert read_tokenizer_json(minilm_dir / "tokenizer.json").get_vocab_size() > 0


# -- weight dtypes -----------------------------------------------------------------------------------


def test_a_weight_in_a_dtype_the_model_cannot_serve_is_refused_at_load_naming_the_tensor(tmp_path: Path) -> None:
    tensors = weights("llama")
    tensors["model.layers.1.mlp.up_proj.weight"] = tensors["model.layers.1.mlp.up_proj.weight"].astype(np.uint8)
    directory = write(tmp_path, "llama", LLAMA, tensors)
    for cast in (None, packrt.float32):
        with pytest.raises(
            CheckpointError, match=r"tensor 'model\.layers\.1\.mlp\.up_proj\.weight' .* is U8; .*floating"
        ):
            from_pretrained(directory, dtype=cast)


@pytest.mark.parametrize("odd", [np.float16, np.float64])
def test_weights_of_mixed_float_dtypes_are_refused_naming_the_tensor_unless_dtype_casts_them(
    tmp_path: Path, odd: Any
) -> None:
    tensors = weights("gpt2")
    tensors["transformer.h.0.mlp.c_fc.weight"] = tensors["transformer.h.0.mlp.c_fc.weight"].astype(odd)
    directory = write(tmp_path, "gpt2", GPT2, tensors)
    name = "F16" if odd is np.float16 else "F64"
    with pytest.raises(
        CheckpointError,
        match=rf"tensor 'transformer\.h\.0\.mlp\.c_fc\.weight' .* is {name} but the model.s other weights are F32",
    ):
        from_pretrained(directory)
    model = from_pretrained(directory, dtype=packrt.float32)
    assert model(packrt.zeros(1, 2, dtype=packrt.int64)).dtype is packrt.float32


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_a_whole_model_in_one_float_dtype_is_served_in_it(tmp_path: Path, dtype: Any) -> None:
    directory = write(tmp_path, "llama", LLAMA, {k: v.astype(dtype) for k, v in weights("llama").items()})
    logits = from_pretrained(directory)(packrt.zeros(1, 2, dtype=packrt.int64))
    assert logits.dtype is (packrt.float16 if dtype is np.float16 else packrt.float64)
    assert np.isfinite(np.asarray(logits.numpy(), dtype=np.float64)).all()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
_FIELDS = sorted({(model_type, f.name) for model_type, schema in SCHEMAS.items() for f in schema.fields})
_ROPE_KEYS = ["rope_type", "type", "factor", "rope_theta", "low_freq_factor", "high_freq_factor"]


@settings(max_examples=150, deadline=None)
@given(
    target=st.sampled_from(
        _FIELDS + [(t, "rope_parameters") for t in ("llama", "qwen2", "mistral", "qwen3", "gemma3_text", "phi3")]
    ),
    value=_JSON,
    rope=st.dictionaries(st.sampled_from(_ROPE_KEYS), _JSON, max_size=4),
)
def test_any_json_value_in_any_field_is_accepted_or_refused_with_a_packrt_config_error(
    target: tuple[str, str], value: Any, rope: dict[str, Any]
) -> None:
    model_type, field = target
    family = "bert" if model_type == "bert" else "gpt2" if model_type == "gpt2" else "llama"
    base = {**CONFIGS[family], "model_type": model_type}
    nested = {"full_attention": rope} if model_type == "gemma3_text" else rope  # gemma3 keeps one per layer type
    config = HFConfig({**base, field: nested if field == "rope_parameters" else value}, "/m/config.json")
    try:
        validate(config)
    except (ConfigError, UnsupportedModelError) as err:
        assert str(err).startswith("'/m/config.json': field '"), str(err)  # noqa: PT017 - any value may be valid
