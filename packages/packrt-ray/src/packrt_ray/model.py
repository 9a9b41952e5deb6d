"""What a Ray worker loads: a model directory checked in the driver, loaded once per actor.

:class:`ModelSource` is the small, picklable description that travels to every actor or replica:
an absolute directory, the kind of model it holds and the weight residency to load it with. It is
checked in the driver (:meth:`ModelSource.resolve`), so a wrong path or an unknown residency fails
there, at once, with a packrt error, instead of inside an actor where Ray would wrap it.

:func:`load` runs inside the actor: it measures the process's memory, loads the directory with
packrt (``SentenceEncoder.from_pretrained`` or ``packrt.models.from_pretrained``), packs every
layer now (``Module.initialize()``: a no-op under ``borrowed``, the full copy under ``packed``) and
measures again, so :class:`LoadedModel.memory` can say what the weights added to this process.

The kinds, read from the directory (the rule every route and batch mapper relies on):

- ``"sentence-encoder"``: the directory has ``modules.json`` (sentence-transformers): texts in,
  one embedding per text out.
- ``"encoder"``: an encoder family (bert, roberta, xlm-roberta): token ids in, the last hidden state out.
- ``"causal-lm"``: a causal family (gpt2, llama, qwen2, qwen3...): token ids in, logits out, and greedy
  generation.

:func:`packrt.models.describe` decides which (:func:`kind_of`), the same answer ``packrt serve`` reads.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

import packrt
import packrt.io
import packrt.models  # imported here, before any measure, so its import is not counted as weights
from packrt import nn
from packrt.errors import CheckpointError, PackrtError, ResidencyError
from packrt.models import CausalLM, SentenceEncoder
from packrt.models.kinds import encoder_families
from packrt_ray.memory import ProcessMemory, WeightMemory, weight_memory

ModelKind = Literal["sentence-encoder", "encoder", "causal-lm"]
KINDS: tuple[ModelKind, ...] = ("sentence-encoder", "encoder", "causal-lm")


class ModelDirectoryError(CheckpointError, FileNotFoundError):
    """The model directory does not exist, or is not a directory, where the driver looked for it."""


class ModelKindError(PackrtError, TypeError):
    """A route or a batch mapper was asked for something the loaded kind of model cannot do."""


class BatchColumnError(PackrtError, KeyError):
    """A batch lacks the column a mapper reads, or the column holds the wrong kind of values."""

    __str__ = Exception.__str__  # the message as written (KeyError's own __str__ would quote it)


class RequestError(PackrtError, ValueError):
    """An HTTP request body is not the JSON object a route takes."""


def kind_of(directory: str | os.PathLike[str]) -> ModelKind:
    """The kind of model ``directory`` holds (see the module docstring), as :func:`packrt.models.describe`
    decides it for every packrt entry point; packrt's errors (CheckpointError, UnsupportedModelError) otherwise."""
    described = packrt.models.describe(directory)
    if described.head == "sequence-classification":  # its output is scores, not the hidden state "encoder" gives
        raise packrt.models.UnsupportedModelError(
            f"{str(described.path)!r} is a {described.architecture} (a cross-encoder reranker); packrt-ray serves "
            "embeddings and generation only. Serve it with packrt serve (POST /rerank) or load it with "
            "packrt.models.CrossEncoder in your own deployment"
        )
    return "sentence-encoder" if described.sentence_transformers else described.kind


@dataclass(frozen=True)
class ModelSource:
    """A model directory as every worker will load it: an absolute path, its kind, a residency.

    Build it with :meth:`resolve` in the driver. The path must name the same files on every node
    that runs a worker (a shared filesystem, or a copy made once per node): workers load it by
    path and never receive the weights through Ray's object store.
    """

    path: str
    kind: ModelKind
    weight_residency: str = "borrowed"

    @classmethod
    def resolve(cls, path: str | os.PathLike[str], *, weight_residency: str = "borrowed") -> ModelSource:
        """Check ``path`` and ``weight_residency`` in this process and fix the kind of model.

        A relative ``path`` is made absolute against this process's working directory (Ray
        workers run elsewhere). A missing directory is a :class:`ModelDirectoryError`, an
        unknown residency a :class:`~packrt.errors.ResidencyError`, a directory that is no
        model a :class:`~packrt.errors.CheckpointError`.
        """
        if weight_residency not in nn.WEIGHT_RESIDENCIES:
            raise ResidencyError(
                f"weight_residency {weight_residency!r} is not one packrt knows; expected one of "
                f"{', '.join(nn.WEIGHT_RESIDENCIES)} ('borrowed' keeps one copy of the weights per node)"
            )
        given = Path(os.fspath(path)).expanduser()
        directory = given.absolute()
        if not directory.is_dir():
            what = "is a file" if directory.exists() else "does not exist"
            raise ModelDirectoryError(
                f"model directory {str(directory)!r} {what} (given as {os.fspath(path)!r}); expected a directory "
                "holding config.json and model.safetensors (or a sentence-transformers directory with "
                "modules.json); pass a path that every Ray node can read: a shared filesystem, or a copy made on "
                "each node before the job starts"
            )
        return cls(str(directory), kind_of(directory), weight_residency)

    def require(self, kinds: tuple[ModelKind, ...], what: str) -> None:
        """Raise :class:`ModelKindError` unless this source's kind is one of ``kinds`` (``what`` needs it)."""
        if self.kind not in kinds:
            raise ModelKindError(
                f"{what} needs a {' or '.join(kinds)} model, but {self.path!r} holds a {self.kind} "
                f"({_KIND_HINTS[self.kind]}); {_KIND_FIXES[kinds[0]]}"
            )


