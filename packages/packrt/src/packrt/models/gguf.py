"""``from_pretrained("model.gguf")``: a llama.cpp GGUF file served by packrt's llama family.

A GGUF file holds in one place what a Hugging Face directory spreads over config.json and the
safetensors files. Loading it takes these steps, each checked before the next:

1. The file is opened with :func:`packrt_io.open_gguf` (the ``gguf`` package's reader over a
   copy-on-write mapping). ``general.architecture`` must be one of :data:`ARCHITECTURES`;
   otherwise :class:`~packrt.models.UnsupportedModelError` names it and lists the supported ones.
2. The metadata becomes a config.json-like :class:`~packrt.models.hfconfig.HFConfig` through
   :data:`CONFIG_KEYS` (``llama.embedding_length`` -> ``hidden_size``...); the head is tied when the
   file has no ``output.weight``, as llama.cpp writes it.
3. The model is declared under :func:`packrt.meta_init`, every tensor name goes through
   :data:`TENSOR_RULES` (``blk.0.attn_q.weight`` -> ``layers.0.attention.q_proj.weight``), shapes are
   checked, and every tensor's GGML type must be one packrt reads (see :mod:`packrt_io` for the
   table): all before a tensor is read.
4. F32/F16/BF16 tensors are bound as views of the mapped file (under ``"borrowed"`` the file stays
   the only copy); quantised ones are dequantised to float32. llama.cpp stores a llama model's query
   and key rows permuted for its rotary layout; those rows (:data:`PERMUTED`) are put back in
   transformers' order, which makes a copy. ``memory_report`` counts the views as mapped and the
   copies as converted, naming what each was made from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import ml_dtypes
import numpy as np

import packrt
import packrt_io
from packrt import nn
from packrt.errors import CheckpointError
from packrt.models import llama
from packrt.models.hfconfig import HFConfig, UnsupportedModelError
from packrt.models.keymap import KeyMap, Mapped, Rule, template_of
from packrt_core.nn.memory import name_converted_array
from packrt_core.nn.residency import check_residency

# general.architecture -> (model_type, the architecture class it is served as)
ARCHITECTURES: Final[dict[str, tuple[str, str]]] = {
    "llama": ("llama", "LlamaForCausalLM"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
}
# "<architecture>.<key>" in the metadata -> the config.json field it fills
CONFIG_KEYS: Final[tuple[tuple[str, str], ...]] = (
    ("block_count", "num_hidden_layers"),
    ("embedding_length", "hidden_size"),
    ("feed_forward_length", "intermediate_size"),
    ("attention.head_count", "num_attention_heads"),
    ("attention.head_count_kv", "num_key_value_heads"),
    ("attention.key_length", "head_dim"),
    ("attention.layer_norm_rms_epsilon", "rms_norm_eps"),
    ("rope.freq_base", "rope_theta"),
    ("context_length", "max_position_embeddings"),
    ("vocab_size", "vocab_size"),
)
# tokenizer.ggml.<key> -> config.json field
TOKEN_KEYS: Final[tuple[tuple[str, str], ...]] = (
    ("bos_token_id", "bos_token_id"),
    ("eos_token_id", "eos_token_id"),
    ("padding_token_id", "pad_token_id"),
)
ROPE_SCALINGS: Final[tuple[str, ...]] = ("none", "linear")
_PROJECTIONS = (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"), ("attn_output", "o_proj"))
_MLP = (("ffn_gate", "gate"), ("ffn_up", "up"), ("ffn_down", "down"))
TENSOR_RULES: Final[tuple[Rule, ...]] = (
    Rule("token_embd.weight", "embed.weight"),
    Rule("output_norm.weight", "norm.weight"),
    Rule("output.weight", "lm_head.weight"),
    Rule("blk.{i}.attn_norm.weight", "layers.{i}.attention_norm.weight"),
    Rule("blk.{i}.ffn_norm.weight", "layers.{i}.mlp_norm.weight"),
    *(
        Rule(f"blk.{{i}}.{theirs}.{kind}", f"layers.{{i}}.attention.{ours}.{kind}")
        for theirs, ours in _PROJECTIONS
        for kind in ("weight", "bias")
    ),
    *(
        Rule(f"blk.{{i}}.{theirs}.{kind}", f"layers.{{i}}.mlp.{ours}.{kind}")
        for theirs, ours in _MLP
        for kind in ("weight", "bias")
    ),
)
# architecture -> (GGUF template, the config field giving its head count): rows llama.cpp permuted
PERMUTED: Final[dict[str, dict[str, str]]] = {
    "llama": {
        "blk.{i}.attn_q.weight": "num_attention_heads",
        "blk.{i}.attn_q.bias": "num_attention_heads",
        "blk.{i}.attn_k.weight": "num_key_value_heads",
        "blk.{i}.attn_k.bias": "num_key_value_heads",
    },
}
_NUMPY_DTYPES: Final[dict[str, Any]] = {
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float64": np.float64,
}


class GGUFConfig(HFConfig):
    """The config a GGUF file's metadata describes; its errors name the metadata key, not config.json."""

    def error(self, name: str, problem: str) -> CheckpointError:
        arch = self._values.get("model_type", "")
        keys = {field: f"{arch}.{key}" for key, field in CONFIG_KEYS}
        keys.update({field: f"tokenizer.ggml.{key}" for key, field in TOKEN_KEYS})
        where = keys.get(name, name)
        return CheckpointError(
            f"GGUF file {str(self.path)!r}: metadata {where!r} (packrt's {name!r}) {problem}; the file's metadata "
            "is incomplete or damaged: convert the model again with llama.cpp's converter"
        )


