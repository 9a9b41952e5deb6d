"""What a model path holds, decided in one place: :func:`describe`.

``packrt serve``, packrt-ray, ``packrt warmup`` and :func:`~packrt.models.from_pretrained` all ask
:func:`describe` what a directory or file is; none keeps a list of model types of its own, so a family
added to the registry (:data:`packrt.models.families.FAMILIES`, each :class:`~packrt.models.keymap.Family`
saying its ``kind``) is served the same way by all of them. Only small files are read; no weight is:

- a ``.gguf`` file is a causal LM of the family its ``general.architecture`` names;
- a directory with ``modules.json`` is a sentence-transformers pipeline: its Transformer step's
  config.json names the family, which must be an encoder; the head is the pipeline's pooling;
- any other directory is a Hugging Face one: config.json's ``model_type`` and ``architectures`` name the
  family (:func:`~packrt.models.families.find_family`), whose ``kind`` says encoder or causal LM.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import packrt_io
from packrt.models.families import find_family
from packrt.models.gguf_architectures import ARCHITECTURES
from packrt.models.hfconfig import UnsupportedModelError, read_config
from packrt.models.keymap import Family, FamilyKind
from packrt.models.pipeline import Pipeline

# What the served model's output is: a sentence-transformers pipeline's pooled embedding, a plain
# encoder's last hidden state (``packrt serve`` pools it by the mean, as sentence-transformers would),
# or a causal LM's logits over the vocabulary.
Head = Literal["sentence-embedding", "hidden-state", "lm"]
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
        if self.kind != "encoder":
            raise UnsupportedModelError(
                f"{str(self.path)!r} is a {self.family.name} causal LM; sentence embeddings need an encoder "
                "(a sentence-transformers directory, or a bert/roberta/xlm-roberta directory with tokenizer.json)"
            )
        if self.sentence_transformers:
            return Pipeline.read(self.path)
        return Pipeline(self.weights, ("mean_tokens",), True, None)


def describe(path: str | os.PathLike[str]) -> ModelDescription:
    """What ``path`` holds (see the module docstring), read from its small files only.

    A path packrt cannot serve raises what :func:`~packrt.models.from_pretrained` would raise for it: a
    :class:`~packrt.errors.CheckpointError` naming the missing or unreadable file, or an
    :class:`~packrt.models.UnsupportedModelError` naming the model type or GGUF architecture and listing
    the supported ones.
    """
    where = Path(os.fspath(path))
    if packrt_io.is_gguf(where):
        return _describe_gguf(where)
    if (where / "modules.json").is_file():
        pipeline = Pipeline.read(where)
        found = _describe_directory(where, pipeline.transformer)
        if found.kind != "encoder":
            raise UnsupportedModelError(
                f"{str(where / 'modules.json')!r}: the Transformer step {str(pipeline.transformer)!r} is a "
                f"{found.family.name} {found.kind}, but a sentence-transformers pipeline pools an encoder's hidden "
                "states; serve the causal LM's own directory instead"
            )
        return ModelDescription(
            where, found.weights, "huggingface", "encoder", found.family, found.model_type, found.architecture,
            "sentence-embedding",
        )  # fmt: skip
    return _describe_directory(where, where)


def _describe_directory(where: Path, weights: Path) -> ModelDescription:
    config = read_config(weights)  # CheckpointError: not a directory, no config.json, not a JSON object
    family = find_family(config)  # UnsupportedModelError: a model type or architecture packrt does not build
    architectures = config.get("architectures") or [family.architectures[0]]
    head: Head = "hidden-state" if family.kind == "encoder" else "lm"
    model_type = str(config.get("model_type"))
    return ModelDescription(where, weights, "huggingface", family.kind, family, model_type, architectures[0], head)


def _describe_gguf(where: Path) -> ModelDescription:
    arch = packrt_io.open_gguf(where).architecture  # the gguf extra; metadata and tensor list only
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


__all__ = ["Format", "Head", "ModelDescription", "describe"]
