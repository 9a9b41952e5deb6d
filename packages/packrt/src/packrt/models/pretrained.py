"""``from_pretrained``: a Hugging Face model directory to a served packrt model in one call.

The steps, each checked before the next:

1. ``config.json``'s ``model_type`` picks the family and its ``architectures`` entry must be one the
   family builds; otherwise :class:`UnsupportedModelError` names what was found and lists what is
   supported.
2. The config is checked against its model type's schema (:mod:`packrt.models.config_schema`:
   types, ranges, rope settings, enums), then against the checkpoint's headers (``model.safetensors``,
   or ``model.safetensors.index.json`` and its shards): no more layers than the files hold tensors
   for, no width beyond their largest dimension. Nothing has been built yet.
3. The model is declared under :func:`packrt.meta_init` (no weight memory), and every tensor name
   goes through the family's key map. A name the family ignores by design is fine; a name it does
   not know, a parameter no file holds, a shape that does not fit, or a dtype the model cannot serve
   (not floating, or mixed without ``dtype=``) fails here, naming the file and the key, before any
   tensor data is touched.
4. Each file is memory-mapped (``packrt.io``) and the tensors are bound to the model with
   ``load_state_dict(assign=True)``: under ``"borrowed"`` the mapped files stay the only copy of
   the weights. ``dtype`` casts floating tensors (a cast is a copy, no longer the file). As
   ``packrt.io.load_checkpoint`` does, the model then checks the files it holds views of before
   each call: a file truncated or rewritten in place is a CheckpointError, not a crash. An MXFP4
   checkpoint's block/scale pairs (gpt-oss's experts) are planned as the floats they stand for and
   dequantized into copies (:mod:`packrt.models.mxfp4`).

Steps 2 to 4 are :func:`packrt.models.loading.load_source`, the road a GGUF file takes too: its
header gives the config and the tensor layout, and from there it is checked, declared and bound by
the same functions, so a file whose metadata asks for more layers than it holds tensors for is
refused before anything is declared.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import packrt
import packrt_io
from packrt import nn
from packrt.errors import CheckpointError, DTypeError
from packrt.models.config_schema import completed, validate
from packrt.models.generation_defaults import GenerationDefaults, read_generation_defaults
from packrt.models.hfconfig import HFConfig, UnsupportedModelError, read_config
from packrt.models.keymap import Family, KeyMap, Mapped
from packrt.models.kinds import FAMILIES, describe, find_family, supported
from packrt.models.loading import LoadSource, load_source
from packrt.models.mxfp4 import MXFP4Pairs, is_mxfp4
from packrt.models.quantization import check_quantize
from packrt_core.dtypes import FLOATING_DTYPES, as_dtype, names_of
from packrt_core.nn.residency import check_residency

_SHOWN = 8  # problems listed in one message; the rest are counted


def _problems(kind: str, lines: list[str], fix: str) -> CheckpointError:
    shown = "\n  ".join(lines[:_SHOWN])
    more = f"\n  ... and {len(lines) - _SHOWN} more" if len(lines) > _SHOWN else ""
    return CheckpointError(f"{len(lines)} {kind}:\n  {shown}{more}\n{fix}")


@dataclass(frozen=True)
class KeyMatch:
    """A checkpoint's header names read through a family's key map, against the model's parameters.

    ``plan``: model key -> where its tensor comes from (names and shapes fit); ``missing``: model keys
    no tensor maps to; ``unexpected``: checkpoint keys the key map neither maps to a parameter nor
    ignores by design; ``misfits``: (checkpoint key, its shape after the key map's transform, model
    key) whose shape differs from the model's; ``prefix``: the name prefix the checkpoint carries.
    """

    plan: dict[str, Mapped]
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    misfits: tuple[tuple[str, tuple[int, ...], str], ...]
    prefix: str


def match_keys(info: packrt_io.CheckpointInfo, keymap: KeyMap, expected: dict[str, tuple[int, ...]]) -> KeyMatch:
    """How ``info``'s tensors map onto the parameters ``expected`` (model key -> shape); headers only."""
    plan: dict[str, Mapped] = {}
    unexpected: list[str] = []
    misfits: list[tuple[str, tuple[int, ...], str]] = []
    prefix = ""
    for key, tensor in info.tensors.items():
        found = keymap.lookup(key)
        if found == "ignored":
            continue
        if found is None or found.model not in expected:
            unexpected.append(key)
            continue
        prefix = prefix or keymap.strip(key)[0]
        shape = tensor.shape[::-1] if found.transform == "transpose" else tensor.shape
        if shape != expected[found.model]:
            misfits.append((key, shape, found.model))
            continue
        plan[found.model] = found
    misfit_models = {model_key for _, _, model_key in misfits}
    missing = tuple(key for key in expected if key not in plan and key not in misfit_models)
    return KeyMatch(plan, missing, tuple(unexpected), tuple(misfits), prefix)


