"""What a model path holds, decided in one place: :func:`describe`, over the family table and modules.json.

``packrt serve``, packrt-ray, ``packrt warmup`` and :func:`~packrt.models.from_pretrained` all ask
:func:`describe` what a directory or file is; none keeps a list of model types of its own, so a family
added to :data:`FAMILIES` (each :class:`~packrt.models.keymap.Family` saying its ``kind``) is served the
same way by all of them. Only small files are read; no weight is:

- a ``.gguf`` file is a causal LM of the family its ``general.architecture`` names;
- a directory with ``modules.json`` whose config_sentence_transformers.json says ``CrossEncoder`` is a
  cross-encoder (:class:`Scoring`): its Transformer step must be a sequence classifier, and its head is
  ``"sequence-classification"``, as a plain ``...ForSequenceClassification`` directory's is;
- any other directory with ``modules.json`` is a sentence-transformers pipeline (:class:`Pipeline`: the steps,
  a Transformer, a Pooling, optionally a Normalize; ``sentence_bert_config.json``'s ``max_seq_length``;
  the Pooling step's modes): its Transformer step's config.json names the family (an encoder, or a decoder's
  base model); the head is the pipeline's pooling;
- any other directory is a Hugging Face one: config.json's ``model_type`` and ``architectures`` name the
  family (:func:`find_family`), whose ``kind`` says encoder or causal LM; a ``...ForSequenceClassification``
  architecture's head is ``"sequence-classification"`` (a reranker, served by ``CrossEncoder``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import packrt_io
from packrt.errors import CheckpointError, PackrtError
from packrt.models import (
    bert,
    gemma2,
    gemma3,
    gpt2,
    gpt_oss,
    granite,
    llama,
    ministral,
    modernbert,
    olmo2,
    phi3,
    qwen3,
    qwen3_moe,
    roberta,
    smollm3,
)
from packrt.models.classifier import classifies
from packrt.models.decoder_blocks import base_architecture
from packrt.models.gguf_architectures import ARCHITECTURES
from packrt.models.hfconfig import HFConfig, UnsupportedModelError, read_config, read_json
from packrt.models.keymap import Family, FamilyKind

FAMILIES: tuple[Family, ...] = (
    bert.FAMILY,
    roberta.FAMILY,
    roberta.XLM_FAMILY,
    modernbert.FAMILY,
    gpt2.FAMILY,
    llama.FAMILY,
    qwen3.FAMILY,
    qwen3_moe.FAMILY,
    gemma3.FAMILY,
    gemma3.CONDITIONAL_FAMILY,
    phi3.FAMILY,
    ministral.FAMILY,
    smollm3.FAMILY,
    granite.FAMILY,
    gemma2.FAMILY,
    olmo2.FAMILY,
    gpt_oss.FAMILY,
)


def supported() -> dict[str, tuple[str, ...]]:
    """model_type -> the architectures ``from_pretrained`` builds for it."""
    table: dict[str, tuple[str, ...]] = {}
    for family in FAMILIES:
        for model_type in family.model_types:
            table[model_type] = family.architectures
    return table


def encoder_families() -> str:
    """The encoder families' names, for messages ("bert, roberta, xlm-roberta")."""
    return ", ".join(family.name for family in FAMILIES if family.kind == "encoder")


def find_family(config: HFConfig) -> Family:
    """The family for config.json's ``model_type`` and ``architectures`` (UnsupportedModelError if none)."""
    model_type = config.get("model_type")
    listed = "; ".join(f"{kind} ({', '.join(archs)})" for kind, archs in supported().items())
    family = next((f for f in FAMILIES if model_type in f.model_types), None)
    if family is None:
        raise UnsupportedModelError(
            f"{str(config.path)!r}: model_type {model_type!r} is not one packrt can build; supported model types "
            f"(architectures): {listed}"
        )
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(name, str) for name in architectures):
        raise CheckpointError(
            f"{str(config.path)!r}: field 'architectures' is {architectures!r}, expected a list of class names "
            f"such as [{family.architectures[0]!r}]; fix config.json"
        )
    unknown = [name for name in architectures if name not in family.architectures + base_models(family)]
    if unknown:
        raise UnsupportedModelError(
            f"{str(config.path)!r}: architecture {unknown[0]!r} (model_type {model_type!r}) is not one packrt "
            f"builds; for {model_type!r} it builds {', '.join(family.architectures)}; supported: {listed}"
        )
    return family


