"""A one-token step through a decoder layer of quantized blocks runs as one compiled call
(``packrt_kernels_cpu.decode``): the same kernels, in the same order, as the layer's kernel-by-kernel road, so
the same bits at every step, for every feature of the layers GGUF files hold (q/k/v biases, per-head norms,
sandwich norms, sliding windows, fused projections), over a padded batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from gguf_files import write_gguf
from peers import VOCAB, perturb_norms, tiny_model

import packrt
from packrt import nn
from packrt.models import from_pretrained
from packrt_kernels_cpu import block_tiles, decode
from packrt_kernels_cpu import settings as kernel_settings

WIDTHS = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "max_position_embeddings": 64}
GROUPED = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
# arch -> (config class, model class, fields besides WIDTHS)
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", GROUPED),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {**GROUPED, "tie_word_embeddings": True}),  # q/k/v biases
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {**GROUPED, "head_dim": 32}),  # per-head norms
    "gemma3": (  # sandwich norms, gelu-tanh, local layers whose window is shorter than the run
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {
            "num_hidden_layers": 6,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "query_pre_attn_scalar": 32,
            "sliding_window": 4,
            "tie_word_embeddings": False,
        },
    ),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", GROUPED),  # fused qkv_proj and gate_up_proj
}
STEP_LINE = "a one-token step: the whole layer in one compiled call"
# the step runs on the q8 dot tiles, which need numba's kernels (not under PACKRT_NUMBA=0) and AVX2
pytestmark = pytest.mark.skipif(not block_tiles.available(), reason="no q8 dot tiles here (numba off, or no AVX2)")


@pytest.fixture(scope="module")
def models(transformers: ModuleType, torch: ModuleType) -> dict[str, Any]:
    torch.manual_seed(0)
    built = {
        name: tiny_model(transformers, config_class, model_class, **WIDTHS, **fields)
        for name, (config_class, model_class, fields) in FAMILIES.items()
    }
    for model in built.values():
        perturb_norms(torch, model)
        with torch.no_grad():  # transformers starts biases at zero: a bias the step dropped would not show
            for name, tensor in model.state_dict().items():
                if name.endswith(".bias"):
                    tensor.add_(0.3 * torch.randn_like(tensor))
    return built


# llama.cpp's Q4_K_M mix of a model whose widths are no multiple of 256: Q5_0 mostly, values and the MLP's up in
# other types, so q, k, v (and gate, up) cannot be joined into one weight
MIXED = {"attn_v": "Q8_0", "ffn_up": "Q4_1"}


def _load(gguf: ModuleType, models: dict[str, Any], tmp_path: Path, arch: str, kind: str) -> Any:
    extra: dict[str, Any] = {"pad_token_id": 0} if arch == "phi3" else {}  # Phi3Config's default pad id is too big
    if kind == "mixed":
        kind, extra = "Q5_0", {**extra, "kinds_by_name": MIXED}
    return from_pretrained(write_gguf(gguf, models[arch], tmp_path / f"{arch}-{kind}.gguf", kind, **extra))


def _prompt() -> tuple[packrt.Tensor, packrt.Tensor]:
    """Two prompts, the first left-padded by three positions."""
    ids = np.random.default_rng(5).integers(1, VOCAB, (2, 7)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[0, :3] = 0
    return packrt.tensor(ids), packrt.tensor(mask)


@pytest.fixture
def one_call_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts, per decode step, the layers that ran in one call (the road under test was the road taken)."""
    taken: list[int] = []
    run = decode.BlockDecodeStep.run

    def counted(self: decode.BlockDecodeStep, *args: Any) -> Any:
        out = run(self, *args)
        taken.append(int(out is not None))
        return out

    monkeypatch.setattr(decode.BlockDecodeStep, "run", counted)
    return taken


def _each_steps_logits(model: Any, generate: Callable[[], Any]) -> list[np.ndarray]:
    seen: list[np.ndarray] = []
    handle = model.lm_head.register_forward_hook(lambda m, args, out: seen.append(out.numpy().copy()))
    try:
        generate()
    finally:
        handle.remove()
    return seen


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_1", "mixed"])
@pytest.mark.parametrize("arch", sorted(FAMILIES))
def test_a_decode_step_in_one_call_gives_the_kernel_by_kernel_roads_logits_bit_for_bit(
    gguf: ModuleType, models: dict[str, Any], tmp_path: Path, one_call_steps: list[int], arch: str, kind: str
) -> None:
    model = _load(gguf, models, tmp_path, arch, kind)
    ids, mask = _prompt()

    def run() -> Any:
        return model.generate(ids, 12, attention_mask=mask)

    one_call = _each_steps_logits(model, run)
    layers = len(model.layers)
    assert one_call_steps == [1] * (11 * layers), "every layer of the 11 one-token steps runs in one call"
    report = nn.plan_report(model)
    assert report.road == "plan", report.reason
    assert any(STEP_LINE in line for line in report.fused), report.fused
    with kernel_settings.override(decode_step="kernels"):
        by_kernel = _each_steps_logits(model, run)
    assert one_call_steps[11 * layers :] == [0] * (11 * layers), "PACKRT_DECODE_STEP=kernels: none in one call"
    assert len(one_call) == len(by_kernel) == 12
    for step, (got, expected) in enumerate(zip(one_call, by_kernel, strict=True)):
        np.testing.assert_array_equal(got, expected, err_msg=f"{arch} {kind}, step {step}")


def test_a_decode_step_on_two_threads_gives_the_bits_of_one(
    gguf: ModuleType, transformers: ModuleType, torch: ModuleType, tmp_path: Path, one_call_steps: list[int]
) -> None:
    """Linears of 2^16 weights or more split their rows over the pool (the qkv and MLP ones here); no row's sum
    depends on how the rows are shared out."""
    if os.cpu_count() == 1:
        pytest.skip("one core: the pool has one thread")
    torch.manual_seed(1)
    wide = {**WIDTHS, "hidden_size": 256, "intermediate_size": 512, **GROUPED}
    original = tiny_model(transformers, "Qwen2Config", "Qwen2ForCausalLM", **wide)
    model = from_pretrained(write_gguf(gguf, original, tmp_path / "wide.gguf", "Q8_0"))
    ids, mask = _prompt()
    before = packrt.get_num_threads()
    try:
        packrt.set_num_threads(1)
        alone = _each_steps_logits(model, lambda: model.generate(ids, 8, attention_mask=mask))
        packrt.set_num_threads(2)
        shared = _each_steps_logits(model, lambda: model.generate(ids, 8, attention_mask=mask))
    finally:
        packrt.set_num_threads(before)
    assert one_call_steps == [1] * (2 * 7 * len(model.layers))
    for step, (got, expected) in enumerate(zip(shared, alone, strict=True)):
        np.testing.assert_array_equal(got, expected, err_msg=f"step {step}")


def test_a_layer_with_float_weights_keeps_the_kernel_by_kernel_step(
    gguf: ModuleType, models: dict[str, Any], tmp_path: Path
) -> None:
    """The one-call step serves linears of quantized blocks only: an F32 file's layers step kernel by kernel
    (and say so by leaving the line out of the plan report)."""
    model = _load(gguf, models, tmp_path, "llama", "F32")
    ids, mask = _prompt()
    model.generate(ids, 3, attention_mask=mask)
    report = nn.plan_report(model)
    assert report.road == "plan", report.reason
    assert not any(STEP_LINE in line for line in report.fused), report.fused
