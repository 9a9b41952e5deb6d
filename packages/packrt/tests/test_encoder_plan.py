"""The BERT-family encoders' serving plan (packrt.models.encoder_plan) gives the module-by-module road's
numbers, fp32, half weights, int8 and padded batches, and gives way to that road whenever a hook could
tell them apart or the model changed.

Tiny random bert / roberta models are saved with transformers' save_pretrained; the plain road is the
same model called inside ``serving_plans(False)``. Whole-model outputs are compared with
``assert_same_model_output`` (``MODEL_ROAD_TOLERANCES``, docs/guides/determinism.md).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from peers import encoder_fields, padded_batch, save

import packrt
from packrt import nn
from packrt.errors import IndexingError, ShapeError
from packrt.models import SentenceEncoder, from_pretrained
from packrt_kernels_cpu import float_tiles, settings
from packrt_kernels_cpu.tolerance import assert_same_model_output

VOCAB, PAD = 97, 1
SMALL = encoder_fields(PAD, type_vocab_size=2)
FAMILIES = {"bert": ("BertConfig", "BertModel"), "roberta": ("RobertaConfig", "RobertaModel")}


@pytest.fixture(scope="module")
def saved(transformers: ModuleType, torch: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    torch.manual_seed(0)
    out = {}
    for name, (config_class, model_class) in FAMILIES.items():
        kwargs = {"add_pooling_layer": False} if name == "bert" else {}
        model = getattr(transformers, model_class)(getattr(transformers, config_class)(**SMALL), **kwargs)
        out[name], _ = save(model, tmp_path_factory.mktemp(name))
    return out


def _batch(seed: int = 0) -> tuple[packrt.Tensor, packrt.Tensor, packrt.Tensor]:
    """ids, attention_mask, token types: a full row, a right-padded one, a left-padded one."""
    ids, mask, types = padded_batch(seed, PAD)
    return packrt.from_numpy(ids), packrt.from_numpy(mask), packrt.from_numpy(types)


def _both(model: nn.Module, *args: Any) -> tuple[np.ndarray, np.ndarray]:
    """(the planned call's output, the plain road's), checking the first really took the plan."""
    planned = model(*args).numpy()
    assert nn.plan_report(model).road == "plan", nn.plan_report(model).reason
    with nn.serving_plans(False):
        plain = model(*args).numpy()
    return planned, plain


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"weight_residency": "borrowed"},
        {"dtype": "bfloat16"},
        {"dtype": "float16"},
        {"quantize": "int8"},
    ],
    ids=["fp32", "fp32-borrowed", "bf16", "fp16", "int8"],
)
def test_the_plan_gives_the_plain_roads_numbers(saved: dict[str, Path], family: str, options: dict[str, Any]) -> None:
    model = from_pretrained(saved[family], **options)
    ids, mask, types = _batch()
    for args in ((ids, mask, types), (ids, mask), (ids,)):
        planned, plain = _both(model, *args)
        assert_same_model_output(planned, plain, err_msg=f"{family} {options} with {len(args)} inputs")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_each_half_precision_block_is_its_float32_computation_rounded_once(saved: dict[str, Path], dtype: str) -> None:
    """On numpy's GEMM road. float16 weights are widened to float32 at pack time; so are bfloat16 ones on a
    CPU without AVX512-BF16. Where it has them, a bfloat16 weight stays bfloat16 panels and multiplies the
    activations rounded to bfloat16 (packrt_kernels_cpu.float_tiles), so the reference rounds each Linear's
    input too. (MKL's road keeps a bfloat16 weight as it is likewise; the fused blocks keep to the module
    road's numbers there, the test above.)"""
    half = getattr(packrt, dtype)
    with settings.override(blas="numpy"):
        model = from_pretrained(saved["bert"], dtype=dtype)
        reference = from_pretrained(saved["bert"])  # float32, on the same (rounded) weights
        reference.load_state_dict({k: v.to(packrt.float32) for k, v in model.state_dict().items()})
        for block in (reference.embeddings, *reference.layers):  # each block's output rounded once, as the plan's
            block.register_forward_hook(lambda m, args, out: out.to(half).to(packrt.float32))
        rounds_inputs = dtype == "bfloat16" and float_tiles.available(ml_dtypes.bfloat16)
        if rounds_inputs:  # a Linear's hook keeps the reference on the module road: plain and plan agree (above)
            for layer in reference.modules():
                if type(layer) is nn.Linear:
                    layer.register_forward_pre_hook(lambda m, args: (args[0].to(half).to(packrt.float32),))
        ids, mask, types = _batch()
        planned = model(ids, mask, types)
        expected = reference(ids, mask, types).numpy()
    assert nn.plan_report(model).road == "plan"
    assert nn.plan_report(reference).road == ("plain" if rounds_inputs else "plan")
    ulp = 2.0 ** (-8 if dtype == "bfloat16" else -11)  # half a unit in the last place, relative
    bound = 2 * ulp * np.abs(expected) + 1e-6  # two roundings at most: the output's, and float32 noise below it
    assert np.all(np.abs(planned.to(packrt.float32).numpy() - expected) <= bound)


def test_packed_query_key_and_value_share_one_weight_with_no_copy_left_over(saved: dict[str, Path]) -> None:
    model = from_pretrained(saved["bert"])
    model.initialize()
    packed = nn.memory_report(model).totals()["packed"]
    model(*_batch())
    attention = model.layers[0].attention
    packs = [layer._serving_pack() for layer in (attention.q_proj, attention.k_proj, attention.v_proj)]
    # W^T's columns, or float32 panels (AVX-512: packrt_kernels_cpu.float_tiles): views of one QKV weight
    q, k, v = (pack.panels.data if hasattr(pack, "panels") else pack.wt for pack in packs)
    assert q.base is not None and q.base is k.base is v.base
    assert nn.memory_report(model).totals()["packed"] == packed  # the layers' own copies were freed
    assert nn.plan_report(model).nbytes < packed // 10  # the plan holds the norms' weights, nothing big


def test_a_hook_sees_every_inner_call_with_plans_enabled(saved: dict[str, Path]) -> None:
    model = from_pretrained(saved["roberta"])
    args = _batch()
    expected = model(*args).numpy()
    assert nn.plan_report(model).road == "plan"
    seen: dict[str, int] = {}
    handles = [
        module.register_forward_hook(lambda m, a, out, path=path: seen.__setitem__(path, seen.get(path, 0) + 1))
        for path, module in model.named_modules()
        if module is not model
    ]
    got = model(*args).numpy()
    report = nn.plan_report(model)
    assert report.road == "plain" and "hook" in report.reason
    called = {path for path, m in model.named_modules() if m is not model and path != "layers"}  # a list, not called
    assert set(seen) == called
    with nn.serving_plans(False):
        plans_on_counts = dict(seen)
        model(*args)
    assert {path: n - plans_on_counts[path] for path, n in seen.items()} == plans_on_counts  # as many as plans-off
    np.testing.assert_array_equal(got, model(*args).numpy())
    for handle in handles:
        handle.remove()
    assert_same_model_output(model(*args).numpy(), expected)
    assert nn.plan_report(model).road == "plan"


def test_a_weight_edit_and_a_residency_change_rebuild_the_plan(saved: dict[str, Path]) -> None:
    model = from_pretrained(saved["bert"])
    args = _batch()
    model(*args)
    model.layers[1].mlp.up.weight.mul_(1.5)
    planned, plain = _both(model, *args)
    assert_same_model_output(planned, plain)
    model.layers[0].attention.k_proj.set_weight_residency("borrowed")  # q, k, v no longer joinable
    planned, plain = _both(model, *args)
    assert_same_model_output(planned, plain)
    # the embeddings and two layers planned once each, then each changed layer again (and only it)
    assert nn.plan_report(model).builds == 3 + 2
    assert (nn.plan_report(model.layers[0]).builds, nn.plan_report(model.embeddings).builds) == (2, 1)
    assert "three GEMMs" in nn.plan_report(model.layers[0]).fused[0]
    assert "one GEMM" in nn.plan_report(model.layers[1]).fused[0]


def test_a_replaced_submodule_the_plan_does_not_know_sends_calls_down_the_plain_road(saved: dict[str, Path]) -> None:
    model = from_pretrained(saved["bert"])
    args = _batch()
    model(*args)
    model.layers[1].mlp.act = nn.ReLU()
    got = model(*args).numpy()
    report = nn.plan_report(model)
    assert report.road == "plain"
    assert report.reason == "layers.1.mlp.act is a ReLU, where the encoder's plan serves a GELU"
    # only the block that holds it runs its modules; the others keep their fused forms
    roads = [nn.plan_report(block).road for block in (model.embeddings, *model.layers)]
    assert roads == ["plan", "plan", "plain"]
    with nn.serving_plans(False):
        assert_same_model_output(got, model(*args).numpy())
    model.layers[1].mlp.act = nn.GELU(approximate="tanh")  # a GELU again: the plan serves it
    planned, plain = _both(model, *args)
    assert_same_model_output(planned, plain)


def test_inputs_the_plan_does_not_take_get_the_plain_roads_errors(saved: dict[str, Path]) -> None:
    model = from_pretrained(saved["bert"])
    ids, mask, types = _batch()
    model(ids, mask, types)
    bad = ids.numpy().copy()
    bad[0, 0] = VOCAB + 5
    with pytest.raises(IndexingError, match=str(VOCAB + 5)):
        model(packrt.from_numpy(bad), mask)
    with pytest.raises(ShapeError, match="token_type_ids has shape"):
        model(ids, mask, packrt.from_numpy(types.numpy()[:, :5]))


def test_a_float64_model_serves_the_plain_road_and_says_why(saved: dict[str, Path]) -> None:
    model = from_pretrained(saved["bert"], dtype="float64")
    model(*_batch())
    report = nn.plan_report(model)
    assert report.road == "plain" and "float64" in report.reason


def test_sentence_embeddings_are_the_same_on_both_roads(minilm_dir: Path) -> None:
    encoder = SentenceEncoder.from_pretrained(minilm_dir)
    texts = ["a query", "a longer sentence about serving plans and hooks", "", "padding makes rows uneven"]
    planned = encoder.encode(texts)
    assert nn.plan_report(encoder.model).road == "plan"
    with nn.serving_plans(False):
        plain = encoder.encode(texts)
    assert_same_model_output(planned, plain)