def base_models(family: Family) -> tuple[str, ...]:
    """The base-model classes of a rotary decoder family (``Qwen3Model``, ``Gemma3TextModel`` for
    ``Qwen3ForCausalLM``, ``Gemma3ForCausalLM``): what sentence-transformers saves for an embedding model over
    the decoder. No head: served as the Transformer step of a sentence-transformers directory only."""
    stems = [name.removesuffix("ForCausalLM") for name in family.architectures if name.endswith("ForCausalLM")]
    # a text-only model_type of a multimodal family (gemma3_text) names its base model ...TextModel
    suffix = "TextModel" if any(kind.endswith("_text") for kind in family.model_types) else "Model"
    return tuple(stem + suffix for stem in stems)


# sentence-transformers' pooling modes, in its order (its 5.x flags are pooling_mode_<name>)
POOLING_MODES = ("cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
# sentence-transformers 6's ``pooling_mode`` names -> the legacy names packrt pools by
_POOLING_NAMES = {
    "cls": "cls_token",
    "max": "max_tokens",
    "mean": "mean_tokens",
    "weightedmean": "weightedmean_tokens",
    **{m: m for m in POOLING_MODES},
}
# the modules.json steps SentenceEncoder runs, in the order it runs them: Dense steps (any number) after the
# pooling, and Normalize last
STEPS = ("Transformer", "Pooling", "Dense", "Normalize")
# a Dense step's activation_function (torch's class path) -> the name SentenceEncoder applies it by
DENSE_ACTIVATIONS = {
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.GELU": "gelu",
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.activation.SiLU": "silu",
}


def _pooling_modes(config: dict[str, Any], where: Path) -> tuple[str, ...]:
    """The pooling modes of a Pooling step's config, in its order: sentence-transformers 6's ``pooling_mode``
    (a name or a list of names) or 5's ``pooling_mode_*`` flags; a mode packrt does not know is refused
    by name, never skipped."""
    given = config.get("pooling_mode")
    if given is not None:
        names = [given] if isinstance(given, str) else given
        if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
            raise CheckpointError(f"{str(where)!r}: field 'pooling_mode' is {given!r}, expected a mode name or a list")
    else:
        flags = {f"pooling_mode_{m}": m for m in POOLING_MODES}
        names = [mode for key, mode in flags.items() if config.get(key)]
    unknown = [name for name in names if name not in _POOLING_NAMES]
    if unknown:
        implemented = ", ".join(sorted({*_POOLING_NAMES}))
        raise UnsupportedModelError(
            f"{str(where)!r}: pooling mode {unknown[0]!r} is one packrt does not know (it pools by {implemented}); "
            "its vectors would differ from sentence-transformers'. Serve the model with sentence-transformers"
        )
    if not names:
        raise CheckpointError(f"{str(where)!r} turns on no pooling mode ({', '.join(sorted(_POOLING_NAMES))})")
    return tuple(_POOLING_NAMES[name] for name in names)


@dataclass(frozen=True)
class DenseStep:
    """A sentence-transformers Dense step: ``activation(x @ weight.T + bias)`` on the pooled vector, read from
    its folder's config.json (the weights, ``linear.weight`` and ``linear.bias``, are in its model.safetensors)."""

    path: Path
    in_features: int
    out_features: int
    bias: bool
    activation: str  # a value of DENSE_ACTIVATIONS
    residual: bool  # sentence-transformers' use_residual: the input added to the output (same width only)

    @classmethod
    def read(cls, path: Path) -> DenseStep:
        where = path / "config.json"
        config = _json(where, "a Dense step's config.json")
        if not isinstance(config, dict):
            raise CheckpointError(f"{str(where)!r} must hold a JSON object (in_features, out_features, ...)")
        sizes = {}
        for name in ("in_features", "out_features"):
            value = config.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise CheckpointError(f"{str(where)!r}: field {name!r} is {value!r}, expected a positive integer")
            sizes[name] = value
        given = config.get("activation_function", "torch.nn.modules.activation.Tanh")  # its default
        if given not in DENSE_ACTIVATIONS:
            raise UnsupportedModelError(
                f"{str(where)!r}: activation_function {given!r} is not one SentenceEncoder applies "
                f"({', '.join(sorted(DENSE_ACTIVATIONS))}); its vectors would differ from sentence-transformers'. "
                "Serve the model with sentence-transformers"
            )
        residual = bool(config.get("use_residual", False))
        if residual and sizes["in_features"] != sizes["out_features"]:
            raise UnsupportedModelError(
                f"{str(where)!r}: use_residual with in_features {sizes['in_features']} != out_features "
                f"{sizes['out_features']} needs a residual projection SentenceEncoder does not run; serve the model "
                "with sentence-transformers"
            )
        bias = config.get("bias", True)
        return cls(path, sizes["in_features"], sizes["out_features"], bool(bias), DENSE_ACTIVATIONS[given], residual)


def _steps(directory: Path) -> list[tuple[str, str]]:
    """modules.json's steps as (class name, folder) in its order: the one reading of the file, for an embedding
    pipeline and a cross-encoder alike."""
    modules = _json(directory / "modules.json", "modules.json (its list of steps)")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise CheckpointError(f"{str(directory / 'modules.json')!r} must hold a JSON list of modules")
    return [(str(m.get("type", "")).rsplit(".", 1)[-1], str(m.get("path", ""))) for m in modules]


def _json(path: Path, what: str) -> Any:
    try:
        return read_json(path)
    except FileNotFoundError:
        raise CheckpointError(f"{str(path)!r} is missing; a sentence-transformers directory holds {what}") from None


@dataclass(frozen=True)
class Pipeline:
    """What modules.json and its configs say: where the transformer is, how to pool, the Dense steps after the
    pooling, whether to normalize, and config_sentence_transformers.json's prompts."""

    transformer: Path
    pooling: tuple[str, ...]
    normalize: bool
    max_seq_length: int | None
    dense: tuple[DenseStep, ...] = ()
    include_prompt: bool = True  # the pooling counts the prompt's tokens (False: they are masked out of it)
    prompts: tuple[tuple[str, str], ...] = ()  # (name, text) in the file's order
    default_prompt_name: str | None = None  # the prompt encode prepends when none is asked for

    @classmethod
    def read(cls, directory: Path) -> Pipeline:
        steps = _steps(directory)
        kinds = [kind for kind, _ in steps]
        for kind, path in steps:
            if kind not in STEPS:  # a LayerNorm, a WordWeights...: skipping it would give other vectors
                raise UnsupportedModelError(
                    f"{str(directory / 'modules.json')!r} lists a {kind} step ({path!r}), which SentenceEncoder "
                    f"does not run (it runs {', '.join(STEPS)}); skipping it would give other vectors than "
                    "sentence-transformers'. Serve the model with sentence-transformers"
                )
        expected = [
            "Transformer",
            "Pooling",
            *(["Dense"] * kinds.count("Dense")),
            *(["Normalize"] * ("Normalize" in kinds)),
        ]
        if kinds != expected:
            raise CheckpointError(
                f"{str(directory / 'modules.json')!r} lists the steps {kinds}; SentenceEncoder runs a Transformer, a "
                "Pooling, any Dense steps and an optional Normalize, in that order"
            )
        paths = dict(steps)
        transformer = directory / paths["Transformer"]
        pooling_path = directory / (paths["Pooling"] or "1_Pooling") / "config.json"
        pooling_config = _json(pooling_path, "the pooling step's config")
        if not isinstance(pooling_config, dict):
            raise CheckpointError(
                f"{str(pooling_path)!r} must hold a JSON object: pooling_mode or pooling_mode_* flags"
            )
        modes = _pooling_modes(pooling_config, pooling_path)
        dense = tuple(DenseStep.read(directory / path) for kind, path in steps if kind == "Dense")
        max_length = _max_seq_length(transformer)
        prompts, default = _prompts(directory / "config_sentence_transformers.json")
        include = pooling_config.get("include_prompt", True)
        return cls(transformer, modes, "Normalize" in kinds, max_length, dense, bool(include), prompts, default)

    def prompt(self, prompt_name: str | None = None, prompt: str | None = None) -> str:
        """The text put before each input, as sentence-transformers' ``encode`` picks it (:func:`choose_prompt`)."""
        return choose_prompt(self.prompts, self.default_prompt_name, prompt_name, prompt)


def choose_prompt(
    prompts: tuple[tuple[str, str], ...], default_name: str | None, prompt_name: str | None, prompt: str | None
) -> str:
    """The text put before each input, as sentence-transformers picks it: ``prompt`` when given, else the prompt
    named ``prompt_name``, else the default prompt, else none (an unknown name is a :class:`PromptNameError`)."""
    if prompt is not None:
        return prompt
    named = dict(prompts)
    name = prompt_name if prompt_name is not None else default_name
    if name is None:
        return ""
    if name not in named:
        raise PromptNameError(
            f"prompt_name {name!r} is not among this model's prompts {sorted(named)} "
            "(config_sentence_transformers.json); pass one of them, or the text itself as prompt="
        )
    return named[name]


def _max_seq_length(transformer: Path) -> int | None:
    """sentence_bert_config.json's ``max_seq_length`` in a Transformer step's folder (None: absent or null)."""
    settings = transformer / "sentence_bert_config.json"
    bert_config = _json(settings, "sentence_bert_config.json") if settings.exists() else {}
    max_length = bert_config.get("max_seq_length") if isinstance(bert_config, dict) else bert_config
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length <= 0):
        raise CheckpointError(
            f"{str(settings)!r}: field 'max_seq_length' is {max_length!r}, expected a positive integer or null "
            "(the most tokens a text is truncated to); fix the file"
        )
    return max_length