# Weight dtypes the families serve: a whole model in one of them runs; kernels do not mix them.
SERVED_DTYPES = ("F32", "BF16", "F16", "F64")


def check_dtypes(info: packrt_io.CheckpointInfo, plan: dict[str, Mapped], cast: packrt.dtype | None, name: str) -> None:
    """Every planned tensor floating and, unless ``dtype=`` casts them all, of one dtype (named otherwise)."""
    where = str(info.path)
    counts = Counter(info.tensors[mapped.checkpoint].dtype for mapped in plan.values())
    for mapped in plan.values():
        tensor = info.tensors[mapped.checkpoint]
        if tensor.dtype not in SERVED_DTYPES:
            raise CheckpointError(
                f"checkpoint {where!r}: tensor {mapped.checkpoint!r} in {tensor.file!r} is {tensor.dtype}; {name} "
                f"serves floating weights ({', '.join(SERVED_DTYPES)}): re-save the checkpoint with floating weights"
            )
    if cast is None and len(counts) > 1:
        usual = counts.most_common(1)[0][0]
        odd = next(m.checkpoint for m in plan.values() if info.tensors[m.checkpoint].dtype != usual)
        raise CheckpointError(
            f"checkpoint {where!r}: tensor {odd!r} in {info.tensors[odd].file!r} is {info.tensors[odd].dtype} but "
            f"the model's other weights are {usual} ({dict(counts)}); packrt's kernels do not mix dtypes in one "
            "model: pass dtype=packrt.float32 (or another) to cast every weight, or re-save the checkpoint in one dtype"
        )


def plan_load(
    info: packrt_io.CheckpointInfo, keymap: KeyMap, expected: dict[str, tuple[int, ...]], strict: bool, name: str
) -> dict[str, Mapped]:
    """model key -> where its tensor comes from, after checking names and shapes against the headers."""
    where = str(info.path)
    match = match_keys(info, keymap, expected)
    for key, shape, model_key in match.misfits:
        tensor = info.tensors[key]
        found = keymap.lookup(key)
        transposed = isinstance(found, Mapped) and found.transform == "transpose"
        stored = f"{tensor.shape}, transposed to {shape}" if transposed else f"{shape}"
        raise CheckpointError(
            f"checkpoint {where!r}: tensor {key!r} in {tensor.file!r} has shape {stored}, but {name} built from "
            f"config.json needs {expected[model_key]} for {model_key!r}; config.json and the weights "
            "disagree: use the config.json saved with these weights"
        )
    missing = [
        f"{keymap.checkpoint_name(model_key, match.prefix)!r} (packrt {model_key!r}, shape {expected[model_key]})"
        for model_key in match.missing
    ]
    if strict and missing:
        raise _problems(
            f"tensors missing from checkpoint {where!r}",
            missing,
            f"{name} built from config.json needs them: check that every shard is present and config.json "
            "belongs to these weights, or pass strict=False to leave them unloaded",
        )
    unexpected = []
    for key in match.unexpected:
        found = keymap.lookup(key)
        target = f" (packrt name {found.model!r})" if isinstance(found, Mapped) else ""
        unexpected.append(f"tensor {key!r} in {info.tensors[key].file!r}{target} is not a parameter of {name}")
    if strict and unexpected:
        raise _problems(
            f"unexpected tensors in checkpoint {where!r}",
            unexpected,
            "they are neither in the family's key map nor ignored by design; check config.json, or pass "
            "strict=False to skip them",
        )
    return match.plan


