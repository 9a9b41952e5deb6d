"""The one road a model load takes, whatever format its checkpoint is in.

A format (a Hugging Face directory: :class:`packrt.models.pretrained.HFDirectory`; a GGUF file:
:class:`packrt.models.gguf.GGUFSource`) is read up to its config as a :class:`LoadSource`; from there
:func:`load_source` takes every load through the same steps, each checked before the next:

1. the config against its model type's schema (:func:`packrt.models.config_schema.validate`);
2. the config against the tensors the headers list (:func:`~packrt.models.config_schema.check_capacity`):
   no more layers than the files hold tensors for, no width beyond their largest dimension;
3. only then the model is declared, under :func:`packrt.meta_init` (no weight memory), with the layers whose
   tensors a format keeps in quantized blocks (a GGUF file's) declared to serve them as stored;
4. the source plans its tensors against the declared parameters (names, shapes, dtypes), reads them, and
   they are bound with ``load_state_dict(assign=True)`` under :func:`packrt_io.guarding`.
"""

from __future__ import annotations

from typing import Protocol

import packrt
import packrt_io
from packrt import nn
from packrt.models.config_schema import check_capacity, validate
from packrt.models.generation import CausalLM
from packrt.models.generation_defaults import GenerationDefaults
from packrt.models.hfconfig import HFConfig
from packrt.models.keymap import Family, KeyMap
from packrt.models.quantization import quantize_linears


class LoadSource(Protocol):
    """One checkpoint format read up to its config (``config`` and the ``family`` it names, not yet checked):
    what :func:`load_source` needs. Its methods are called in the road's order, each once the steps before passed.
    """

    @property
    def config(self) -> HFConfig: ...

    @property
    def family(self) -> Family: ...

    def generation(self) -> GenerationDefaults:
        """The generation defaults, checked (called once the config passed its schema)."""
        ...

    def headers(self) -> tuple[packrt_io.CheckpointInfo, KeyMap]:
        """The tensors' names and shapes, from headers alone, and the key map that reads the names."""
        ...

    def keep_blocks(self, model: nn.Module, keymap: KeyMap) -> list[str]:
        """Swap the declared layers whose tensors the format holds in quantized blocks for layers that serve
        the blocks as stored (:class:`~packrt.nn.BlockQuantizedLinear`), returning their paths; called under
        :func:`packrt.meta_init` when no dtype, quantization or other device asks for floats."""
        ...

    def tensors(
        self,
        info: packrt_io.CheckpointInfo,
        keymap: KeyMap,
        expected: dict[str, tuple[int, ...]],
        strict: bool,
        cast: packrt.dtype | None,
        progress: bool | None,
    ) -> tuple[dict[str, packrt.Tensor], tuple[packrt_io.MappedFile, ...]]:
        """The tensors for the declared model's parameters ``expected`` (key -> shape), checked against the
        headers before any is read, and the mapped files some of them are views of."""
        ...


def load_source(
    source: LoadSource,
    *,
    cast: packrt.dtype | None,
    weight_residency: str | None,
    device: str,
    strict: bool,
    progress: bool | None,
    quantize: str | None,
) -> nn.Module:
    """The one road every format's load takes: validate the config -> check it against the tensors the
    headers list -> declare the model -> plan, read and bind the tensors -> serve.

    Nothing is declared before the config passed its schema and asks for no more layers or width than
    the files hold (a file asking for 20,000 layers with tensors for one costs no building). The
    caller has checked ``weight_residency``, ``quantize`` and ``cast`` already.
    """
    config = source.config
    schema = validate(config)
    generation = source.generation()  # checked before anything is built, like the config
    info, keymap = source.headers()
    check_capacity(config, schema, info, keymap)  # before anything is declared
    with packrt.meta_init():
        model = source.family.build(config)
        if cast is None and quantize is None and device == "cpu":  # blocks are served as stored on the CPU only
            source.keep_blocks(model, keymap)
    expected = {key: tuple(value.shape) for key, value in model.state_dict(keep_vars=True).items()}
    state, files = source.tensors(info, keymap, expected, strict, cast, progress)
    with packrt_io.guarding(model, files):  # each call checks the mapped files it may serve from
        model.load_state_dict(state, strict=strict, assign=True, weight_residency=weight_residency)
    model.eval()
    if isinstance(model, CausalLM):
        model.generation_defaults = generation
    if quantize == "int8":
        quantize_linears(model, weight_residency)
    if device != "cpu":
        model.to(device)
    return model


__all__ = ["LoadSource", "load_source"]