def is_cross_encoder(directory: Path) -> bool:
    """Whether a directory with modules.json is a sentence-transformers CrossEncoder (its
    config_sentence_transformers.json says ``"model_type": "CrossEncoder"``) rather than an embedding model."""
    path = directory / "config_sentence_transformers.json"
    config = _json(path, "config_sentence_transformers.json") if path.is_file() else {}
    return isinstance(config, dict) and config.get("model_type") == "CrossEncoder"


@dataclass(frozen=True)
class Scoring:
    """What a cross-encoder (reranker) directory says beside its sequence classifier: where the classifier is,
    the activation put on its logits, the most tokens of a pair, and its prompts.

    A sentence-transformers 4-6 CrossEncoder directory keeps these in modules.json (one Transformer step),
    config_sentence_transformers.json (``activation_fn``, ``prompts``) and sentence_bert_config.json; an older
    one or a plain Hugging Face classifier directory in config.json (``sentence_transformers.activation_fn``,
    or ``sbert_ce_default_activation_function``) or nowhere. ``activation`` None is sentence-transformers'
    default: sigmoid for one label, none for more.
    """

    transformer: Path
    activation: str | None
    max_seq_length: int | None
    prompts: tuple[tuple[str, str], ...] = ()
    default_prompt_name: str | None = None

    @classmethod
    def read(cls, directory: Path) -> Scoring:
        transformer = directory
        if (directory / "modules.json").is_file():
            steps = _steps(directory)
            if [kind for kind, _ in steps] != ["Transformer"]:
                raise UnsupportedModelError(
                    f"{str(directory / 'modules.json')!r} lists the CrossEncoder steps {[kind for kind, _ in steps]}; "
                    "packrt's CrossEncoder runs one Transformer step over a sequence classifier (a LogitScore "
                    "over a causal LM is not served yet). Serve the model with sentence-transformers"
                )
            transformer = directory / steps[0][1]
        own = directory / "config_sentence_transformers.json"
        settings = _json(own, "config_sentence_transformers.json") if own.is_file() else {}
        config = read_config(transformer)
        legacy = config.get("sentence_transformers")
        # sentence-transformers' order: its own file, then config.json's entry, then the entry of before 4.0
        candidates = (
            (own, settings.get("activation_fn") if isinstance(settings, dict) else None),
            (config.path, legacy.get("activation_fn") if isinstance(legacy, dict) else None),
            (config.path, config.get("sbert_ce_default_activation_function")),
        )
        where, path = next(((w, p) for w, p in candidates if p is not None), (own, None))
        activation = None
        if isinstance(path, str) and path.startswith("torch."):  # others: not imported, the default (as its loader)
            activation = DENSE_ACTIVATIONS.get(path)
            if activation is None:
                raise UnsupportedModelError(
                    f"{str(where)!r}: activation_fn {path!r} is not one packrt's CrossEncoder applies "
                    f"({', '.join(sorted(DENSE_ACTIVATIONS))}); its scores would differ from sentence-transformers'. "
                    "Serve the model with sentence-transformers, or pass activation_fn= to predict"
                )
        prompts, default = _prompts(own)
        return cls(transformer, activation, _max_seq_length(transformer), prompts, default)

    def prompt(self, prompt_name: str | None = None, prompt: str | None = None) -> str:
        """The text put before each pair's first text, as sentence-transformers picks it (:func:`choose_prompt`)."""
        return choose_prompt(self.prompts, self.default_prompt_name, prompt_name, prompt)


