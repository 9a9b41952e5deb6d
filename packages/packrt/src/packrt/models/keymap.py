"""Checkpoint key names onto packrt parameter names: one table per family, kept as data.

A :class:`KeyMap` is a table of :class:`Rule` rows. Each row pairs a checkpoint name with a packrt
parameter name, written as templates where ``{i}`` stands for a layer index
(``"encoder.layer.{i}.attention.self.query.weight"`` -> ``"layers.{i}.attention.q_proj.weight"``),
and says how the tensor is reshaped on the way (``"transpose"`` for GPT-2's Conv1D weights, which
are stored (in, out)). Looking a key up replaces each purely numeric dotted segment with ``{i}`` and
finds the template in a dict: no regular expressions, and the table reads as documentation.

Besides the rows, a key map lists the checkpoint names a family leaves unused by design
(``ignored``: a BERT pooler, ``position_ids`` buffers, a tied head stored twice) and the name
prefixes a checkpoint may carry (``prefixes``: ``"model."`` in a ``LlamaForCausalLM`` file,
``"transformer."`` in GPT-2's), of which one is stripped before the lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from packrt import nn
    from packrt.models.hfconfig import HFConfig

Transform = Literal["none", "transpose"]
# What a family's model is: an encoder (ids in, last hidden state out) or a causal LM (logits, generate).
FamilyKind = Literal["encoder", "causal-lm"]


@dataclass(frozen=True)
class Rule:
    """One checkpoint template and the packrt parameter template it loads into."""

    checkpoint: str
    model: str
    transform: Transform = "none"
    # False for names stored at the checkpoint's top level whatever its prefix (an LM head).
    prefixed: bool = True


def template_of(key: str) -> tuple[str, tuple[str, ...]]:
    """``key`` with each purely numeric dotted segment replaced by ``{i}``, and those segments in order."""
    parts = key.split(".")
    numbers = tuple(part for part in parts if part.isdigit())
    return ".".join("{i}" if part.isdigit() else part for part in parts), numbers


def fill(template: str, numbers: Iterable[str]) -> str:
    """The name ``template`` gives once each ``{i}`` takes the next of ``numbers``."""
    out = template
    for number in numbers:
        out = out.replace("{i}", number, 1)
    return out


@dataclass(frozen=True)
class Mapped:
    """Where a checkpoint tensor goes: the packrt name and the transform applied on the way."""

    checkpoint: str
    model: str
    transform: Transform


@dataclass(frozen=True)
class KeyMap:
    """The table of one family (see the module docstring): rows, ignored names, optional prefixes.

    ``lookup`` returns a :class:`Mapped` for a mapped key, ``"ignored"`` for a key the family leaves
    unused by design, and None for a key the family does not know (an unexpected key).
    """

    rules: tuple[Rule, ...]
    ignored: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    # whole subtrees a family leaves unused (a multimodal checkpoint's vision tower), by the key's start
    ignored_prefixes: tuple[str, ...] = ()
    _forward: dict[str, Rule] = field(init=False, repr=False, compare=False)
    _backward: dict[str, Rule] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        forward: dict[str, Rule] = {}
        backward: dict[str, Rule] = {}
        for rule in self.rules:
            if rule.checkpoint in forward or rule.model in backward:
                raise ValueError(f"KeyMap: the rule {rule} repeats a checkpoint or packrt name of another rule")
            forward[rule.checkpoint] = rule
            backward[rule.model] = rule
        object.__setattr__(self, "_forward", forward)
        object.__setattr__(self, "_backward", backward)

    def strip(self, key: str) -> tuple[str, str]:
        """(prefix, rest): the first of ``prefixes`` that ``key`` starts with, removed ('' when none)."""
        for prefix in self.prefixes:
            if prefix and key.startswith(prefix):
                return prefix, key[len(prefix) :]
        return "", key

    def lookup(self, key: str) -> Mapped | Literal["ignored"] | None:
        """What the family does with the checkpoint tensor ``key`` (see the class docstring)."""
        if key.startswith(self.ignored_prefixes):
            return "ignored"
        _, rest = self.strip(key)
        template, numbers = template_of(rest)
        if template in self.ignored:
            return "ignored"
        rule = self._forward.get(template)
        if rule is None:
            return None
        return Mapped(key, fill(rule.model, numbers), rule.transform)

    def checkpoint_name(self, model_key: str, prefix: str = "") -> str:
        """The checkpoint name a packrt parameter is read from (for messages about missing keys)."""
        template, numbers = template_of(model_key)
        rule = self._backward.get(template)
        if rule is None:
            return model_key
        name = fill(rule.checkpoint, numbers)
        return prefix + name if rule.prefixed else name


@dataclass(frozen=True)
class Family:
    """A model family ``from_pretrained`` knows: the config.json names it answers to, and how to build it.

    ``build(config)`` declares the model from config.json's dict (called under :func:`packrt.meta_init`;
    the load that binds the weights sets their residency); ``keymap(config)`` gives the table its
    checkpoint keys load through. ``kind`` is what the built model is, the one answer every caller reads
    (:func:`packrt.models.describe`): ``"encoder"`` for the BERT-style families, ``"causal-lm"`` (the default:
    packrt's other families all generate) for the rest. ``unwrap`` (:meth:`model_config`) serves the text model of
    a multimodal checkpoint.
    """

    name: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    build: Callable[[HFConfig], nn.Module]
    keymap: Callable[[HFConfig], KeyMap]
    kind: FamilyKind = "causal-lm"
    # config.json as the model reads it, where that is part of it (a multimodal checkpoint's text_config)
    unwrap: Callable[[HFConfig], HFConfig] | None = None

    def model_config(self, config: HFConfig) -> HFConfig:
        """The config the family's schema, ``build`` and ``keymap`` read: ``config`` itself, or what ``unwrap``
        takes out of it. Every load and check asks this, so none reads the outer file by mistake."""
        return config if self.unwrap is None else self.unwrap(config)


__all__ = ["Family", "FamilyKind", "KeyMap", "Mapped", "Rule", "Transform", "fill", "template_of"]
