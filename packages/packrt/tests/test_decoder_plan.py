"""The causal LMs' serving plan (packrt.models.decoder_plan) gives the module-by-module road's logits and
tokens (llama with grouped-query attention, qwen2's biases, mistral's sliding window, gpt2; fp32, bf16,
int8; padded prompts), and a hook on an inner module sees every step of a generation."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import packrt
from packrt import nn
from packrt.models import from_pretrained
from packrt_kernels_cpu.tolerance import assert_same_model_output

VOCAB = 64
COMMON = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "max_position_embeddings": 64}
CONFIGS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"num_attention_heads": 4, "num_key_value_heads": 2}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"num_attention_heads": 4, "num_key_value_heads": 2}),
    "mistral": (
        "MistralConfig",
        "MistralForCausalLM",
        {"num_attention_heads": 4, "num_key_value_heads": 1, "sliding_window": 5},
    ),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}),
}


@pytest.fixture(scope="module")
def saved(transformers: ModuleType, torch: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    torch.manual_seed(0)
    out = {}
    for name, (config_class, model_class, extra) in CONFIGS.items():
        fields = {**COMMON, "intermediate_size": 48, "initializer_range": 0.2, **extra}
        if name == "gpt2":
            fields = {"vocab_size": VOCAB, "initializer_range": 0.2, **extra}
        model = getattr(transformers, model_class)(getattr(transformers, config_class)(**fields)).eval()
        directory = tmp_path_factory.mktemp(name)
        model.save_pretrained(directory, safe_serialization=True)
        out[name] = directory
    return out


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


@pytest.mark.parametrize("family", list(CONFIGS))
@pytest.mark.parametrize("options", [{}, {"dtype": "bfloat16"}, {"quantize": "int8"}], ids=["fp32", "bf16", "int8"])
def test_the_plan_gives_the_plain_roads_logits(saved: dict[str, Path], family: str, options: dict[str, Any]) -> None:
    model = from_pretrained(saved[family], **options)
    ids, mask = _prompt()
    planned = model(ids, mask).numpy()
    assert nn.plan_report(model).road == "plan", nn.plan_report(model).reason
    plain = _plain(model, lambda: model(ids, mask).numpy())
    assert_same_model_output(planned, plain, err_msg=f"{family} {options}")


@pytest.mark.parametrize("family", list(CONFIGS))
def test_greedy_generation_gives_the_same_tokens_on_both_roads(saved: dict[str, Path], family: str) -> None:
    model = from_pretrained(saved[family])
    ids, mask = _prompt(1)
    planned = model.generate(ids, 12, attention_mask=mask).numpy()
    report = nn.plan_report(model)
    assert report.road == "plan" and report.planned_calls == 12  # the prompt and each new token: one step each
    plain = _plain(model, lambda: model.generate(ids, 12, attention_mask=mask).numpy())
    np.testing.assert_array_equal(planned, plain)


def test_a_hook_on_an_inner_module_sees_every_step_of_a_generation(saved: dict[str, Path]) -> None:
    model = from_pretrained(saved["llama"])
    ids, _ = _prompt()
    expected = model.generate(ids, 6).numpy()
    steps: list[tuple[int, ...]] = []
    handle = model.layers[1].mlp.register_forward_hook(lambda m, args, out: steps.append(tuple(out.shape)))
    got = model.generate(ids, 6).numpy()
    assert steps == [(2, 9, 32)] + [(2, 1, 32)] * 5  # the prompt, then each step the plan would have taken
    report = nn.plan_report(model)
    assert report.road == "plain" and "layers.1.mlp" in report.reason
    np.testing.assert_array_equal(got, expected)
    handle.remove()
    model.generate(ids, 2)
    assert nn.plan_report(model).road == "plan"


def test_an_activation_the_plan_does_not_serve_sends_steps_down_the_plain_road(saved: dict[str, Path]) -> None:
    model = from_pretrained(saved["gpt2"])
    ids, mask = _prompt()
    model.layers[0].mlp.act = nn.Sigmoid()
    got = model(ids, mask).numpy()
    report = nn.plan_report(model)
    assert report.road == "plain"
    assert report.reason == "layers.0.mlp.act is a Sigmoid, an activation the decoder's plan does not serve"
    np.testing.assert_array_equal(got, _plain(model, lambda: model(ids, mask).numpy()))


def test_token_ids_outside_the_vocabulary_get_the_plain_roads_error(saved: dict[str, Path]) -> None:
    model = from_pretrained(saved["llama"])
    ids, mask = _prompt()
    model(ids, mask)
    bad = ids.numpy().copy()
    bad[0, 2] = VOCAB + 1
    with pytest.raises(packrt.errors.IndexingError, match=str(VOCAB + 1)):
        model(packrt.from_numpy(bad), mask)