class PromptNameError(PackrtError, ValueError):
    """A prompt name the sentence-transformers directory does not define."""


def _prompts(path: Path) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """config_sentence_transformers.json's prompts and default prompt name (none when the file is absent)."""
    if not path.exists():
        return (), None
    config = _json(path, "config_sentence_transformers.json")
    prompts = config.get("prompts", {}) if isinstance(config, dict) else None
    if not isinstance(prompts, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()):
        raise CheckpointError(f"{str(path)!r}: field 'prompts' is {prompts!r}, expected an object of name: text")
    default = config.get("default_prompt_name")
    if default is not None and default not in prompts:
        raise CheckpointError(
            f"{str(path)!r}: field 'default_prompt_name' is {default!r}, which is not among its prompts "
            f"{sorted(prompts)}; fix the file"
        )
    return tuple(prompts.items()), default


# What the served model's output is: a sentence-transformers pipeline's pooled embedding, a plain
# encoder's last hidden state (``packrt serve`` pools it by the mean, as sentence-transformers would),
# a sequence classifier's logits (a cross-encoder: one score per label for a pair of texts), or a causal
# LM's logits over the vocabulary.
Head = Literal["sentence-embedding", "hidden-state", "sequence-classification", "lm"]
Format = Literal["huggingface", "gguf"]


