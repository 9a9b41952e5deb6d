"""gpt-oss served as transformers serves it: its sinks, its clamped-SwiGLU experts (only the routed ones run), the
settings GptOssConfig derives, and each setting packrt refuses, by name.

The tiny gpt-oss of the family table (hidden 32, two layers: sliding then full, 8 experts and 2 per token in
every layer, the clamp at 0.5, every norm and bias perturbed) is compared with transformers over the same
promises as every family in test_pretrained_matches_transformers (the ``gpt-oss`` row): fp32 padded batches
within 1e-4 under ``borrowed`` and ``packed``, 64 greedy tokens token for token, a left-padded generation
stopped by an eos, a bf16 checkpoint no farther from fp32 than transformers' own bf16 run. Nothing is downloaded.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from peers import VOCAB, assert_greedy_matches, logits, save, tiny_model
from tiny_families import GPT_OSS_FIELDS

import packrt
from packrt.errors import CheckpointError
from packrt.models import ConfigError, GptOssForCausalLM, UnsupportedModelError, from_pretrained
from packrt.models.attention import Step, attend
from packrt.models.gpt_oss import GptOssMoE, StackedExperts

Calls = Counter[tuple[int, int]]


@pytest.fixture
def moe(saved: Mapping[str, tuple[Path, Any]]) -> tuple[GptOssForCausalLM, Any, Calls]:
    """packrt's tiny gpt-oss with a hook counting each (layer, expert) call, and transformers' model."""
    directory, reference = saved["gpt-oss"]
    model = from_pretrained(directory)
    assert isinstance(model, GptOssForCausalLM)
    calls: Calls = Counter()
    for index, layer in enumerate(model.layers):
        assert isinstance(layer.mlp, GptOssMoE)
        # StackedExperts is called as experts(rows, expert): one call per expert run
        layer.mlp.experts.register_forward_hook(lambda _m, args, _out, at=index: calls.update([(at, int(args[1]))]))
    return model, reference, calls


def _edited(saved: Mapping[str, tuple[Path, Any]], tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the tiny gpt-oss directory whose config.json ``edit`` changed in place."""
    directory = tmp_path / "gpt-oss"
    shutil.copytree(saved["gpt-oss"][0], directory)
    config = json.loads((directory / "config.json").read_text())
    edit(config)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_only_the_experts_the_router_picks_run_each_once_per_layer(moe: Any, torch: ModuleType) -> None:
    model, reference, calls = moe
    ids = np.asarray([[5, 17, 33]], dtype=np.int64)
    model(packrt.from_numpy(ids))
    with torch.no_grad():
        routers = reference(torch.from_numpy(ids), output_router_logits=True).router_logits
    picked = {
        (layer, expert) for layer, scores in enumerate(routers) for expert in torch.topk(scores, 2).indices.ravel()
    }
    assert set(calls) == {(layer, int(expert)) for layer, expert in picked}
    assert all(count == 1 for count in calls.values()), calls  # one call per expert, all its tokens at once
    assert all(len([key for key in calls if key[0] == layer]) < 8 for layer in (0, 1))  # some experts never ran


def test_a_decode_step_runs_top_k_experts_per_layer(moe: Any) -> None:
    model, _, calls = moe
    prompt = np.asarray([[5, 17, 33, 2]], dtype=np.int64)
    model.generate(packrt.from_numpy(prompt), 1)  # the prompt only: one forward
    prefill = sum(calls.values())
    calls.clear()
    model.generate(packrt.from_numpy(prompt), 5)  # the prompt, then four one-token steps
    assert sum(calls.values()) == prefill + 4 * 2 * 2  # four steps, two layers, two experts each


def test_the_routing_weights_are_the_softmax_of_the_top_k_scores(moe: Any) -> None:
    model, _, _ = moe
    block = model.layers[0].mlp
    flat = np.random.default_rng(0).standard_normal((6, 32)).astype(np.float32)
    chosen, weights = block.route(packrt.from_numpy(flat))
    scores = flat @ block.router.weight.numpy().T + block.router.bias.numpy()  # the router's bias counts
    best = np.argsort(-scores, axis=-1)[:, :2]
    np.testing.assert_array_equal(chosen, best)  # best first
    top = np.take_along_axis(scores, best, axis=-1)
    expected = np.exp(top) / np.exp(top).sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(weights, expected, rtol=1e-5)


