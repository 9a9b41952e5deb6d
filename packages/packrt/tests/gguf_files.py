"""Transformers causal LMs written as GGUF files the way llama.cpp's converter writes them, for the GGUF tests.

Tensor names come from the gguf package's own name map (not packrt's tables); a llama model's query/key
rows are permuted into llama.cpp's rotary order, Gemma's norm weights are stored as ``1 + w``, Phi-3's
fused qkv and gate/up projections stay fused, and the metadata keys are those llama.cpp writes. 1-D
tensors (norms, biases) stay F32 whatever the file's type, as llama.cpp keeps them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from peers import max_logits_diff

from packrt.models import from_pretrained

# transformers' model_type -> llama.cpp's general.architecture
GGUF_ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3_text": "gemma3", "phi3": "phi3"}


def permute_rows(weights: np.ndarray, heads: int) -> np.ndarray:
    """transformers' query/key rows into llama.cpp's order (what its converter does for llama)."""
    half = weights.shape[0] // heads // 2
    return weights.reshape(heads, 2, half, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


@contextmanager
def gguf_writer(gguf: Any, path: Path, arch: str) -> Iterator[Any]:
    """A ``gguf.GGUFWriter`` for ``path``; the header, metadata and tensors are written when the block ends."""
    writer = gguf.GGUFWriter(str(path), arch)
    yield writer
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _stored(gguf: Any, config: Any, name: str, values: np.ndarray, kind: str) -> tuple[np.ndarray, Any]:
    """(array, raw GGML type or None) as llama.cpp stores tensor ``name`` of ``values`` in a ``kind`` file."""
    model_type = config.model_type
    if model_type == "llama" and (".attn_q." in name or ".attn_k." in name):
        values = permute_rows(values, config.num_attention_heads if ".attn_q." in name else config.num_key_value_heads)
    if model_type == "gemma3_text" and name.endswith("norm.weight"):
        values = values + 1  # llama.cpp's Gemma converter stores the norm weights as 1 + w
    if values.ndim == 1 or kind in ("F32", "F16"):
        dtype = np.float16 if values.ndim > 1 and kind == "F16" else np.float32
        return np.ascontiguousarray(values, dtype=dtype), None
    quant = gguf.GGMLQuantizationType[kind]
    try:
        return gguf.quants.quantize(np.ascontiguousarray(values), quant), quant
    except NotImplementedError:  # a type gguf cannot quantise to: zero blocks (for files that must be refused)
        return np.zeros(gguf.quants.quant_shape_to_byte_shape(values.shape, quant), np.uint8), quant


def write_gguf(
    gguf: Any,
    model: Any,
    path: Path,
    kind: str = "F32",
    *,
    kinds_by_name: Mapping[str, str] | None = None,
    **extra: Any,
) -> Path:
    """``model`` (a transformers llama, qwen2, qwen3, gemma3 or phi3 causal LM) as the GGUF file ``path`` of
    GGML type ``kind``, but a tensor whose name holds a key of ``kinds_by_name`` (``"attn_v"``) of that key's
    type, as llama.cpp's mixes store some tensors in another type; ``extra``: more metadata, each ``key=value``
    written by the writer's ``add_<key>``."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    theta = config.rope_parameters.get("full_attention", config.rope_parameters)["rope_theta"]
    with gguf_writer(gguf, path, GGUF_ARCH[config.model_type]) as writer:
        writer.add_block_count(config.num_hidden_layers)
        writer.add_embedding_length(config.hidden_size)
        writer.add_feed_forward_length(config.intermediate_size)
        writer.add_head_count(config.num_attention_heads)
        writer.add_head_count_kv(config.num_key_value_heads)
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
        writer.add_context_length(config.max_position_embeddings)
        writer.add_vocab_size(config.vocab_size)
        writer.add_rope_dimension_count(head_dim)
        writer.add_rope_freq_base(float(theta))
        writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
        if config.model_type == "gemma3_text":
            writer.add_sliding_window(config.sliding_window)
        for key, value in extra.items():
            getattr(writer, f"add_{key}")(value)
        if config.rope_parameters.get("rope_type") == "llama3":  # as llama.cpp's converter: per-pair divisors
            default = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
            scaled = model.model.rotary_emb.inv_freq.double().numpy()
            writer.add_tensor("rope_freqs.weight", (default / scaled).astype(np.float32))
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[writer.arch.upper()], config.num_hidden_layers)
        for key, tensor in model.state_dict().items():
            if key == "lm_head.weight" and config.tie_word_embeddings:
                continue
            stem, suffix = key.rsplit(".", 1)
            name = f"{names.get_name(stem)}.{suffix}"
            chosen = next((k for part, k in (kinds_by_name or {}).items() if part in name), kind)
            values, raw_dtype = _stored(gguf, config, name, tensor.detach().float().numpy(), chosen)
            writer.add_tensor(name, values, raw_dtype=raw_dtype)
    return path


def assert_logits_match_transformers_gguf(
    torch: ModuleType, path: Path, reference: Any, ids: np.ndarray, what: str
) -> None:
    """packrt's float32 logits of the GGUF file ``path`` (borrowed) are within 1e-4 of ``reference``'s, the
    model transformers' own GGUF loading made of the same file."""
    model = from_pretrained(path, weight_residency="borrowed", dtype="float32")
    diff = max_logits_diff(torch, model, reference, ids)
    assert diff <= 1e-4, f"{what}: max abs logits diff {diff:.2e} against transformers' GGUF loading"