@dataclass(frozen=True)
class ModelDescription:
    """What :func:`describe` found at ``path``.

    ``kind``: ``"encoder"`` or ``"causal-lm"``; ``family``: the registry's family that builds it (its
    ``name`` is ``"bert"``, ``"roberta"``, ``"llama"``...); ``model_type`` and ``architecture``: the
    config.json names it answers to (for a GGUF file, those its architecture stands for); ``head``: see
    :data:`Head`; ``weights``: what :func:`~packrt.models.from_pretrained` loads (the path itself, or a
    sentence-transformers pipeline's Transformer directory).
    """

    path: Path
    weights: Path
    format: Format
    kind: FamilyKind
    family: Family = field(repr=False)
    model_type: str
    architecture: str
    head: Head

    @property
    def sentence_transformers(self) -> bool:
        """The path is a sentence-transformers directory (texts in, pooled embeddings out)."""
        return self.head == "sentence-embedding"

    def pipeline(self) -> Pipeline:
        """How an encoder's texts become embeddings: a sentence-transformers directory's own pipeline, or for a
        plain encoder directory what sentence-transformers makes of one (mean pooling; normalized here).
        A causal LM has none: :class:`~packrt.models.UnsupportedModelError`."""
        if self.head == "sequence-classification":
            raise UnsupportedModelError(
                f"{str(self.path)!r} is a {self.architecture} (a cross-encoder: it scores pairs of texts, it gives no "
                "sentence embeddings); load it with packrt.models.CrossEncoder, or serve it for POST /rerank"
            )
        if self.kind != "encoder" and not self.sentence_transformers:
            raise UnsupportedModelError(
                f"{str(self.path)!r} is a {self.family.name} causal LM; sentence embeddings need an encoder (a "
                f"sentence-transformers directory, or a {encoder_families()} directory with tokenizer.json)"
            )
        if self.sentence_transformers:
            return Pipeline.read(self.path)
        return Pipeline(self.weights, ("mean_tokens",), True, None)

    def scoring(self) -> Scoring:
        """What a cross-encoder's directory says beside its classifier (:class:`Scoring`); a path that holds no
        sequence classifier is an :class:`~packrt.models.UnsupportedModelError`."""
        if self.head != "sequence-classification":
            raise UnsupportedModelError(
                f"{str(self.path)!r} holds a {self.architecture}, not a sequence classifier; a cross-encoder "
                f"(reranker) is a {encoder_families()} ...ForSequenceClassification directory"
            )
        return Scoring.read(self.path)


