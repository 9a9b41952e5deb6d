"""Rules of serving the llama, qwen2, mistral and gpt2 families loaded from save_pretrained directories.

What every family must do against transformers (padded batches, greedy and eos generations, bf16) is checked
over all of them in test_pretrained_matches_transformers; here: the sharded fixture, generation on the model's
device, the decode loop's steps, sampling, borrowed serving, and a bf16 checkpoint served as stored or cast.
Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from peers import VOCAB, assert_served_borrowed, logits

import packrt
from packrt.models import CausalLM, from_pretrained


def _ids(batch: int, seq: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, VOCAB, (batch, seq)).astype(np.int64)


def test_the_llama_fixture_is_sharded_with_an_index(saved: Any) -> None:
    directory, _ = saved["llama"]
    assert (directory / "model.safetensors.index.json").is_file()
    assert len(list(directory.glob("model-*-of-*.safetensors"))) > 1
    assert not (directory / "model.safetensors").exists()


@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2"])
def test_generation_runs_on_the_models_device_and_returns_its_tokens_there(
    saved: Any, stand_in_cuda: packrt.Device, name: str
) -> None:
    model = from_pretrained(saved[name][0], weight_residency="borrowed")
    ids = _ids(2, 7, seed=3)
    mask = np.ones_like(ids)
    mask[1, :2], ids[1, :2] = 0, 0  # left padding: the key mask and positions are placed too
    on_cpu = model.generate(packrt.from_numpy(ids), 6, attention_mask=packrt.from_numpy(mask)).numpy()
    model.to(stand_in_cuda)
    device_ids = packrt.from_numpy(ids).to(stand_in_cuda)
    device_mask = packrt.from_numpy(mask).to(stand_in_cuda)
    out = model.generate(device_ids, 6, attention_mask=device_mask)
    assert out.device == stand_in_cuda
    np.testing.assert_array_equal(out.cpu().numpy(), on_cpu)
    logits = model(device_ids, attention_mask=device_mask)
    assert logits.device == stand_in_cuda


def test_generation_runs_the_prefix_once_then_one_token_per_step(saved: Any) -> None:
    model = from_pretrained(saved["llama"][0])
    assert isinstance(model, CausalLM)
    embedded: list[tuple[int, ...]] = []
    model.embed.register_forward_hook(lambda _m, args, _out: embedded.append(tuple(args[0].shape)))
    model.generate(packrt.from_numpy(_ids(1, 9)), 5)
    assert embedded == [(1, 9), (1, 1), (1, 1), (1, 1), (1, 1)]


def test_sampling_with_a_seed_repeats_and_top_k_1_is_greedy(saved: Any) -> None:
    model = from_pretrained(saved["qwen2"][0])
    ids = packrt.from_numpy(_ids(2, 5, seed=3))
    first = model.generate(ids, 8, do_sample=True, temperature=0.8, top_p=0.9, seed=7).numpy()
    again = model.generate(ids, 8, do_sample=True, temperature=0.8, top_p=0.9, seed=7).numpy()
    np.testing.assert_array_equal(first, again)
    greedy = model.generate(ids, 8).numpy()
    np.testing.assert_array_equal(model.generate(ids, 8, do_sample=True, top_k=1, seed=1).numpy(), greedy)


def test_borrowed_serves_from_the_mapped_shards_and_packs_nothing(saved: Any) -> None:
    model = from_pretrained(saved["llama"][0], weight_residency="borrowed")
    model(packrt.from_numpy(_ids(1, 4)))
    assert_served_borrowed(model)


def test_a_bf16_checkpoint_is_served_in_bf16_or_cast_as_asked(saved: Any, torch: ModuleType, tmp_path: Path) -> None:
    directory, reference_model = saved["llama"]
    # a bf16 copy read from the directory: the shared fp32 model is left as other tests compare against it
    type(reference_model).from_pretrained(directory, dtype=torch.bfloat16).save_pretrained(tmp_path)
    ids = _ids(1, 6)
    as_stored = from_pretrained(tmp_path)
    assert as_stored.embed.weight.dtype is packrt.bfloat16
    assert as_stored(packrt.from_numpy(ids)).dtype is packrt.bfloat16
    upcast = from_pretrained(tmp_path, dtype="float32", weight_residency="borrowed")
    assert upcast.embed.weight.dtype is packrt.float32
    stored_values = type(reference_model).from_pretrained(tmp_path, dtype=torch.float32).eval()
    expected = logits(torch, stored_values, ids)
    assert float(np.abs(upcast(packrt.from_numpy(ids)).numpy() - expected).max()) <= 1e-4


def test_generate_rejects_arguments_it_cannot_honour(saved: Any) -> None:
    model = from_pretrained(saved["gpt2"][0])
    ids = packrt.from_numpy(_ids(1, 4))
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 0"):
        model.generate(ids, -1)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        model.generate(ids, 2, do_sample=True, temperature=0.0)
    with pytest.raises(ValueError, match="top_p must be in"):
        model.generate(ids, 2, do_sample=True, top_p=1.5)
    with pytest.raises(packrt.errors.ShapeError, match="exceed the model's 128 positions"):
        model.generate(ids, 125)
