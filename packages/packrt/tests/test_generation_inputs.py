"""generate, the causal forward and KVCache check their inputs before using them.

Token ids are integers inside ``[0, vocab)`` (float ids are refused, never truncated); eos and pad
ids are tokens of the vocabulary; position ids are integers >= 0; a KVCache takes writes for its
own batch, layers and positions only (a new batch size is refused, never broadcast).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from checkpoints import write_checkpoint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packrt
from packrt.errors import DTypeError, IndexingError, PackrtError, ShapeError
from packrt.models import CausalLM, KVCache, from_pretrained
from packrt.models.generation import GenerationArgumentError, GenerationArgumentTypeError

VOCAB = 50
CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 32,
    },
    "gpt2": {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": VOCAB,
        "n_embd": 16,
        "n_layer": 2,
        "n_head": 2,
        "n_positions": 16,
    },
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> CausalLM:
    family = request.param
    directory = write_checkpoint(tmp_path_factory.mktemp(family), CONFIGS[family])
    loaded = from_pretrained(directory)
    assert isinstance(loaded, CausalLM)
    return loaded


def ids(*rows: list[Any], dtype: Any = np.int64) -> packrt.Tensor:
    return packrt.from_numpy(np.array(rows, dtype=dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.bool_])
def test_token_ids_must_be_integers_never_truncated(model: CausalLM, dtype: Any) -> None:
    prompt = ids([1.7, 2.2], dtype=dtype)
    with pytest.raises(DTypeError, match=r"takes integer token ids .* got packrt\.\w+: token ids are never rounded"):
        model.generate(prompt, 2)
    with pytest.raises(DTypeError, match=r"takes integer token ids"):
        model(prompt)


@pytest.mark.parametrize("bad", [-1, VOCAB, VOCAB + 100, -(2**40)])
def test_prompt_ids_must_lie_in_the_vocabulary(model: CausalLM, bad: int) -> None:
    with pytest.raises(
        IndexingError, match=rf"generate: token id {bad} at position \(0, 1\) is outside the vocabulary"
    ):
        model.generate(ids([3, bad, 4]), 2)


@pytest.mark.parametrize("pad", [-1, VOCAB, 10**6, 1.0, True])
def test_pad_token_id_must_be_a_token_of_the_vocabulary(model: CausalLM, pad: Any) -> None:
    with pytest.raises(ValueError, match=rf"pad_token_id must be a token id in \[0, {VOCAB}\), got {pad!r}"):
        model.generate(ids([1, 2]), 3, eos_token_id=0, pad_token_id=pad)


@pytest.mark.parametrize("eos", [-1, VOCAB, [1, VOCAB], [True], 2.0])
def test_eos_token_ids_must_be_tokens_of_the_vocabulary(model: CausalLM, eos: Any) -> None:
    with pytest.raises(ValueError, match=rf"eos_token_id must be a token id in \[0, {VOCAB}\)"):
        model.generate(ids([1, 2]), 3, eos_token_id=eos)


def test_rows_that_end_are_padded_with_the_pad_id_given(model: CausalLM) -> None:
    prompt = ids([1, 2])
    first = int(np.asarray(model(prompt).numpy())[0, -1].argmax())
    out = model.generate(prompt, 3, eos_token_id=first, pad_token_id=VOCAB - 1).tolist()
    assert out[0][:3] == [1, 2, first]  # ended at once; the only row, so generation stops there


def test_stream_takes_generate_s_arguments_and_yields_its_tokens(model: CausalLM) -> None:
    prompt = ids([1, 2, 3], [4, 5, 6])
    keywords: dict[str, Any] = {"do_sample": True, "top_k": 5, "seed": 7, "eos_token_id": None}
    steps = list(model.stream(prompt, 4, **keywords))
    assert np.array_equal(np.stack(steps, axis=1), model.generate(prompt, 4, **keywords).numpy()[:, 3:])


@pytest.mark.parametrize("method", ["generate", "stream"])
def test_an_argument_generate_does_not_take_is_a_type_error_naming_its_parameters(model: CausalLM, method: str) -> None:
    with pytest.raises(
        TypeError, match=rf"{type(model).__name__}.{method}: got an unexpected keyword .*'beams'.*top_k"
    ):
        getattr(model, method)(ids([1, 2]), 2, beams=4)
    with pytest.raises(TypeError, match=rf"{method}: too many positional arguments; it takes \(input_ids"):
        getattr(model, method)(ids([1, 2]), 2, None)


# (keyword, value, the error's class, what its message says): each sampling argument checked for its type
# and range when generate or stream is called, as a packrt error that is also the builtin a caller expects
BAD_ARGUMENTS = [
    ("seed", -1, GenerationArgumentError, "seed must be an int >= 0 or None, got -1"),
    ("seed", "x", GenerationArgumentTypeError, "seed must be an int >= 0 or None, got str 'x'"),
    ("seed", 1.5, GenerationArgumentTypeError, "seed must be an int >= 0 or None, got float 1.5"),
    ("temperature", "1", GenerationArgumentTypeError, "temperature must be a number, got str '1'"),
    ("temperature", float("nan"), GenerationArgumentError, "temperature must be finite, got nan"),
    ("temperature", 0.0, GenerationArgumentError, "temperature must be > 0, got 0.0"),
    ("top_p", "0.5", GenerationArgumentTypeError, "top_p must be a number, got str '0.5'"),
    ("top_p", 1.5, GenerationArgumentError, r"top_p must be in \(0, 1\] or None, got 1.5"),
    ("top_k", True, GenerationArgumentTypeError, "top_k must be a positive int or None, got True"),
    ("top_k", 0, GenerationArgumentError, "top_k must be a positive int or None, got 0"),
    ("do_sample", "yes", GenerationArgumentTypeError, "do_sample must be a bool, got str"),
]


@pytest.mark.parametrize("method", ["generate", "stream"])
@pytest.mark.parametrize(("keyword", "value", "error", "message"), BAD_ARGUMENTS)
def test_each_sampling_argument_is_checked_at_the_call(
    model: CausalLM, method: str, keyword: str, value: Any, error: type[Exception], message: str
) -> None:
    builtin = TypeError if issubclass(error, TypeError) else ValueError
    with pytest.raises(error, match=message) as raised:
        getattr(model, method)(ids([1, 2]), 2, **{"do_sample": True, keyword: value})  # stream: at the call
    assert isinstance(raised.value, PackrtError) and isinstance(raised.value, builtin)


@pytest.mark.parametrize(("value", "error"), [("3", GenerationArgumentTypeError), (True, GenerationArgumentTypeError)])
def test_max_new_tokens_must_be_an_int(model: CausalLM, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=f"max_new_tokens must be an int >= 0 or None, got {value!r}"):
        model.generate(ids([1, 2]), value)


@pytest.mark.parametrize("positions", [[[-1, 0]], [[0, -5]]])
def test_position_ids_must_be_non_negative(model: CausalLM, positions: list[list[int]]) -> None:
    with pytest.raises(IndexingError, match=r"position_ids hold -\d+; positions count from 0"):
        model(ids([1, 2]), position_ids=packrt.from_numpy(np.array(positions)))


def test_position_ids_past_the_positions_a_rotary_model_is_configured_for_are_refused_at_once(model: CausalLM) -> None:
    """A rotary model's table grew to the largest position asked for (10**6: 13 s and 437 MB; 10**8: a
    MemoryError); a learned table refused them already."""
    limit = model.max_positions or model.position_limit
    assert limit is not None
    with pytest.raises(IndexingError, match=rf"position_ids hold 1000000, beyond the model's {limit} positions"):
        model(ids([1, 2]), position_ids=packrt.from_numpy(np.array([[0, 10**6]])))
    model(ids([1, 2]), position_ids=packrt.from_numpy(np.array([[0, limit - 1]])))  # the last one is served


def test_a_generation_past_the_models_positions_is_refused_before_anything_is_allocated(model: CausalLM) -> None:
    limit = model.max_positions or model.position_limit
    with pytest.raises(
        ShapeError, match=rf"2 prompt tokens \+ 1000000000 new ones exceed the model's {limit} positions"
    ):
        model.generate(ids([1, 2]), 10**9)
    assert model.generate(ids([1, 2]), limit - 2, eos_token_id=None).shape == (1, limit)  # the last position: served


def test_position_ids_must_be_integers(model: CausalLM) -> None:
    with pytest.raises(DTypeError, match=r"position_ids must be integers, got packrt\.float32"):
        model(ids([1, 2]), position_ids=packrt.from_numpy(np.array([[0.0, 1.0]], dtype=np.float32)))


# -- KVCache --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layers", "batch", "capacity", "name"),
    [(0, 1, 4, "layers"), (2, 0, 4, "batch"), (2, True, 4, "batch"), (2, 1, -3, "capacity"), (2, 1, 4.0, "capacity")],
)
def test_kv_cache_sizes_must_be_positive_ints(layers: Any, batch: Any, capacity: Any, name: str) -> None:
    with pytest.raises(ValueError, match=rf"KVCache: {name} must be a positive int, got"):
        KVCache(layers, batch, capacity)


@pytest.mark.parametrize("batch", [1, 3])
def test_kv_cache_refuses_a_batch_other_than_its_own_never_broadcasts(batch: int) -> None:
    cache = KVCache(2, 2, 8)
    kv = packrt.ones(batch, 2, 3, 4)
    with pytest.raises(
        ShapeError, match=rf"keys for {batch} sequences written to a cache of 2; a cache never broadcasts"
    ):
        cache.write(0, kv, kv, 0)
    assert cache.keys == [None, None]  # nothing was allocated for the wrong batch
    cache.write(0, packrt.ones(2, 2, 3, 4), packrt.ones(2, 2, 3, 4), 0)  # its own batch still works


def test_kv_cache_refuses_positions_layers_and_shapes_it_does_not_hold() -> None:
    cache = KVCache(2, 1, 8)
    kv = packrt.ones(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"start position must be an int >= 0, got -2"):
        cache.write(0, kv, kv, -2)
    with pytest.raises(IndexingError, match=r"layer 5 is not one of the cache's 2 layers"):
        cache.write(5, kv, kv, 0)
    with pytest.raises(ShapeError, match=r"do not fit a cache of 8 positions"):
        cache.write(0, kv, kv, 6)
    with pytest.raises(ShapeError, match=r"must share one \(batch, kv_heads, seq, head_dim\) shape"):
        cache.write(0, kv, packrt.ones(1, 2, 3, 5), 0)
    cache.write(0, kv, kv, 0)
    with pytest.raises(ShapeError, match=r"layer 0 holds 2 heads of width 4, got keys with 3 of width 4"):
        cache.write(0, packrt.ones(1, 3, 1, 4), packrt.ones(1, 3, 1, 4), 3)
    with pytest.raises(DTypeError, match=r"layer 0 holds packrt\.float32 keys, got packrt\.float64"):
        cache.write(0, packrt.ones(1, 2, 1, 4, dtype=packrt.float64), packrt.ones(1, 2, 1, 4, dtype=packrt.float64), 3)
    with pytest.raises(ShapeError, match=r"attention_mask has shape \(2, 3\), expected \(batch, prompt\)"):
        cache.set_padding(np.ones((2, 3), dtype=bool))


def test_kv_cache_store_keeps_what_write_keeps_and_says_where_it_ends() -> None:
    rng = np.random.default_rng(3)
    stored, written = KVCache(1, 2, 9), KVCache(1, 2, 9)
    start = 0
    for length in (4, 1, 1, 2):  # a prompt, then steps
        rows = packrt.from_numpy(rng.standard_normal((2, length, 3, 5)).astype(np.float32))
        k = rows.transpose(1, 2)  # (batch, heads, length, dim) read from rows: a strided view, stored by value
        v = packrt.from_numpy(rng.standard_normal((2, 3, length, 5)).astype(np.float32))
        assert stored.store(0, k, v, start) == start + length
        keys, values = written.write(0, k, v, start)
        start += length
        assert tuple(keys.shape) == (2, 3, start, 5)
        np.testing.assert_array_equal(stored.keys[0].numpy()[:, :, :start], keys.numpy())
        np.testing.assert_array_equal(stored.values[0].numpy()[:, :, :start], values.numpy())
    with pytest.raises(ShapeError, match=r"positions 8\.\.9 do not fit a cache of 9 positions"):
        stored.store(0, k, v, 8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(min_value=-(2**62), max_value=2**62), min_size=1, max_size=6))
def test_any_prompt_is_generated_from_or_refused_with_a_packrt_error(model: CausalLM, values: list[int]) -> None:
    inside = all(0 <= v < VOCAB for v in values)
    if inside:
        out = model.generate(packrt.from_numpy(np.array([values])), 1)
        assert out.shape == (1, len(values) + 1) and 0 <= out.tolist()[0][-1] < VOCAB
    else:
        with pytest.raises(IndexingError, match=r"outside the vocabulary") as info:
            model.generate(packrt.from_numpy(np.array([values])), 1)
        assert isinstance(info.value, PackrtError)