def test_an_expert_computes_transformers_clamped_swiglu_on_interleaved_gate_and_up(moe: Any, torch: ModuleType) -> None:
    model, reference, _ = moe
    ours: StackedExperts = model.layers[0].mlp.experts
    theirs = reference.model.layers[0].mlp.experts
    x = np.random.default_rng(1).standard_normal((5, 32)).astype(np.float32) * 4  # wide: past the clamp both ways
    for expert in (0, 5):
        with torch.no_grad():
            gate_up = torch.from_numpy(x) @ theirs.gate_up_proj[expert] + theirs.gate_up_proj_bias[expert]
            expected = theirs._apply_gate(gate_up) @ theirs.down_proj[expert] + theirs.down_proj_bias[expert]
        assert (gate_up[:, ::2] > 0.5).any() and (gate_up[:, 1::2] < -0.5).any()  # both clamps bite
        out = ours(packrt.from_numpy(x), expert).numpy()
        np.testing.assert_allclose(out, expected.numpy(), atol=1e-5)


def test_a_sink_takes_its_share_of_each_heads_softmax() -> None:
    rng = np.random.default_rng(2)
    q, k, v = (packrt.from_numpy(rng.standard_normal((1, 4, 6, 8)).astype(np.float32)) for _ in range(3))
    k, v = k[:, :2], v[:, :2]  # two key/value heads for four query heads

    def attended(sinks: list[float] | None) -> np.ndarray:
        given = None if sinks is None else packrt.from_numpy(np.asarray(sinks, dtype=np.float32))
        return attend(q, k, v, step=Step(0, 6, None), cache=None, layer=0, sinks=given).numpy()

    plain = attended(None)
    np.testing.assert_allclose(attended([-80.0] * 4), plain, atol=1e-6)  # a sink nobody reaches: no change
    drowned = attended([80.0, -80.0, -80.0, -80.0])  # the first head's sink takes all its weight
    np.testing.assert_allclose(drowned[:, 0], 0.0, atol=1e-6)
    np.testing.assert_allclose(drowned[:, 1:], plain[:, 1:], atol=1e-6)


def test_a_config_without_rope_or_layer_types_means_what_gpt_oss_config_derives(
    saved: Mapping[str, tuple[Path, Any]], tmp_path: Path, torch: ModuleType, transformers: ModuleType
) -> None:
    def strip(config: dict[str, Any]) -> None:
        del config["rope_parameters"], config["layer_types"]

    directory = _edited(saved, tmp_path, strip)
    model = from_pretrained(directory)
    assert [layer.attention.window for layer in model.layers] == [4, None]  # sliding first, then full
    reference = transformers.GptOssForCausalLM.from_pretrained(directory).eval()
    ids = np.random.default_rng(3).integers(1, VOCAB, (2, 9)).astype(np.int64)
    np.testing.assert_allclose(model(packrt.from_numpy(ids)).numpy(), logits(torch, reference, ids), atol=1e-4)


