"""``from_pretrained("model.gguf")``: a llama.cpp GGUF file served by one of packrt's decoder families.

A GGUF file holds in one place what a Hugging Face directory spreads over config.json and the
safetensors files. Loading it takes these steps, each checked before the next:

1. The file is opened with :func:`packrt_io.open_gguf` (the ``gguf`` package's reader over a
   copy-on-write mapping). ``general.architecture`` must be one of :data:`ARCHITECTURES` (llama,
   qwen2, qwen3, gemma3, phi3: :mod:`packrt.models.gguf_architectures`); otherwise
   :class:`~packrt.models.UnsupportedModelError` names it and lists the supported ones.
2. The metadata becomes a config.json-like :class:`~packrt.models.hfconfig.HFConfig` through
   :data:`CONFIG_KEYS` and the architecture's own keys (``llama.embedding_length`` ->
   ``hidden_size``...), plus what llama.cpp's loader fixes in code for it; the head is tied when the
   file has no ``output.weight``, as llama.cpp writes it.
3. From here the file takes the road a Hugging Face directory takes
   (:func:`packrt.models.loading.load_source`): the config is checked against its schema (an error
   names the metadata key), then against the tensors the header lists (a ``block_count`` beyond the
   layers the file holds is refused), and only then is the model declared under
   :func:`packrt.meta_init`. Every tensor name goes through the architecture's table
   (``blk.0.attn_q.weight`` -> ``layers.0.attention.q_proj.weight``), shapes are checked, and every
   tensor's GGML type must be one packrt reads (see :mod:`packrt_io` for the table): all before a
   tensor is read.
4. F32/F16/BF16 tensors are bound as views of the mapped file (under ``"borrowed"`` the file stays
   the only copy). A linear whose weight is quantised in a block format packrt multiplies from
   (:data:`packrt_base.BLOCK_FORMATS`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) is declared as a
   :class:`~packrt.nn.BlockQuantizedLinear` and the token embedding as a
   :class:`~packrt.nn.BlockQuantizedEmbedding` (a head tied to it untied, reading the same blocks), bound to
   the file's blocks, also views, unless ``dtype``, ``quantize`` or another device asks for floats; the other
   quantised types (Q2_K, Q3_K, IQ4_NL, IQ4_XS) are dequantised to float32 at load.
   llama.cpp stores a llama model's query and key rows permuted for its rotary layout, and Gemma's
   norm weights as ``1 + w``; those are put back as transformers holds them, which makes a copy.
   ``memory_report`` counts the views as mapped and the copies as converted, naming what each was
   made from.

A Llama 3.x file's rope scaling is the tensor ``rope_freqs.weight`` (one frequency divisor per rotary pair, as
llama.cpp applies it), which goes into the config rather than the model.

``generate``'s eos and pad ids default to the file's ``tokenizer.ggml.*`` ids, as transformers' GGUF
loading sets them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any, Final

import ml_dtypes
import numpy as np

import packrt
import packrt_io
from packrt import nn
from packrt.errors import CheckpointError
from packrt.models.generation_defaults import GenerationDefaults, defaults_from
from packrt.models.gguf_architectures import ARCHITECTURES, CONFIG_KEYS, GGUFArchitecture
from packrt.models.hfconfig import HFConfig, UnsupportedModelError
from packrt.models.keymap import Family, KeyMap, Mapped, template_of
from packrt.models.loading import load_source
from packrt_base import BLOCK_FORMATS
from packrt_core.nn.memory import name_converted_array
from packrt_core.nn.residency import check_residency

# tokenizer.ggml.<key> -> config.json field
TOKEN_KEYS: Final[tuple[tuple[str, str], ...]] = (
    ("bos_token_id", "bos_token_id"),
    ("eos_token_id", "eos_token_id"),
    ("padding_token_id", "pad_token_id"),
)
ROPE_SCALINGS: Final[tuple[str, ...]] = ("none", "linear")
ROPE_FREQS: Final = "rope_freqs.weight"  # per-pair frequency divisors (Llama 3.x files), read into the config
# Gemma 3 27B (62 layers) scales its queries by hidden_size / heads, the others by their head width:
# llama.cpp's loader applies this rule, which the metadata does not carry.
GEMMA3_27B_LAYERS: Final = 62
_NUMPY_DTYPES: Final[dict[str, Any]] = {
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float64": np.float64,
}


class GGUFConfig(HFConfig):
    """The config a GGUF file's metadata describes; its errors name the metadata key, not config.json."""

    def describe(self, name: str, problem: str, fix: str) -> str:
        """The message names the metadata key the field came from; ``fix`` (written for a config.json) gives way
        to the one fix a GGUF file has: converting it again."""
        arch = self._values.get("gguf_architecture", "")
        spec = ARCHITECTURES.get(arch)
        keys = {field: f"{arch}.{key}" for key, field in (*CONFIG_KEYS, *(spec.keys if spec else ()))}
        keys.update({field: f"tokenizer.ggml.{key}" for key, field in TOKEN_KEYS})
        where = keys.get(name, name)
        return (
            f"GGUF file {str(self.path)!r}: metadata {where!r} (packrt's {name!r}) {problem}; the file's metadata "
            "is incomplete or damaged: convert the model again with llama.cpp's converter"
        )