def describe(path: str | os.PathLike[str]) -> ModelDescription:
    """What ``path`` holds (see the module docstring), read from its small files only.

    A path packrt cannot serve raises what :func:`~packrt.models.from_pretrained` would raise for it: a
    :class:`~packrt.errors.CheckpointError` naming the missing or unreadable file, or an
    :class:`~packrt.models.UnsupportedModelError` naming the model type or GGUF architecture and listing
    the supported ones.
    """
    where = Path(os.fspath(path))
    if packrt_io.named_gguf(where):  # a damaged .gguf file is opened as one: its open says what is wrong
        return _describe_gguf(where)
    if (where / "modules.json").is_file() and is_cross_encoder(where):
        found = _describe_directory(where, Scoring.read(where).transformer)
        if found.head != "sequence-classification":
            raise UnsupportedModelError(
                f"{str(where)!r} is a sentence-transformers CrossEncoder over a {found.architecture}; packrt scores "
                f"pairs with a sequence classifier ({encoder_families()} ...ForSequenceClassification) only"
            )
        return replace(found, path=where)
    if (where / "modules.json").is_file():
        pipeline = Pipeline.read(where)
        found = _describe_directory(where, pipeline.transformer)
        return replace(found, path=where, head="sentence-embedding")  # an encoder's or a decoder's hidden states
    found = _describe_directory(where, where)
    if found.kind == "causal-lm" and base_architecture(found.architecture):
        raise UnsupportedModelError(
            f"{str(where / 'config.json')!r}: architecture {found.architecture!r} is the {found.family.name} base "
            "model, without the LM head a causal LM needs; packrt serves it as the Transformer step of a "
            "sentence-transformers directory (modules.json) only. For completions, serve a ForCausalLM checkpoint"
        )
    return found


def _describe_directory(where: Path, weights: Path) -> ModelDescription:
    config = read_config(weights)  # CheckpointError: not a directory, no config.json, not a JSON object
    family = find_family(config)  # UnsupportedModelError: a model type or architecture packrt does not build
    architectures = config.get("architectures") or [family.architectures[0]]
    head: Head = "hidden-state" if family.kind == "encoder" else "lm"
    if classifies(architectures[0]):
        head = "sequence-classification"
    model_type = str(config.get("model_type"))
    return ModelDescription(where, weights, "huggingface", family.kind, family, model_type, architectures[0], head)


def _describe_gguf(where: Path) -> ModelDescription:
    arch = packrt_io.gguf_architecture(where)  # the start of the header: the full read is the load's
    spec = ARCHITECTURES.get(arch)
    if spec is None:
        listed = ", ".join(f"{name} (as {known.architecture})" for name, known in ARCHITECTURES.items())
        raise UnsupportedModelError(
            f"GGUF file {str(where)!r}: general.architecture {arch!r} is not one packrt can build; supported "
            f"GGUF architectures: {listed}"
        )
    family = spec.family
    head: Head = "hidden-state" if family.kind == "encoder" else "lm"
    return ModelDescription(where, where, "gguf", family.kind, family, spec.model_type, spec.architecture, head)


__all__ = [
    "DENSE_ACTIVATIONS",
    "FAMILIES",
    "POOLING_MODES",
    "DenseStep",
    "Format",
    "Head",
    "ModelDescription",
    "Pipeline",
    "PromptNameError",
    "STEPS",
    "Scoring",
    "choose_prompt",
    "is_cross_encoder",
    "base_models",
    "describe",
    "encoder_families",
    "find_family",
    "supported",
]
