"""Small random checkpoints in transformers' names and layouts, written without transformers or torch.

A family's key map (the table ``from_pretrained`` loads through) names each tensor and says which are
stored transposed, so a directory written here loads exactly as one ``save_pretrained`` wrote would.
Shared by the tests of from_pretrained's refusals, faults, config checks and generation inputs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

import packrt_io
from packrt.models.hfconfig import HFConfig
from packrt.models.pretrained import find_family

# Where each family's weights sit in a transformers checkpoint (the class the architectures name).
PREFIXES = {
    "llama": "model.",
    "qwen2": "model.",
    "mistral": "model.",
    "qwen3": "model.",
    "gemma3_text": "model.",
    "phi3": "model.",
    "gpt2": "transformer.",
    "bert": "",
}

LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 50,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 32,
}


def random_weights(config: dict[str, Any], dtype: Any = np.float32, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights for ``config`` (a config.json dict), keyed and laid out as transformers stores them."""
    hf_config = HFConfig(config)
    family = find_family(hf_config)
    keymap = family.keymap(hf_config)
    prefix = PREFIXES[str(config["model_type"])]
    rng = np.random.default_rng(seed)
    out = {}
    for key, value in family.build(hf_config).state_dict().items():
        name = keymap.checkpoint_name(key, prefix)
        array = rng.standard_normal(tuple(value.shape)).astype(dtype)
        found = keymap.lookup(name)
        out[name] = array.T.copy() if found not in (None, "ignored") and found.transform == "transpose" else array
    return out


def write_checkpoint(
    directory: Path,
    config: dict[str, Any] | str,
    tensors: dict[str, np.ndarray] | None = None,
    *,
    weights_of: dict[str, Any] | None = None,
) -> Path:
    """``directory`` with ``config`` as config.json (a dict, or raw text) and ``tensors`` as model.safetensors
    (default: :func:`random_weights` of ``weights_of``, else of ``config`` itself)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if tensors is None:
        source = weights_of if weights_of is not None else config
        assert isinstance(source, dict), "a raw-text config needs weights_of= (the dict whose weights to write)"
        tensors = random_weights(source)
    packrt_io.save_file(tensors, directory / "model.safetensors")
    return directory