_KIND_HINTS: dict[ModelKind, str] = {
    "sentence-encoder": "texts in, embeddings out",
    "encoder": "token ids in, hidden states out",
    "causal-lm": "token ids in, logits and generation out",
}
_KIND_FIXES: dict[ModelKind, str] = {
    "sentence-encoder": "serve a sentence-transformers directory (one with modules.json and tokenizer.json)",
    "encoder": f"serve an encoder directory ({encoder_families()}) written by save_pretrained",
    "causal-lm": "serve a causal LM directory, or use a route this model has",
}


@dataclass(eq=False)  # a loaded model is itself, not its fields' values
class LoadedModel:
    """A model loaded inside a worker, with what its weights added to the process's memory.

    ``encoder`` is the :class:`~packrt.models.SentenceEncoder` for a sentence-encoder source, or for an
    encoder directory with a ``tokenizer.json`` (mean pooling, as ``packrt serve`` serves it; else None);
    ``model`` the packrt module in every case (the encoder's transformer, or the causal LM).
    ``before`` is the process's memory read just before the weights were loaded, ``after`` (read
    when this record is made) just after they were packed.
    """

    source: ModelSource
    model: nn.Module
    encoder: SentenceEncoder | None
    checkpoint_files: tuple[str, ...]
    before: ProcessMemory | None
    after: ProcessMemory | None = field(default_factory=ProcessMemory.read_or_none)

    @property
    def causal_lm(self) -> CausalLM:
        """The model as a causal LM (:class:`ModelKindError` for any other kind)."""
        self.source.require(("causal-lm",), "generation")
        return cast(CausalLM, self.model)

    @property
    def sentence_encoder(self) -> SentenceEncoder:
        """The sentence encoder (:class:`ModelKindError` for any other kind)."""
        self.source.require(("sentence-encoder",), "embedding texts")
        assert self.encoder is not None
        return self.encoder

    def memory(self) -> WeightMemory:
        """What the weights cost this process: the load's anonymous delta, the mapped files, packrt's report."""
        return weight_memory(self.model, self.source.weight_residency, self.checkpoint_files, self.before, self.after)


def _warm_up(weight_residency: str) -> None:
    """Pack and call a tiny Embedding + Linear once, so one-off costs (kernel compilation, imports on
    the first pack) are paid before the load is measured and are not counted as weights."""
    with packrt.meta_init():
        layers = (
            nn.Embedding(8, 64, weight_residency=weight_residency),
            nn.Linear(64, 4096, weight_residency=weight_residency),
        )
        tiny = nn.Sequential(*layers)
    tiny.load_state_dict({k: packrt.zeros(*v.shape) for k, v in tiny.state_dict().items()}, assign=True)
    tiny.initialize()
    tiny(packrt.tensor([[1, 2]]))


def cpus_assigned() -> int | None:
    """The CPUs Ray assigned to the calling actor or replica, as a thread count (at least 1); None
    outside a Ray worker, or for one that was given no CPU resource."""
    try:
        import ray

        if not ray.is_initialized():
            return None
        assigned: dict[str, float] = ray.get_runtime_context().get_assigned_resources()  # type: ignore[no-untyped-call]
        cpus = assigned.get("CPU")
    except (ImportError, AssertionError, RuntimeError):  # Ray asserts the caller is a worker (the driver is not)
        return None
    return None if not cpus else max(1, int(cpus))


def load(source: ModelSource) -> LoadedModel:
    """Load ``source`` in this process, pack what its residency packs, and keep the memory measure.

    In a Ray actor or replica packrt's threads are first capped at the CPUs Ray assigned it
    (:func:`cpus_assigned`): Ray caps OpenMP and BLAS through ``OMP_NUM_THREADS``, but packrt's
    compiled kernels run on a pool of their own, which would otherwise take every core of the node.

    The measure brackets the weights only: ``from_pretrained`` of the transformer and the packing
    of every layer. What is not weights comes before it: a tiny model is packed and called first
    (what the first pack costs once per process, compiling kernels), and a sentence encoder's
    tokenizer and pipeline are read first, with a borrowed model (a view of the file) that the
    measured load then replaces.
    """
    threads = cpus_assigned()
    if threads is not None:
        packrt.set_num_threads(threads)
    encoder: SentenceEncoder | None = None
    weights_dir = source.path
    if source.kind == "sentence-encoder":
        encoder = SentenceEncoder.from_pretrained(source.path, weight_residency="borrowed")
        weights_dir = str(encoder.pipeline.transformer)
    elif source.kind == "encoder" and (Path(source.path) / "tokenizer.json").is_file():
        # What packrt serve makes of a plain encoder directory with a tokenizer (the same pipeline).
        pipeline = packrt.models.describe(source.path).pipeline()
        encoder = SentenceEncoder.from_pipeline(pipeline, weight_residency="borrowed")
    files = tuple(str(shard) for shard in packrt.io.inspect_checkpoint(weights_dir).shards)
    _warm_up(source.weight_residency)
    gc.collect()
    before = ProcessMemory.read_or_none()
    model = packrt.models.from_pretrained(weights_dir, weight_residency=source.weight_residency)
    model.initialize()  # pack now, so the measure sees what the residency keeps
    if encoder is not None:
        encoder.model = model
    gc.collect()
    return LoadedModel(source, model, encoder, files, before)


__all__ = [
    "BatchColumnError",
    "KINDS",
    "LoadedModel",
    "ModelDirectoryError",
    "ModelKind",
    "ModelKindError",
    "ModelSource",
    "RequestError",
    "cpus_assigned",
    "kind_of",
    "load",
]