def _progress_bar(progress: bool | None, total: int, description: str) -> Any:
    """A tqdm bar shown once a load has run ~1 s (None when quiet, not a terminal, or no tqdm)."""
    if progress is False:
        return None
    if progress is None:
        try:
            if not sys.stderr.isatty():
                return None
        except (AttributeError, ValueError):
            return None
    try:
        tqdm = importlib.import_module("tqdm")
    except ImportError:
        return None
    return tqdm.tqdm(total=total, desc=description, unit="B", unit_scale=True, delay=1.0, leave=False)


class PretrainedDTypeError(DTypeError, ValueError):
    """``dtype`` for a load names no floating packrt dtype (also a ValueError: the value is wrong)."""


def _accepted_dtype_names() -> str:
    """The floating dtypes a load casts to, each with the aliases it is also read by."""
    listed = []
    for floating in FLOATING_DTYPES:
        name, *aliases = names_of(floating)
        listed.append(f"{name} ({', '.join(aliases)})" if aliases else name)
    return ", ".join(listed)


def _dtype(dtype: packrt.dtype | str | None) -> packrt.dtype | None:
    if dtype is None:
        return None
    try:
        found = as_dtype(dtype)
    except DTypeError as err:
        raise PretrainedDTypeError(
            f"from_pretrained: dtype {dtype!r} is not a floating packrt dtype; accepted: {_accepted_dtype_names()}, "
            "or a dtype object such as packrt.bfloat16"
        ) from err
    if not found.is_floating_point:
        raise PretrainedDTypeError(
            f"from_pretrained: dtype {dtype!r} is {found.name}, not a floating packrt dtype; weights are cast to a "
            f"floating dtype: {_accepted_dtype_names()}"
        )
    return found


def load_tensors(
    info: packrt_io.CheckpointInfo, plan: dict[str, Mapped], dtype: packrt.dtype | None, progress: bool | None
) -> tuple[dict[str, packrt.Tensor], tuple[packrt_io.MappedFile, ...]]:
    """The planned tensors, memory-mapped file by file (transposed views where the key map says), and
    the mapped files some of them are views of (a tensor cast to ``dtype`` is a copy, not a view)."""
    wanted = {mapped.checkpoint: model_key for model_key, mapped in plan.items()}
    state: dict[str, packrt.Tensor] = {}
    files: list[packrt_io.MappedFile] = []
    bar = _progress_bar(progress, info.total_bytes, f"loading {info.path.parent.name or info.path.name}")
    try:
        for shard in info.shards:
            arrays, report = packrt_io.load_arrays(shard, mmap=True)
            viewed = False
            for key, array in arrays.items():
                model_key = wanted.get(key)
                if model_key is None:
                    continue
                tensor = packrt.from_numpy(array.T if plan[model_key].transform == "transpose" else array)
                if dtype is not None and tensor.dtype.is_floating_point and tensor.dtype is not dtype:
                    tensor = tensor.to(dtype)
                else:
                    viewed = True
                state[model_key] = tensor
            if viewed and report.mapped_file is not None:
                files.append(report.mapped_file)
            if bar is not None:
                bar.update(report.data_bytes)
    finally:
        if bar is not None:
            bar.close()
    return state, tuple(files)