def supported_architectures() -> tuple[str, ...]:
    """The ``general.architecture`` values ``from_pretrained`` serves from a GGUF file."""
    return tuple(ARCHITECTURES)


def _architecture(file: packrt_io.GGUFFile) -> tuple[str, str, str]:
    arch = file.architecture
    if arch not in ARCHITECTURES:
        listed = ", ".join(f"{name} (as {cls})" for name, (_, cls) in ARCHITECTURES.items())
        raise UnsupportedModelError(
            f"GGUF file {str(file.path)!r}: general.architecture {arch!r} is not one packrt can build; supported "
            f"GGUF architectures: {listed}"
        )
    return arch, *ARCHITECTURES[arch]


def gguf_config(file: packrt_io.GGUFFile) -> HFConfig:
    """The config.json the metadata describes (see the module docstring), as an HFConfig naming the file."""
    arch, model_type, architecture = _architecture(file)
    meta = file.metadata
    values: dict[str, Any] = {"model_type": model_type, "architectures": [architecture], "hidden_act": "silu"}
    for key, field in CONFIG_KEYS:
        if f"{arch}.{key}" in meta:
            values[field] = meta[f"{arch}.{key}"]
    for key, field in TOKEN_KEYS:
        if f"tokenizer.ggml.{key}" in meta:
            values[field] = meta[f"tokenizer.ggml.{key}"]
    if "vocab_size" not in values:
        tokens = meta.get("tokenizer.ggml.tokens")
        embed = file.tensors.get("token_embd.weight")
        values["vocab_size"] = len(tokens) if isinstance(tokens, list) else embed.shape[0] if embed else None
    heads, hidden = values.get("num_attention_heads"), values.get("hidden_size")
    rotary = meta.get(f"{arch}.rope.dimension_count")
    if isinstance(heads, int) and isinstance(hidden, int) and heads > 0 and rotary is not None:
        head_dim = values.get("head_dim", hidden // heads)
        if rotary != head_dim:
            raise CheckpointError(
                f"GGUF file {str(file.path)!r}: {arch}.rope.dimension_count is {rotary}, but heads are {head_dim} "
                "wide; packrt rotates whole heads only (partial rotary is not implemented)"
            )
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling not in ROPE_SCALINGS:
        raise UnsupportedModelError(
            f"GGUF file {str(file.path)!r}: packrt does not implement {arch}.rope.scaling.type {scaling!r} yet; "
            f"supported: {', '.join(ROPE_SCALINGS)}"
        )
    if scaling == "linear":
        theta = values.get("rope_theta", 10000.0)
        values["rope_parameters"] = {
            "rope_type": "linear",
            "factor": meta.get(f"{arch}.rope.scaling.factor"),
            "rope_theta": theta,
        }
    values["tie_word_embeddings"] = "output.weight" not in file.tensors
    values["attention_bias"] = arch == "llama" and "blk.0.attn_q.bias" in file.tensors
    values["mlp_bias"] = "blk.0.ffn_up.bias" in file.tensors
    return GGUFConfig(values, file.path)


def gguf_keymap(config: HFConfig) -> KeyMap:
    """:data:`TENSOR_RULES` as a KeyMap (without ``output.weight`` when the head is tied)."""
    tied = config.flag("tie_word_embeddings", False)
    rules = tuple(rule for rule in TENSOR_RULES if not (tied and rule.checkpoint == "output.weight"))
    return KeyMap(rules)


def plan_gguf(
    file: packrt_io.GGUFFile, keymap: KeyMap, expected: dict[str, tuple[int, ...]], strict: bool, name: str
) -> dict[str, str]:
    """packrt key -> GGUF tensor name, after checking names, shapes and GGML types (nothing read)."""
    where = str(file.path)
    plan: dict[str, str] = {}
    unexpected: list[str] = []
    for key, tensor in file.tensors.items():
        found = keymap.lookup(key)
        if not isinstance(found, Mapped) or found.model not in expected:
            unexpected.append(key)
            continue
        if tensor.shape != expected[found.model]:
            raise CheckpointError(
                f"GGUF file {where!r}: tensor {key!r} has shape {tensor.shape}, but {name} built from the file's "
                f"metadata needs {expected[found.model]} for {found.model!r}; the file's metadata and tensors "
                "disagree: the file is damaged or was written by a converter packrt does not know"
            )
        plan[found.model] = key
    missing = [f"{model_key!r} (shape {shape})" for model_key, shape in expected.items() if model_key not in plan]
    if strict and missing:
        raise CheckpointError(
            f"GGUF file {where!r} lacks tensors {name} needs: {', '.join(missing[:8])}"
            f"{f' and {len(missing) - 8} more' if len(missing) > 8 else ''}; pass strict=False to leave them unloaded"
        )
    if strict and unexpected:
        raise CheckpointError(
            f"GGUF file {where!r} holds tensors {name} has no place for: {', '.join(map(repr, unexpected[:8]))}"
            f"{f' and {len(unexpected) - 8} more' if len(unexpected) > 8 else ''}; pass strict=False to skip them"
        )
    file.check_types(plan.values())
    return plan


def unpermute_rows(array: np.ndarray[Any, Any], heads: int) -> np.ndarray[Any, Any]:
    """Rows of a query/key weight (or bias) from llama.cpp's rotary order back to transformers'.

    llama.cpp interleaves each head's two rotary halves row by row; this puts each head's
    even-indexed rows first and its odd-indexed rows after them, as one contiguous copy.
    """
    rows = array.shape[0]
    if heads <= 0 or rows % (2 * heads):
        raise CheckpointError(f"cannot un-permute {rows} rows into {heads} heads of an even width")
    half = rows // heads // 2
    grouped = array.reshape(heads, half, 2, *array.shape[1:])
    return np.ascontiguousarray(grouped.swapaxes(1, 2).reshape(array.shape))


def _tensor(file: packrt_io.GGUFFile, gguf_name: str, heads: int | None, cast: packrt.dtype | None) -> packrt.Tensor:
    """One GGUF tensor as a packrt Tensor: a view when served as stored, else a named conversion."""
    info = file.tensors[gguf_name]
    array = file.array(gguf_name)
    steps: list[str] = [] if info.stored_as_served else ["dequantised to float32"]
    if heads is not None:
        array = unpermute_rows(array, heads)
        steps.append("rows un-permuted from llama.cpp's rotary order")
    target = None if cast is None else _NUMPY_DTYPES.get(str(cast).rsplit(".", 1)[-1])
    if target is not None and array.dtype != np.dtype(target):
        array = array.astype(target)
        steps.append(f"cast to {np.dtype(target).name}")
    if steps:
        name_converted_array(array, f"{info.type} {', '.join(steps)} from {file.path.name}")
    tensor = packrt.from_numpy(array)
    if cast is not None and target is None and tensor.dtype is not cast:
        tensor = tensor.to(cast)
    return tensor


def from_gguf(
    path: str | os.PathLike[str],
    *,
    dtype: packrt.dtype | None = None,
    weight_residency: str | None = None,
    device: str = "cpu",
    strict: bool = True,
) -> nn.Module:
    """The causal LM of a GGUF file, loaded and in eval mode (see the module docstring).

    ``dtype`` casts every floating weight (default: F32/F16/BF16 as stored, quantised types as
    float32). Called by :func:`packrt.models.from_pretrained` for a path to a GGUF file.
    """
    check_residency(weight_residency, "from_gguf")  # before any tensor is dequantised
    file = packrt_io.open_gguf(Path(os.fspath(path)))
    arch, model_type, architecture = _architecture(file)
    config = gguf_config(file)
    with packrt.meta_init():
        model = llama.FAMILY.build(config)
    name = f"{architecture} ({model_type}, GGUF)"
    expected = {key: tuple(value.shape) for key, value in model.state_dict(keep_vars=True).items()}
    plan = plan_gguf(file, gguf_keymap(config), expected, strict, name)
    permuted = PERMUTED.get(arch, {})
    state: dict[str, packrt.Tensor] = {}
    for model_key, gguf_name in plan.items():
        heads_field = permuted.get(template_of(gguf_name)[0])
        heads = None if heads_field is None else config.integer(heads_field, config.get("num_attention_heads"))
        state[model_key] = _tensor(file, gguf_name, heads, dtype)
    model.load_state_dict(state, strict=strict, assign=True, weight_residency=weight_residency)
    file.guard(model)
    model.eval()
    if device != "cpu":
        model.to(device)
    return model


__all__ = [
    "ARCHITECTURES",
    "CONFIG_KEYS",
    "PERMUTED",
    "ROPE_SCALINGS",
    "TENSOR_RULES",
    "TOKEN_KEYS",
    "from_gguf",
    "gguf_config",
    "gguf_keymap",
    "plan_gguf",
    "supported_architectures",
    "unpermute_rows",
]