def _set(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda config: config.update({name: value})


@pytest.mark.parametrize(
    ("edit", "error", "match"),
    [
        (_set("num_experts_per_tok", 9), ConfigError, r"field 'num_experts_per_tok' is 9, more than the 8 experts"),
        (_set("swiglu_limit", 0.0), ConfigError, r"field 'swiglu_limit' is 0.0, expected a finite positive number"),
        (
            _set("layer_types", ["sliding_attention", "chunked_attention"]),
            UnsupportedModelError,
            r"field 'layer_types\[1\]' is 'chunked_attention': packrt does not implement",
        ),
        (
            _set("rope_parameters", {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 150000.0}),
            UnsupportedModelError,
            r"rope_type.*'dynamic'",
        ),
    ],
    ids=["top-k-above-the-experts", "swiglu-limit-zero", "chunked-attention", "dynamic-rope"],
)
def test_each_setting_packrt_does_not_serve_is_refused_naming_the_field(
    saved: Mapping[str, tuple[Path, Any]], tmp_path: Path, edit: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        from_pretrained(_edited(saved, tmp_path, edit))


def _mxfp4_directory(transformers: ModuleType, torch: ModuleType, tmp_path: Path, half: bool = False) -> Path:
    """A tiny gpt-oss saved as gpt-oss's published checkpoints are: each layer's experts as MXFP4 blocks (uint8,
    two E2M1 values a byte, 32 a group) and scales (uint8 E8M0 exponents), config.json's ``quantization_config``;
    its other weights in float32, or (``half``) in bfloat16 as gpt-oss's are."""
    from safetensors.numpy import load_file, save_file

    torch.manual_seed(0)
    fields = {"vocab_size": VOCAB, **GPT_OSS_FIELDS, "intermediate_size": 32}  # widths of whole 32-value groups
    model = tiny_model(transformers, "GptOssConfig", "GptOssForCausalLM", **fields)
    directory, _ = save(model.to(torch.bfloat16) if half else model, tmp_path / "mxfp4")
    tensors = load_file(directory / "model.safetensors")
    rng = np.random.default_rng(4)
    for key in [key for key in tensors if key.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        experts, rows, cols = tensors.pop(key).shape
        tensors[f"{key}_blocks"] = rng.integers(0, 256, (experts, cols, rows // 32, 16), dtype=np.uint8)
        tensors[f"{key}_scales"] = rng.integers(118, 125, (experts, cols, rows // 32), dtype=np.uint8)  # 2**-9..-3
    save_file(tensors, directory / "model.safetensors")
    config = json.loads((directory / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_an_mxfp4_checkpoint_serves_its_experts_dequantized_as_transformers_dequantizes_them(
    transformers: ModuleType, torch: ModuleType, tmp_path: Path
) -> None:
    directory = _mxfp4_directory(transformers, torch, tmp_path)
    model = from_pretrained(directory)
    reference = transformers.GptOssForCausalLM.from_pretrained(directory).eval()  # on a CPU: dequantized at load
    for index, layer in enumerate(model.layers):  # bit for bit: every E2M1 value times 2**k is exact in float32
        theirs = reference.model.layers[index].mlp.experts
        np.testing.assert_array_equal(layer.mlp.experts.gate_up_proj.numpy(), theirs.gate_up_proj.detach().numpy())
        np.testing.assert_array_equal(layer.mlp.experts.down_proj.numpy(), theirs.down_proj.detach().numpy())
    ids = np.random.default_rng(5).integers(1, VOCAB, (2, 6)).astype(np.int64)
    np.testing.assert_allclose(model(packrt.from_numpy(ids)).numpy(), logits(torch, reference, ids), atol=1e-4)
    assert_greedy_matches(torch, model, reference, ids, 64)


def test_mxfp4_experts_take_the_dtype_of_the_checkpoints_other_weights(
    transformers: ModuleType, torch: ModuleType, tmp_path: Path
) -> None:
    directory = _mxfp4_directory(transformers, torch, tmp_path, half=True)
    model = from_pretrained(directory)
    reference = transformers.GptOssForCausalLM.from_pretrained(directory, dtype=torch.bfloat16).eval()
    ours, theirs = model.layers[0].mlp.experts.down_proj, reference.model.layers[0].mlp.experts.down_proj
    assert {p.dtype for p in model.parameters()} == {packrt.bfloat16}  # one dtype: no cast asked for
    np.testing.assert_array_equal(ours.to(packrt.float32).numpy(), theirs.detach().float().numpy())  # exact
    assert from_pretrained(directory, dtype="float32").layers[0].mlp.experts.down_proj.dtype is packrt.float32


def test_an_mxfp4_pair_without_its_scales_is_refused_naming_the_tensor(
    transformers: ModuleType, torch: ModuleType, tmp_path: Path
) -> None:
    from safetensors.numpy import load_file, save_file

    quantized = _mxfp4_directory(transformers, torch, tmp_path)
    tensors = load_file(quantized / "model.safetensors")
    del tensors["model.layers.1.mlp.experts.down_proj_scales"]
    save_file(tensors, quantized / "model.safetensors")
    with pytest.raises(
        CheckpointError, match=r"MXFP4 tensor 'model.layers.1.mlp.experts.down_proj_blocks' .* no scales"
    ):
        from_pretrained(quantized)


def test_another_quantization_method_is_refused_naming_it(
    saved: Mapping[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    directory = _edited(saved, tmp_path, _set("quantization_config", {"quant_method": "gptq", "bits": 4}))
    with pytest.raises(ConfigError, match=r"field 'quantization_config.quant_method' is 'gptq'.*'mxfp4'"):
        from_pretrained(directory)
