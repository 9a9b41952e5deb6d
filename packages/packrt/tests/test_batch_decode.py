"""BatchDecoder decodes several sequences in one forward per step, each as it would be decoded alone.

Sequences of different prompt lengths join at different steps and leave when they finish; each one's greedy
tokens are ``generate``'s for it alone (llama: rotary, grouped heads; gpt2: learned positions; mistral: a
sliding window shorter than the sequences), a seeded sample draws what ``generate`` draws, and a logits
processor (OpenAI's penalties) changes its own sequence's scores only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoints import write_checkpoint

import packrt
from packrt.models import CausalLM, from_pretrained
from packrt.models.batch_decode import BatchDecoder, Emitted, exact_rows
from packrt.models.generation import GenerationArgumentError, GenerationArgumentTypeError
from packrt.models.logits_processing import LogitBias, Penalties, chained

VOCAB = 61
CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
    },
    "gpt2": {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": VOCAB,
        "n_embd": 16,
        "n_layer": 2,
        "n_head": 2,
        "n_positions": 64,
    },
    "mistral": {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "sliding_window": 5,
    },
}
PROMPTS = [[5, 9, 2], list(range(3, 17)), [7], [40, 41, 42, 43, 44, 45, 46, 47, 48], [11, 12, 13, 14, 15]]
NEW = [12, 6, 15, 9, 10]
JOIN_AT = [0, 0, 2, 3, 5]  # the step before which each sequence is added


@pytest.fixture(scope="module", params=list(CONFIGS))
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> CausalLM:
    directory = write_checkpoint(tmp_path_factory.mktemp(request.param), CONFIGS[request.param])
    loaded = from_pretrained(directory)
    assert isinstance(loaded, CausalLM)
    return loaded


def alone(model: CausalLM, prompt: list[int], new: int, **options: Any) -> list[int]:
    """The new tokens ``generate`` gives ``prompt`` run by itself."""
    out = model.generate(packrt.from_numpy(np.asarray([prompt], dtype=np.int64)), new, eos_token_id=None, **options)
    return [int(t) for t in out.numpy()[0, len(prompt) :]]


def _adds(new: list[int], **extra: Any) -> dict[int, list[dict[str, Any]]]:
    adds: dict[int, list[dict[str, Any]]] = {}
    for index, (prompt, count, at) in enumerate(zip(PROMPTS, new, JOIN_AT, strict=True)):
        adds.setdefault(at, []).append({"name": str(index), "ids": prompt, "max_new_tokens": count, **extra})
    return adds


def _add(decoder: BatchDecoder, each: dict[str, Any]) -> int:
    options = {k: v for k, v in each.items() if k not in ("name", "ids")}
    return decoder.add(each["ids"], **options)


def run(decoder: BatchDecoder, adds: dict[int, list[dict[str, Any]]]) -> dict[str, list[Emitted]]:
    names: dict[int, str] = {}
    events: dict[str, list[Emitted]] = {}
    step, last = 0, max(adds)
    while decoder.active or decoder.waiting or step <= last:
        for each in adds.get(step, []):
            names[_add(decoder, each)] = each["name"]
        for event in decoder.step():
            assert event.error is None, event.error
            events.setdefault(names[event.sequence], []).append(event)
        step += 1
    return events


def tokens(events: list[Emitted]) -> list[int]:
    return [int(event.token) for event in events if event.token is not None]


@pytest.mark.parametrize("rows_per_forward", [None, 2])
def test_batched_greedy_equals_each_sequence_alone_as_sequences_of_different_lengths_join_at_different_steps(
    model: CausalLM, rows_per_forward: int | None
) -> None:
    decoder = BatchDecoder(model, max_batch=4, rows_per_forward=rows_per_forward)
    events = run(decoder, _adds(NEW, eos_token_id=None))
    for index, (prompt, count) in enumerate(zip(PROMPTS, NEW, strict=True)):
        assert tokens(events[str(index)]) == alone(model, prompt, count), f"sequence {index}"
        assert [e.finish for e in events[str(index)]] == [None] * (count - 1) + ["length"]
    assert (decoder.active, decoder.waiting) == (0, 0)


def test_a_sequence_that_finishes_or_is_removed_leaves_the_others_unaffected(model: CausalLM) -> None:
    solo = [alone(model, prompt, count) for prompt, count in zip(PROMPTS, NEW, strict=True)]
    eos = solo[0][3]  # sequence 0 stops at its 4th token (an eos id of its own); the others have no eos
    adds = _adds(NEW, eos_token_id=None)
    adds[0][0]["eos_token_id"] = eos
    decoder = BatchDecoder(model, max_batch=8)
    names: dict[int, str] = {}
    got: dict[str, list[Emitted]] = {}
    for step in range(max(NEW) + max(JOIN_AT) + 2):
        for each in adds.get(step, []):
            names[_add(decoder, each)] = each["name"]
        if step == 4:  # sequence 1 is given up after its 4th token
            assert decoder.remove(next(i for i, n in names.items() if n == "1"))
        for event in decoder.step():
            got.setdefault(names[event.sequence], []).append(event)
    stopped_at = solo[0].index(eos) + 1
    assert tokens(got["0"]) == solo[0][:stopped_at] and got["0"][-1].finish == "stop"
    assert tokens(got["1"]) == solo[1][:4]
    for index in (2, 3, 4):
        assert tokens(got[str(index)]) == solo[index], f"sequence {index}"
    assert not decoder.remove(next(i for i, n in names.items() if n == "0")), "a finished sequence has left"


def test_a_seeded_sample_in_a_batch_draws_what_generate_draws_alone(model: CausalLM) -> None:
    sampling = {"do_sample": True, "temperature": 0.8, "top_k": 20, "top_p": 0.9}
    adds = _adds(NEW, eos_token_id=None, **sampling)
    for at, group in adds.items():
        for each in group:
            each["seed"] = 100 + int(each["name"]) + at
    events = run(BatchDecoder(model), adds)
    for group in adds.values():
        for each in group:
            index = int(each["name"])
            expected = alone(model, PROMPTS[index], NEW[index], seed=each["seed"], **sampling)
            assert tokens(events[each["name"]]) == expected


def test_more_sequences_than_max_batch_wait_their_turn_and_each_is_still_decoded_as_alone(model: CausalLM) -> None:
    decoder = BatchDecoder(model, max_batch=2)
    for prompt, count in zip(PROMPTS, NEW, strict=True):
        decoder.add(prompt, count, eos_token_id=None)
    first = decoder.step()
    assert (len(first), decoder.active, decoder.waiting) == (2, 2, 3)
    events: list[Emitted] = first
    while decoder.active or decoder.waiting:
        assert decoder.active <= 2
        events += decoder.step()
    for index, (prompt, count) in enumerate(zip(PROMPTS, NEW, strict=True)):
        assert tokens([e for e in events if e.sequence == index]) == alone(model, prompt, count)


def test_a_sequence_asked_for_no_new_tokens_ends_at_once_with_length(model: CausalLM) -> None:
    decoder = BatchDecoder(model)
    ident = decoder.add([1, 2, 3], 0)
    assert decoder.step() == [Emitted(ident, None, "length")]
    assert (decoder.active, decoder.waiting) == (0, 0)


def test_a_failing_logits_processor_ends_its_own_sequence_with_the_error_and_no_other(model: CausalLM) -> None:
    def broken(generated: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if len(generated) == 2:
            raise RuntimeError("processor broke")
        return scores

    decoder = BatchDecoder(model)
    bad = decoder.add(PROMPTS[0], 8, eos_token_id=None, logits_processor=broken)
    good = decoder.add(PROMPTS[1], 8, eos_token_id=None)
    events: list[Emitted] = []
    while decoder.active or decoder.waiting:
        events += decoder.step()
    failed = [e for e in events if e.sequence == bad]
    assert len(failed) == 3 and failed[-1].finish == "error" and str(failed[-1].error) == "processor broke"
    assert tokens([e for e in events if e.sequence == good]) == alone(model, PROMPTS[1], 8)


def test_penalties_subtract_openais_presence_and_frequency_terms_from_each_generated_tokens_logit() -> None:
    scores = np.linspace(-1.0, 1.0, 10).astype(np.float32)
    generated = np.array([3, 3, 7, 3, 0])
    out = Penalties(presence=0.5, frequency=0.25)(generated, scores)
    expected = scores.astype(np.float64)
    for token, count in ((3, 3), (7, 1), (0, 1)):
        expected[token] -= 0.5 * 1 + 0.25 * count
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(Penalties(presence=0.5)(np.array([], dtype=np.int64), scores), scores)
    assert not Penalties() and Penalties(frequency=-0.1)


@pytest.mark.parametrize(
    ("presence", "frequency", "error", "match"),
    [
        (2.5, 0.0, GenerationArgumentError, r"presence_penalty must be a number in \[-2, 2\].*got 2\.5"),
        (0.0, float("nan"), GenerationArgumentError, r"frequency_penalty must be a number in \[-2, 2\]"),
        ("1", 0.0, GenerationArgumentTypeError, r"presence_penalty must be a number, got str '1'"),
        (0.0, True, GenerationArgumentTypeError, r"frequency_penalty must be a number, got bool True"),
    ],
)
def test_penalties_outside_openais_range_or_not_numbers_are_refused(
    presence: Any, frequency: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        Penalties(presence=presence, frequency=frequency)


def test_logit_bias_adds_each_named_tokens_bias_to_its_score_every_step() -> None:
    scores = np.linspace(-1.0, 1.0, 10).astype(np.float32)
    bias = LogitBias.of({"3": 5, 7: -100.0, "0": 0}, vocab=10)
    expected = scores.astype(np.float64)
    expected[3] += 5
    expected[7] -= 100
    np.testing.assert_array_equal(bias(np.array([1, 2]), scores), expected)
    assert bias and not LogitBias.of({"4": 0}, vocab=10)
    both = chained(Penalties(presence=0.5), bias)
    assert both is not None
    np.testing.assert_array_equal(both(np.array([3]), scores), expected - 0.5 * (np.arange(10) == 3))


@pytest.mark.parametrize(
    ("bias", "error", "match"),
    [
        ({"10": 1}, GenerationArgumentError, r"token id 10 is not in the model's vocabulary of 10 \(0 to 9\)"),
        ({"-1": 1}, GenerationArgumentError, r"token id -1 is not in the model's vocabulary"),
        ({"3": 100.5}, GenerationArgumentError, r"logit_bias\['3'\] must be in \[-100, 100\]"),
        ({"cat": 1}, GenerationArgumentTypeError, r"key 'cat' is not a token id"),
        ({"3": "1"}, GenerationArgumentTypeError, r"logit_bias\['3'\] must be a number, got str '1'"),
    ],
)
def test_a_logit_bias_outside_the_vocabulary_or_openais_range_is_refused_naming_the_entry(
    bias: dict[Any, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        LogitBias.of(bias, vocab=10)


def test_a_logit_bias_of_100_makes_greedy_decoding_choose_that_token(model: CausalLM) -> None:
    decoder = BatchDecoder(model)
    forced = decoder.add(PROMPTS[0], max_new_tokens=4, logits_processor=LogitBias.of({"5": 100}, model.vocab))
    plain = decoder.add(PROMPTS[0], max_new_tokens=4)
    events: list[Emitted] = []
    while decoder.active or decoder.waiting:
        events += decoder.step()
    assert tokens([e for e in events if e.sequence == forced]) == [5, 5, 5, 5]
    assert tokens([e for e in events if e.sequence == plain]) == alone(model, PROMPTS[0], 4)


def _penalized_alone(model: CausalLM, prompt: list[int], new: int, penalties: Penalties) -> list[int]:
    """Greedy over the whole sequence's logits each step (no cache), the penalties applied by hand."""
    ids, generated = list(prompt), []
    for _ in range(new):
        logits = model(packrt.from_numpy(np.asarray([ids], dtype=np.int64))).numpy()[0, -1].astype(np.float64)
        for token in set(generated):
            logits[token] -= penalties.presence + penalties.frequency * generated.count(token)
        generated.append(int(logits.argmax()))
        ids.append(generated[-1])
    return generated


