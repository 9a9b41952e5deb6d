"""The decoder layers' fused form (packrt.models.decoder_plan) gives the module-by-module road's logits and
tokens (llama with grouped-query attention, qwen2's biases, mistral's sliding window, phi3's fused
projections, smollm3's NoPE layers, granite's multipliers, gemma2's soft-capped attention, gemma's sandwich
and offset norms, gpt2; fp32, bf16, int8; padded prompts), a hook on an inner module sees every step of a
generation, and a layer the fused form does not reproduce keeps its module road, saying why."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from peers import SMALL, VOCAB

import packrt
from packrt import nn
from packrt.models import from_pretrained
from packrt.models.decoder_blocks import PreNormLayer
from packrt_kernels_cpu.tolerance import assert_same_model_output

# every family built from decoder_blocks' PreNormLayer, and gpt2: the tiny_families rows the fused form serves
PLANNED = (
    "llama",
    "qwen2",
    "mistral",
    "qwen3",
    "phi3",
    "ministral",
    "smollm3",
    "granite",
    "gemma2",
    "gemma3",
    "olmo2",
    "gpt2",
)


def _dir(saved: Mapping[str, tuple[Path, Any]], family: str) -> Path:
    return saved[family][0]


def _prompt(seed: int = 0) -> tuple[packrt.Tensor, packrt.Tensor]:
    """Two prompts of 9 tokens, the second left-padded by 3 (as generate takes a padded batch)."""
    ids = np.random.default_rng(seed).integers(2, VOCAB, (2, 9)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, :3] = 0
    ids[1, :3] = 0
    return packrt.from_numpy(ids), packrt.from_numpy(mask)


def _plain(model: nn.Module, call: Any) -> Any:
    with nn.serving_plans(False):
        return call()


@pytest.mark.parametrize("family", PLANNED)
@pytest.mark.parametrize("options", [{}, {"dtype": "bfloat16"}, {"quantize": "int8"}], ids=["fp32", "bf16", "int8"])
def test_the_plan_gives_the_plain_roads_logits(
    saved: Mapping[str, tuple[Path, Any]], family: str, options: dict[str, Any]
) -> None:
    model = from_pretrained(_dir(saved, family), **options)
    ids, mask = _prompt()
    planned = model(ids, mask).numpy()
    assert nn.plan_report(model).road == "plan", nn.plan_report(model).reason
    plain = _plain(model, lambda: model(ids, mask).numpy())
    assert_same_model_output(planned, plain, err_msg=f"{family} {options}")


@pytest.mark.parametrize("family", PLANNED)
def test_greedy_generation_gives_the_same_tokens_on_both_roads(
    saved: Mapping[str, tuple[Path, Any]], family: str
) -> None:
    model = from_pretrained(_dir(saved, family))
    ids, mask = _prompt(1)
    planned = model.generate(ids, 12, attention_mask=mask).numpy()
    report = nn.plan_report(model)
    # the prompt and each new token: one step each, every layer fused in each
    assert report.road == "plan" and report.planned_calls == 12 * len(model.layers)
    plain = _plain(model, lambda: model.generate(ids, 12, attention_mask=mask).numpy())
    np.testing.assert_array_equal(planned, plain)


@pytest.mark.parametrize("family", PLANNED)
def test_each_decode_step_gives_the_plain_roads_logits(saved: Mapping[str, tuple[Path, Any]], family: str) -> None:
    """Beyond equal tokens: each step's logits, over a padded batch, sliding windows shorter than the run and
    gemma2's soft-capped scores (the plan attends a decode step with the device's decode kernel)."""
    model = from_pretrained(_dir(saved, family))
    ids, mask = _prompt(2)

    def each_steps_logits() -> list[np.ndarray]:
        seen: list[np.ndarray] = []
        handle = model.lm_head.register_forward_hook(lambda m, args, out: seen.append(out.numpy().copy()))
        try:
            model.generate(ids, 10, attention_mask=mask)
        finally:
            handle.remove()
        return seen

    planned = each_steps_logits()
    assert nn.plan_report(model).road == "plan", nn.plan_report(model).reason
    plain = _plain(model, each_steps_logits)
    assert len(planned) == len(plain) == 10
    for step, (got, expected) in enumerate(zip(planned, plain, strict=True)):
        assert_same_model_output(got, expected, err_msg=f"{family}, step {step}")


def test_a_hook_on_an_inner_module_sees_every_step_of_a_generation(saved: Mapping[str, tuple[Path, Any]]) -> None:
    model = from_pretrained(_dir(saved, "llama"))
    ids, _ = _prompt()
    expected = model.generate(ids, 6).numpy()
    steps: list[tuple[int, ...]] = []
    handle = model.layers[1].mlp.register_forward_hook(lambda m, args, out: steps.append(tuple(out.shape)))
    got = model.generate(ids, 6).numpy()
    hidden = SMALL["hidden_size"]
    assert steps == [(2, 9, hidden)] + [(2, 1, hidden)] * 5  # the prompt, then each step the plan would have taken
    report = nn.plan_report(model)
    assert report.road == "plain" and "layers.1.mlp" in report.reason
    # the hooked layer runs its modules at every step; the other layer keeps its fused form
    assert [nn.plan_report(layer).plain_calls for layer in model.layers] == [0, 6]
    np.testing.assert_array_equal(got, expected)
    handle.remove()
    model.generate(ids, 2)
    assert nn.plan_report(model).road == "plan"


def test_an_activation_the_plan_does_not_serve_sends_steps_down_the_plain_road(
    saved: Mapping[str, tuple[Path, Any]],
) -> None:
    model = from_pretrained(_dir(saved, "gpt2"))
    ids, mask = _prompt()
    model.layers[0].mlp.act = nn.Sigmoid()
    got = model(ids, mask).numpy()
    report = nn.plan_report(model)
    assert report.road == "plain"
    assert report.reason == "layers.0.mlp.act is a Sigmoid, an activation the decoder's plan does not serve"
    np.testing.assert_array_equal(got, _plain(model, lambda: model(ids, mask).numpy()))


def test_token_ids_outside_the_vocabulary_get_the_plain_roads_error(saved: Mapping[str, tuple[Path, Any]]) -> None:
    model = from_pretrained(_dir(saved, "llama"))
    ids, mask = _prompt()
    model(ids, mask)
    bad = ids.numpy().copy()
    bad[0, 2] = VOCAB + 1
    with pytest.raises(packrt.errors.IndexingError, match=str(VOCAB + 1)):
        model(packrt.from_numpy(bad), mask)


def test_a_layer_of_a_subclass_keeps_the_module_road(saved: Mapping[str, tuple[Path, Any]]) -> None:
    model = from_pretrained(_dir(saved, "llama"))

    class Doubled(PreNormLayer):  # computes something the plan cannot know
        def forward(self, *args: Any) -> packrt.Tensor:
            out: packrt.Tensor = super().forward(*args) * 2.0
            return out

    first = model.layers[0]
    doubled = Doubled(first.attention, first.mlp, SMALL["hidden_size"], first.attention_norm.eps)
    doubled.load_state_dict(first.state_dict())
    model.layers[0] = doubled
    ids, mask = _prompt()
    got = model(ids, mask).numpy()
    report = nn.plan_report(model)
    assert report.road == "plain"
    assert report.reason == "layers.0: the block is a Doubled, where the decoder's plan serves a PreNormLayer"
    assert [nn.plan_report(layer).road for layer in model.layers] == ["plain", "plan"]
    assert_same_model_output(got, _plain(model, lambda: model(ids, mask).numpy()))
