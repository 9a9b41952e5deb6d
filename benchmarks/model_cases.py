"""The whole-model cases of the A/B: a model's call as a user makes it, so that a slowdown in the Python
between the kernels (a layer's ``forward``, the cache's bookkeeping, a plan's glue) shows somewhere.

A kernel case (kernel_cases.py) times one compiled kernel; none of them runs a layer's ``forward``. These
build small random models of the two kinds packrt serves, at shapes where the glue is a real part of the
time (few tokens, several layers), straight from a config (no file, no torch):

- an encoder call, MiniLM-shaped (6 layers of 384, 12 heads), one sequence of 16 tokens;
- a decoder's decode: ``generate`` of 4 greedy tokens after a one-token prompt, SmolLM2-shaped (grouped-query
  attention, 9 heads over 3), so every step multiplies one row, as decode does.

Each checks itself against the same model with its weights in float64 (packrt's float64 road multiplies with
numpy, not with the float32 tiles): the encoder's hidden states within a tolerance, the decoder's tokens
equal. packrt is imported inside the builders, as in kernel_cases.py: each A/B worker imports its own
revision's sources first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# One call returns what the check compares (float64 reference of the same model), and its tolerance.
Made = tuple[Callable[[], Any], Callable[[], np.ndarray], float]

ENCODER: dict[str, Any] = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "vocab_size": 1024,
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 512,
}
DECODER: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 2048,
    "hidden_size": 576,
    "num_hidden_layers": 4,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "intermediate_size": 1536,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,  # a tied random head would answer every token with itself
}
NEW_TOKENS = 4


def _pair(config: dict[str, Any]) -> tuple[Any, Any]:
    """The model of ``config`` with seeded random weights, in eval mode, and its float64 twin (same values)."""
    import packrt
    from packrt.models.hfconfig import HFConfig
    from packrt.models.pretrained import find_family

    hf_config = HFConfig(config)
    family = find_family(hf_config)
    packrt.manual_seed(0)
    model = family.build(hf_config).eval()
    twin = family.build(hf_config).eval()
    twin.load_state_dict(model.state_dict())
    return model, twin.to(packrt.float64)


def encoder() -> Made:
    import packrt

    model, twin = _pair(ENCODER)
    ids = packrt.tensor(np.random.default_rng(0).integers(0, ENCODER["vocab_size"], (1, 16)))
    return lambda: model(ids).numpy(), lambda: twin(ids).numpy().astype(np.float64), 1e-4


def decoder() -> Made:
    import packrt

    model, twin = _pair(DECODER)
    prompt = packrt.tensor(np.array([[7]], dtype=np.int64))

    def generated(which: Any) -> np.ndarray:
        out = which.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
        return np.asarray(out.numpy(), dtype=np.float64)

    return lambda: generated(model), lambda: generated(twin), 0.0