def test_each_sequences_penalties_change_its_own_tokens_only(model: CausalLM) -> None:
    penalties = Penalties(presence=0.7, frequency=1.3)
    decoder = BatchDecoder(model)
    plain = decoder.add(PROMPTS[2], 12, eos_token_id=None)
    penalized = decoder.add(PROMPTS[2], 12, eos_token_id=None, logits_processor=penalties)
    events: list[Emitted] = []
    while decoder.active or decoder.waiting:
        events += decoder.step()
    assert tokens([e for e in events if e.sequence == plain]) == alone(model, PROMPTS[2], 12)
    got = tokens([e for e in events if e.sequence == penalized])
    assert got == _penalized_alone(model, PROMPTS[2], 12, penalties)
    assert got != alone(model, PROMPTS[2], 12), "the penalties were strong enough to change the tokens"


@pytest.mark.parametrize(
    ("args", "options", "error", "match"),
    [
        (([1, 2],), {"max_new_tokens": -1}, GenerationArgumentError, r"max_new_tokens must be an int >= 0.*got -1"),
        (([1, 2],), {"temperature": 0}, GenerationArgumentError, r"temperature must be > 0, got 0"),
        (([[1, 2]],), {}, GenerationArgumentTypeError, r"one sequence of integer token ids.*shape \(1, 2\)"),
        (([1.0, 2.0],), {}, GenerationArgumentTypeError, r"integer token ids, got an array .* dtype float64"),
        (([1, VOCAB],), {}, packrt.errors.IndexingError, rf"token id {VOCAB} .* outside the vocabulary"),
        (([1, 2],), {"logits_processor": 3}, GenerationArgumentTypeError, r"logits_processor must be callable.*int"),
    ],
)
def test_add_checks_each_argument_at_the_call_with_generates_errors(
    model: CausalLM, args: tuple[Any, ...], options: dict[str, Any], error: type[Exception], match: str
) -> None:
    decoder = BatchDecoder(model)
    with pytest.raises(error, match=match):
        decoder.add(*args, **options)
    assert decoder.waiting == 0


