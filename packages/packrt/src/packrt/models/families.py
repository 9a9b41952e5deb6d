"""The families ``from_pretrained`` builds, in one table: which config.json names each answers to.

:func:`find_family` is the lookup every entry point reaches through :func:`packrt.models.describe`;
:func:`supported` lists the model types for messages and documentation.
"""

from __future__ import annotations

from packrt.errors import CheckpointError
from packrt.models import bert, gemma3, gpt2, llama, phi3, qwen3, roberta
from packrt.models.hfconfig import HFConfig, UnsupportedModelError
from packrt.models.keymap import Family

FAMILIES: tuple[Family, ...] = (
    bert.FAMILY,
    roberta.FAMILY,
    roberta.XLM_FAMILY,
    gpt2.FAMILY,
    llama.FAMILY,
    qwen3.FAMILY,
    gemma3.FAMILY,
    phi3.FAMILY,
)


def supported() -> dict[str, tuple[str, ...]]:
    """model_type -> the architectures ``from_pretrained`` builds for it."""
    table: dict[str, tuple[str, ...]] = {}
    for family in FAMILIES:
        for model_type in family.model_types:
            table[model_type] = family.architectures
    return table


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
    unknown = [name for name in architectures if name not in family.architectures]
    if unknown:
        raise UnsupportedModelError(
            f"{str(config.path)!r}: architecture {unknown[0]!r} (model_type {model_type!r}) is not one packrt "
            f"builds; for {model_type!r} it builds {', '.join(family.architectures)}; supported: {listed}"
        )
    return family


__all__ = ["FAMILIES", "find_family", "supported"]