def from_pretrained(
    path: str | os.PathLike[str],
    *,
    dtype: packrt.dtype | str | None = None,
    weight_residency: str | None = None,
    device: str = "cpu",
    strict: bool = True,
    progress: bool | None = None,
    quantize: str | None = None,
) -> nn.Module:
    """The model of a Hugging Face directory (config.json + safetensors), or of a GGUF file, loaded and in eval mode.

    ``model_type`` ``bert`` gives a :class:`~packrt.models.BertEncoder` (last hidden state), ``roberta``
    and ``xlm-roberta`` a :class:`~packrt.models.RobertaEncoder`; every other model type of
    :func:`~packrt.models.supported` (``gpt2``, the rotary decoders) gives a causal LM (logits, ``generate``).
    ``weight_residency`` applies to every packing layer (None keeps each layer's default);
    ``"borrowed"`` serves from the memory-mapped files. ``dtype`` casts floating weights
    (default: served in the checkpoint's own dtype). ``strict=False`` skips unknown tensors and
    leaves missing ones unloaded. ``progress``: a bar for loads over ~1 s (None: only on a
    terminal; needs the ``progress`` extra). ``device`` other than ``"cpu"`` moves the loaded model
    there. ``quantize="int8"`` serves every untied Linear as an int8
    :class:`~packrt.nn.QuantizedLinear` (weights per output channel at load, activations per row at
    run time; embeddings and heads tied to them stay float: :mod:`packrt.models.quantization`).
    Errors are :class:`~packrt.errors.CheckpointError` naming the file and key.

    A path to a ``.gguf`` file (llama.cpp's format; the ``gguf`` extra) is read by
    :func:`packrt.models.gguf.read_gguf` and loaded by the same road: F32/F16/BF16 tensors as stored
    (mapped), quantised ones dequantised to float32 (then to int8 with ``quantize``).
    """
    check_quantize(quantize)
    check_residency(weight_residency, "from_pretrained")  # before any file is read; the one check of the load
    cast = _dtype(dtype)
    described = describe(path)  # what the path holds: the answer packrt serve and packrt-ray read too
    directory = described.weights  # a sentence-transformers directory's Transformer step
    source: LoadSource
    if described.format == "gguf":
        from packrt.models.gguf import read_gguf  # imported on use: GGUF needs the gguf extra

        source = read_gguf(directory)
    else:
        source = HFDirectory.read(directory, described.family)
    return load_source(
        source,
        cast=cast,
        weight_residency=weight_residency,
        device=device,
        strict=strict,
        progress=progress,
        quantize=quantize,
    )


def head_as_stored(config: HFConfig, info: packrt_io.CheckpointInfo, family: Family) -> HFConfig:
    """``config``, untied where the checkpoint stores an LM head of its own: transformers 5 ties the head to
    the embedding only when the file leaves the head out, and otherwise serves the file's head whatever
    ``tie_word_embeddings`` says (a head stored twice with the embedding's values gives the same logits)."""
    if completed(config).get("tie_word_embeddings") is not True:  # untied, or a value the schema will refuse
        return config
    untied = config.with_values({"tie_word_embeddings": False})
    head = next((rule.checkpoint for rule in family.keymap(untied).rules if rule.model == "lm_head.weight"), None)
    return untied if head is not None and head in info.tensors else config


@dataclass(frozen=True)
class HFDirectory:
    """A Hugging Face model directory: config.json (its ``config``, the head untied as :func:`head_as_stored`
    says), the safetensors weights' headers (``info``), generation_config.json."""

    directory: Path
    config: HFConfig
    family: Family
    info: packrt_io.CheckpointInfo
    # an MXFP4 checkpoint's pairs (gpt-oss's experts), which ``info`` lists as the float tensors they stand for
    mxfp4: MXFP4Pairs | None = None

    @classmethod
    def read(cls, directory: Path, family: Family) -> HFDirectory:
        """config.json and the weights' headers (no tensor data), read once."""
        info = packrt_io.inspect_checkpoint(directory)
        config = family.model_config(read_config(directory))
        mxfp4 = MXFP4Pairs.of(info) if is_mxfp4(config) else None
        info = info if mxfp4 is None else mxfp4.info
        return cls(directory, head_as_stored(config, info, family), family, info, mxfp4)

    @property
    def name(self) -> str:
        return f"{(self.config.get('architectures') or [self.family.name])[0]} ({self.config.get('model_type')})"

    def generation(self) -> GenerationDefaults:
        return read_generation_defaults(self.directory, self.config)

    def headers(self) -> tuple[packrt_io.CheckpointInfo, KeyMap]:
        return self.info, self.family.keymap(self.config)

    def keep_blocks(self, model: nn.Module, keymap: KeyMap) -> list[str]:
        return []  # safetensors hold no quantized blocks

    def tensors(
        self,
        info: packrt_io.CheckpointInfo,
        keymap: KeyMap,
        expected: dict[str, tuple[int, ...]],
        strict: bool,
        cast: packrt.dtype | None,
        progress: bool | None,
    ) -> tuple[dict[str, packrt.Tensor], tuple[packrt_io.MappedFile, ...]]:
        plan = plan_load(info, keymap, expected, strict, self.name)
        check_dtypes(info, plan, cast, self.name)
        if self.mxfp4 is None:
            return load_tensors(info, plan, cast, progress)
        quantized = {mapped.checkpoint: key for key, mapped in plan.items() if mapped.checkpoint in self.mxfp4.names}
        stored = {key: mapped for key, mapped in plan.items() if mapped.checkpoint not in quantized}
        state, files = load_tensors(info, stored, cast, progress)
        state.update(self.mxfp4.load(info.shards, quantized, cast))  # copies: dequantized
        return state, files


