"""A sparse mixture-of-experts layer runs only the experts its router picks: counted by forward hooks on every
expert of the tiny Qwen3-MoE of the family table (8 experts, 2 per token, first layer sparse, second dense),
against the experts transformers' own router picks for the same tokens. Its logits and greedy tokens against
transformers are in test_pretrained_matches_transformers (the ``qwen3-moe`` row)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import packrt
from packrt.models import Qwen3MoeForCausalLM, from_pretrained
from packrt.models.moe import SparseMoE


@pytest.fixture
def moe(saved: Mapping[str, tuple[Path, Any]]) -> tuple[Qwen3MoeForCausalLM, Any, Counter[tuple[int, int]]]:
    """packrt's model with a hook counting each (layer, expert) call, and transformers' model."""
    directory, reference = saved["qwen3-moe"]
    model = from_pretrained(directory)
    assert isinstance(model, Qwen3MoeForCausalLM)
    calls: Counter[tuple[int, int]] = Counter()
    for index, layer in enumerate(model.layers):
        if isinstance(layer.mlp, SparseMoE):
            for number, expert in enumerate(layer.mlp.experts):
                expert.register_forward_hook(lambda *_, key=(index, number): calls.update([key]))
    return model, reference, calls


def _picked(torch: ModuleType, reference: Any, ids: np.ndarray) -> set[int]:
    """The experts transformers' router of the first layer picks for ``ids`` (its top 2 per token)."""
    with torch.no_grad():
        out = reference(torch.from_numpy(ids), output_router_logits=True)
    logits = out.router_logits[0]
    return set(torch.topk(logits, 2, dim=-1).indices.ravel().tolist())


def test_only_the_experts_the_router_picks_run_each_once(moe: Any, torch: ModuleType) -> None:
    model, reference, calls = moe
    ids = np.asarray([[5, 17, 33]], dtype=np.int64)
    model(packrt.from_numpy(ids))
    picked = _picked(torch, reference, ids)
    assert set(calls) == {(0, expert) for expert in picked}  # the dense second layer has no experts to call
    assert all(count == 1 for count in calls.values()), calls  # one call per expert, all its tokens at once
    assert len(picked) < 8  # three tokens reach some experts only: the others are never called


def test_a_decode_step_runs_top_k_experts_per_sparse_layer(moe: Any) -> None:
    model, _, calls = moe
    prompt = np.asarray([[5, 17, 33, 2]], dtype=np.int64)
    model.generate(packrt.from_numpy(prompt), 1)  # the prompt only: one forward
    prefill = sum(calls.values())
    calls.clear()
    model.generate(packrt.from_numpy(prompt), 5)  # the prompt, then four one-token steps
    assert sum(calls.values()) == prefill + 4 * 2


def test_the_routing_weights_sum_to_one_when_normalized(moe: Any) -> None:
    model, _, _ = moe
    block = model.layers[0].mlp
    flat = packrt.from_numpy(np.random.default_rng(0).standard_normal((6, 32)).astype(np.float32))
    chosen, weights = block.route(flat)
    assert chosen.shape == weights.shape == (6, 2)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-6)
    assert all(len(set(row)) == 2 for row in chosen.tolist())


def test_a_top_k_above_the_experts_is_refused_naming_the_field(
    saved: Mapping[str, tuple[Path, Any]], tmp_path: Path
) -> None:
    import json
    import shutil

    from packrt.errors import CheckpointError

    directory = tmp_path / "moe"
    shutil.copytree(saved["qwen3-moe"][0], directory)
    config = json.loads((directory / "config.json").read_text())
    config["num_experts_per_tok"] = 9
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"field 'num_experts_per_tok' is 9, more than the 8 experts"):
        from_pretrained(directory)