def supported_architectures() -> tuple[str, ...]:
    """The ``general.architecture`` values ``from_pretrained`` serves from a GGUF file."""
    return tuple(ARCHITECTURES)


def _architecture(file: packrt_io.GGUFFile) -> tuple[str, GGUFArchitecture]:
    arch = file.architecture
    if arch not in ARCHITECTURES:
        listed = ", ".join(f"{name} (as {spec.architecture})" for name, spec in ARCHITECTURES.items())
        raise UnsupportedModelError(
            f"GGUF file {str(file.path)!r}: general.architecture {arch!r} is not one packrt can build; supported "
            f"GGUF architectures: {listed}"
        )
    spec = ARCHITECTURES[arch]
    for name, feature in spec.refused.items():
        if name in file.tensors:
            raise UnsupportedModelError(
                f"GGUF file {str(file.path)!r}: tensor {name!r} carries {feature}, which packrt does not implement "
                f"for {arch!r} yet; supported: default rotary frequencies (serve this model with llama.cpp)"
            )
    return arch, spec


def gguf_config(file: packrt_io.GGUFFile) -> HFConfig:
    """The config.json the metadata describes (see the module docstring), as an HFConfig naming the file."""
    arch, spec = _architecture(file)
    meta = file.metadata
    values: dict[str, Any] = {
        "model_type": spec.model_type,
        "architectures": [spec.architecture],
        "gguf_architecture": arch,
        **spec.fixed,
    }
    for key, field in (*CONFIG_KEYS, *spec.keys):
        if f"{arch}.{key}" in meta:
            values[field] = meta[f"{arch}.{key}"]
    for key, field in TOKEN_KEYS:
        if f"tokenizer.ggml.{key}" in meta:
            values[field] = meta[f"tokenizer.ggml.{key}"]
    if "vocab_size" not in values:
        tokens = meta.length("tokenizer.ggml.tokens") if "tokenizer.ggml.tokens" in meta else None
        embed = file.tensors.get("token_embd.weight")
        values["vocab_size"] = tokens if tokens is not None else embed.shape[0] if embed else None
    heads, hidden = values.get("num_attention_heads"), values.get("hidden_size")
    if isinstance(heads, int) and isinstance(hidden, int) and heads > 0:
        head_dim = values.get("head_dim", hidden // heads)
        rotary = meta.get(f"{arch}.rope.dimension_count")
        if rotary is not None and rotary != head_dim:
            raise UnsupportedModelError(
                f"GGUF file {str(file.path)!r}: {arch}.rope.dimension_count is {rotary}, but heads are {head_dim} "
                "wide: packrt does not implement partial rotary positions yet; supported: rotating whole heads"
            )
        if arch == "gemma3":
            wide = values.get("num_hidden_layers") == GEMMA3_27B_LAYERS
            values["query_pre_attn_scalar"] = hidden // heads if wide else head_dim
    pattern = values.get("sliding_window_pattern")
    if isinstance(pattern, list):  # one flag per layer, true for a local (sliding) one
        values["layer_types"] = ["sliding_attention" if flag else "full_attention" for flag in pattern]
        del values["sliding_window_pattern"]
    _rope(file, arch, spec, values)
    values["tie_word_embeddings"] = "output.weight" not in file.tensors
    # llama: a bias on all four projections; qwen2 puts one on q, k and v whatever this says
    values["attention_bias"] = arch != "qwen2" and "blk.0.attn_q.bias" in file.tensors
    values["mlp_bias"] = "blk.0.ffn_up.bias" in file.tensors
    return GGUFConfig(values, file.path)


def _rope(file: packrt_io.GGUFFile, arch: str, spec: GGUFArchitecture, values: dict[str, Any]) -> None:
    """The rotary settings the metadata gives (``rope.scaling.type``: none or linear; a ``rope_freqs`` tensor),
    into ``values``."""
    meta = file.metadata
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling not in ROPE_SCALINGS:
        raise UnsupportedModelError(
            f"GGUF file {str(file.path)!r}: packrt does not implement {arch}.rope.scaling.type {scaling!r} yet; "
            f"supported: {', '.join(ROPE_SCALINGS)}"
        )
    theta = values.get("rope_theta", 10000.0)
    params: dict[str, Any] = {"rope_type": "default", "rope_theta": theta}
    if scaling == "linear":
        params = {"rope_type": "linear", "factor": meta.get(f"{arch}.rope.scaling.factor"), "rope_theta": theta}
    if ROPE_FREQS in file.tensors:
        params = _frequency_factors(file, params, values)
    if spec.rope_per_layer_type:  # the scaling applies to the global layers; the local ones rotate as fixed
        local = {"rope_type": "default", "rope_theta": values.get("rope_local_base_freq", 10_000.0)}
        values["rope_parameters"] = {"full_attention": params, "sliding_attention": local}
    elif params["rope_type"] != "default":
        values["rope_parameters"] = params


def _frequency_factors(file: packrt_io.GGUFFile, params: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Rotary settings for a file with ``rope_freqs.weight``: llama.cpp divides each pair's frequency by its
    factor there (a Llama 3.x converter writes the llama3 scaling so), on top of a linear scaling.

    That is LongRoPE's form (one divisor per pair) with one list for every length and no attention scale, so
    it is given as such and the rotary code has one road for per-pair divisors."""
    factors = np.asarray(file.array(ROPE_FREQS), dtype=np.float64).reshape(-1)
    if not (np.isfinite(factors).all() and (factors > 0).all()):
        raise CheckpointError(
            f"GGUF file {str(file.path)!r}: tensor {ROPE_FREQS!r} must hold positive finite factors, one per "
            "rotary pair; the file is damaged: convert the model again"
        )
    if params["rope_type"] == "linear":
        factors = factors * float(params["factor"])
    divisors = [float(f) for f in factors]
    context = values.get("max_position_embeddings")
    return {
        "rope_type": "longrope",
        "short_factor": divisors,
        "long_factor": divisors,
        "original_max_position_embeddings": context if isinstance(context, int) and context > 0 else 1,
        "attention_factor": 1.0,
        "rope_theta": params["rope_theta"],
    }


def gguf_keymap(config: HFConfig, spec: GGUFArchitecture | None = None) -> KeyMap:
    """The architecture's tensor table as a KeyMap (without ``output.weight`` when the head is tied)."""
    rules = (spec or ARCHITECTURES["llama"]).tensors
    tied = config.flag("tie_word_embeddings", False)
    kept = tuple(rule for rule in rules if not (tied and rule.checkpoint == "output.weight"))
    return KeyMap(kept, ignored=frozenset({ROPE_FREQS}))  # the config holds it (_frequency_factors)


def plan_gguf(
    file: packrt_io.GGUFFile, keymap: KeyMap, expected: dict[str, tuple[int, ...]], strict: bool, name: str
) -> dict[str, str]:
    """packrt key -> GGUF tensor name, after checking names, shapes and GGML types (nothing read)."""
    where = str(file.path)
    plan: dict[str, str] = {}
    unexpected: list[str] = []
    for key, tensor in file.tensors.items():
        found = keymap.lookup(key)
        if found == "ignored":
            continue
        if not isinstance(found, Mapped) or found.model not in expected:
            unexpected.append(key)
            continue
        if expected[found.model] not in (tensor.shape, stored_shape(tensor)):
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


def stored_shape(tensor: packrt_io.GGUFTensor) -> tuple[int, ...]:
    """The shape a tensor is bound with when its layer serves it as stored: its own for F32/F16/BF16, (rows,
    bytes a row) for quantized blocks."""
    if tensor.stored_as_served or len(tensor.shape) != 2:
        return tensor.shape
    return (tensor.shape[0], tensor.nbytes // max(1, tensor.shape[0]))


def _tensor(
    file: packrt_io.GGUFFile,
    gguf_name: str,
    heads: int | None,
    shifted: bool,
    cast: packrt.dtype | None,
    blocks: bool = False,
) -> packrt.Tensor:
    """One GGUF tensor as a packrt Tensor: a view when served as stored (``blocks``: a quantized tensor's
    blocks, for a :class:`~packrt.nn.BlockQuantizedLinear`), else a named conversion."""
    info = file.tensors[gguf_name]
    array = file.blocks(gguf_name) if blocks else file.array(gguf_name)
    steps: list[str] = [] if info.stored_as_served or blocks else ["dequantised to float32"]
    if heads is not None:
        array = unpermute_rows(array, heads)
        steps.append("rows un-permuted from llama.cpp's rotary order")
    if shifted:
        array = (array.astype(np.float32) - np.float32(1)).astype(array.dtype)
        steps.append("1 subtracted (llama.cpp stores Gemma norm weights as 1 + w)")
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


@dataclass(frozen=True)
class GGUFSource:
    """A GGUF file read up to its header: the :class:`~packrt.models.loading.LoadSource` the load road
    serves it from (``config``: what the metadata describes, not yet checked)."""

    file: packrt_io.GGUFFile
    spec: GGUFArchitecture
    config: HFConfig
    # packrt key -> GGUF tensor for the heads keep_blocks untied from a quantised embedding (filled by it)
    untied: dict[str, str] = dataclass_field(default_factory=dict)
    # packrt keys keep_blocks declared to serve quantised blocks as stored: tensors() binds the blocks to them
    as_blocks: set[str] = dataclass_field(default_factory=set)

    @property
    def family(self) -> Family:
        return self.spec.family

    @property
    def name(self) -> str:
        return f"{self.spec.architecture} ({self.spec.model_type}, GGUF)"

    def generation(self) -> GenerationDefaults:
        return defaults_from(self.config, str(self.file.path), self.config.integer("vocab_size"))

    def headers(self) -> tuple[packrt_io.CheckpointInfo, KeyMap]:
        return self.file.info(), gguf_keymap(self.config, self.spec)

    def keep_blocks(self, model: nn.Module, keymap: KeyMap) -> list[str]:
        """Each ``nn.Linear`` whose weight the file holds in a block format packrt serves as blocks
        (:data:`packrt_base.BLOCK_FORMATS`) becomes a :class:`~packrt.nn.BlockQuantizedLinear` of that format, and
        each such ``nn.Embedding`` a :class:`~packrt.nn.BlockQuantizedEmbedding` (a head tied to it is untied, and
        reads the same blocks); their paths are returned."""
        holders: dict[int, list[str]] = {}
        for path, module in model.named_modules(remove_duplicate=False):
            for leaf, param in module.named_parameters(recurse=False):
                holders.setdefault(id(param), []).append(f"{path}.{leaf}" if path else leaf)
        kept = []
        for name, tensor in self.file.tensors.items():
            found = keymap.lookup(name)
            if tensor.type not in BLOCK_FORMATS or not isinstance(found, Mapped):
                continue
            path, _, leaf = found.model.rpartition(".")
            try:
                layer = model.get_submodule(path)
            except AttributeError:
                continue  # no such layer: plan_gguf names the tensor as unexpected
            if leaf != "weight":
                continue
            # a linear sharing this tensor (a head tied to the embedding) is untied and multiplies the same blocks
            sharing = [key for key in holders.get(id(getattr(layer, "weight", None)), []) if key != found.model]
            for key in sharing if type(layer) is not nn.Linear else [found.model]:
                head_path = key.rpartition(".")[0]
                head = model.get_submodule(head_path)
                if type(head) is not nn.Linear or key.rpartition(".")[2] != "weight" or len(sharing) > 1:
                    continue
                width, out = head.in_features, head.out_features
                if tensor.shape != (out, width) or width % BLOCK_FORMATS[tensor.type].values:
                    continue  # plan_gguf says what is wrong with the shape
                block = nn.BlockQuantizedLinear(width, out, tensor.type, head.bias is not None)
                model.set_submodule(head_path, block)
                kept.append(head_path)
                self.as_blocks.add(key)
                if key != found.model:
                    self.untied[key] = name
            if type(layer) is nn.Embedding and layer.padding_idx is None:  # a lookup: dequantizes the rows it picks
                rows, width = layer.num_embeddings, layer.embedding_dim
                if tensor.shape == (rows, width) and width % BLOCK_FORMATS[tensor.type].values == 0:
                    model.set_submodule(path, nn.BlockQuantizedEmbedding(rows, width, tensor.type))
                    kept.append(path)
                    self.as_blocks.add(found.model)
        return kept

    def tensors(
        self,
        info: packrt_io.CheckpointInfo,
        keymap: KeyMap,
        expected: dict[str, tuple[int, ...]],
        strict: bool,
        cast: packrt.dtype | None,
        progress: bool | None,
    ) -> tuple[dict[str, packrt.Tensor], tuple[packrt_io.MappedFile, ...]]:
        untied = {key: name for key, name in self.untied.items() if key in expected}
        plan = plan_gguf(self.file, keymap, {k: v for k, v in expected.items() if k not in untied}, strict, self.name)
        plan.update(untied)  # a head untied from a quantised embedding reads the embedding's blocks
        state: dict[str, packrt.Tensor] = {}
        for model_key, gguf_name in plan.items():
            template = template_of(gguf_name)[0]
            heads_field = self.spec.permuted.get(template)
            heads = None
            if heads_field is not None:
                heads = self.config.integer(heads_field, self.config.get("num_attention_heads"))
            blocks = model_key in self.as_blocks
            state[model_key] = _tensor(self.file, gguf_name, heads, template in self.spec.shifted, cast, blocks)
        return state, (self.file.mapped_file,)


def read_gguf(path: str | os.PathLike[str]) -> GGUFSource:
    """The GGUF file at ``path`` read up to its header: layout, architecture (refused unless one of
    :data:`ARCHITECTURES`) and the config its metadata describes. No tensor is read, nothing declared."""
    file = packrt_io.open_gguf(Path(os.fspath(path)))
    _, spec = _architecture(file)
    return GGUFSource(file, spec, gguf_config(file))


def from_gguf(
    path: str | os.PathLike[str],
    *,
    dtype: packrt.dtype | None = None,
    weight_residency: str | None = None,
    device: str = "cpu",
    strict: bool = True,
) -> nn.Module:
    """The causal LM of a GGUF file, loaded and in eval mode (see the module docstring).

    ``dtype`` casts every floating weight (default: F32/F16/BF16 as stored, quantised linears as their blocks,
    other quantised tensors as float32; with ``dtype`` every quantised tensor is dequantised to it).
    :func:`packrt.models.from_pretrained` of a GGUF path loads it the same way.
    """
    check_residency(weight_residency, "from_gguf")  # before the file is opened
    return load_source(
        read_gguf(path),
        cast=dtype,
        weight_residency=weight_residency,
        device=device,
        strict=strict,
        progress=False,
        quantize=None,
    )


__all__ = [
    "ARCHITECTURES",
    "CONFIG_KEYS",
    "GEMMA3_27B_LAYERS",
    "ROPE_SCALINGS",
    "TOKEN_KEYS",
    "GGUFSource",
    "from_gguf",
    "gguf_config",
    "gguf_keymap",
    "plan_gguf",
    "read_gguf",
    "supported_architectures",
    "unpermute_rows",
]