def check_pretrained(
    directory: str | os.PathLike[str], checkpoint: str | os.PathLike[str] | None = None
) -> packrt_io.CheckReport:
    """Whether :func:`from_pretrained` of ``directory`` would take ``checkpoint`` (default: the directory's
    own weights), from headers alone: no tensor data is read and no weight memory is spent.

    The model is declared from the directory's config.json under :func:`packrt.meta_init`. A checkpoint
    with Hugging Face names is read through the family's key map, as ``from_pretrained`` reads it: the
    names the family leaves unused by design (a BERT pooler, ``position_ids``) are neither missing nor
    unexpected, every key is reported by its checkpoint name, and shapes are compared after the map's
    transform; dtypes are not compared, since ``from_pretrained`` serves a checkpoint in its own dtype.
    A checkpoint with packrt's names (as ``packrt.io.save_checkpoint`` writes the model) is compared
    by :func:`packrt.io.check_checkpoint` (keys, shapes, dtypes), as ``packrt.io.load_checkpoint``
    would read it. Which of the two namings applies is the one more of the checkpoint's keys follow.
    """
    config = read_config(Path(os.fspath(directory)))
    family = find_family(config)
    config = family.model_config(config)
    path = directory if checkpoint is None else checkpoint
    info = packrt_io.inspect_checkpoint(path)
    config = head_as_stored(config, info, family)
    validate(config)  # the schema first: nothing is declared from a config it refuses
    with packrt.meta_init():
        model = family.build(config)
    state = model.state_dict(keep_vars=True)
    expected = {key: tuple(value.shape) for key, value in state.items()}
    keymap = family.keymap(config)
    match = match_keys(info, keymap, expected)
    if sum(key in state for key in info.tensors) > len(match.plan) + len(match.misfits):
        return packrt_io.check_checkpoint(model, path)
    mismatched = []
    for key, _, model_key in match.misfits:
        held = info.tensors[key]
        found = keymap.lookup(key)
        transposed = isinstance(found, Mapped) and found.transform == "transpose"
        needed = expected[model_key][::-1] if transposed else expected[model_key]  # in the file's layout
        mismatched.append(packrt_io.Mismatch(key, held.dtype, needed, held.dtype, held.shape))
    missing = tuple(keymap.checkpoint_name(model_key, match.prefix) for model_key in match.missing)
    return packrt_io.CheckReport(info, missing, tuple(sorted(match.unexpected)), tuple(mismatched))


__all__ = [
    "FAMILIES",
    "HFDirectory",
    "head_as_stored",
    "KeyMatch",
    "PretrainedDTypeError",
    "SERVED_DTYPES",
    "UnsupportedModelError",
    "check_dtypes",
    "check_pretrained",
    "find_family",
    "from_pretrained",
    "match_keys",
    "plan_load",
    "supported",
]