@pytest.mark.parametrize("value", [0, -2, 1.5])
def test_batch_sizes_must_be_positive_ints(model: CausalLM, value: Any) -> None:
    with pytest.raises(GenerationArgumentError, match=rf"max_batch must be an int >= 1, got {value!r}"):
        BatchDecoder(model, max_batch=value)
    with pytest.raises(GenerationArgumentError, match=rf"rows_per_forward must be an int >= 1, got {value!r}"):
        BatchDecoder(model, rows_per_forward=value)


def test_smollm2_gguf_decodes_eight_sequences_in_groups_of_its_exact_rows_each_as_alone(smollm2_gguf: Path) -> None:
    from packrt.models import load_tokenizer

    lm = from_pretrained(smollm2_gguf)
    assert isinstance(lm, CausalLM)
    assert exact_rows(lm) == 8  # Q4_1 blocks: up to 8 rows on the single row's road (one forward takes all eight)
    tokenizer = load_tokenizer(smollm2_gguf)
    texts = ["The capital of France is", "def fibonacci(n):", "Once upon a time,", "Water boils at"]
    texts += ["My favourite colour is", "In 1969, the first man", "Python is a language that", "The best way"]
    prompts = [tokenizer.encode(text).ids for text in texts]
    decoder = BatchDecoder(lm, max_batch=8)
    events: list[Emitted] = []
    for index, prompt in enumerate(prompts):
        decoder.add(prompt, 12, eos_token_id=None)
        if index % 3 == 2:  # they join over several steps
            events += decoder.step()
    while decoder.active or decoder.waiting:
        events += decoder.step()
    for index, prompt in enumerate(prompts):
        assert tokens([e for e in events if e.sequence == index]) == alone(lm, prompt, 12), texts[index]
