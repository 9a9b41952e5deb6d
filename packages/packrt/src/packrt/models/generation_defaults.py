"""What ``generate`` does when an argument is not given: ``generation_config.json``, as transformers reads it.

A model directory's ``generation_config.json`` gives the defaults of ``eos_token_id`` (an id or a list),
``pad_token_id`` and the length (``max_new_tokens``, else ``max_length`` counting the prompt). Without the
file, the same fields of ``config.json`` stand in (transformers' ``GenerationConfig.from_model_config``),
and a GGUF file's ``tokenizer.ggml.*`` ids do (transformers reads no generation file beside a GGUF).
With neither a ``max_new_tokens`` nor a ``max_length``, 20 new tokens are made, fewer when the model's
``max_position_embeddings`` ends first: transformers' own default.

An argument given to ``generate`` always wins, ``None`` included (``eos_token_id=None`` stops at no
token, as in transformers). Sampling settings (``do_sample``, ``temperature``, ``top_k``, ``top_p``)
in the file are not read: packrt's ``generate`` is greedy unless asked.

The file is checked when the model is loaded, before anything is built: each field of the right type,
ids inside the vocabulary, lengths positive; a refusal is a :class:`GenerationConfigError` naming the
file, the field and the value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from packrt.errors import CheckpointError
from packrt.models.hfconfig import HFConfig, read_json

FILE: Final = "generation_config.json"
FIELDS: Final = ("eos_token_id", "pad_token_id", "max_new_tokens", "max_length")  # what generate reads of it
DEFAULT_NEW_TOKENS: Final = 20  # transformers' max_length default (20), counted from the prompt when unset


class GenerationConfigError(CheckpointError):
    """generation_config.json (or config.json's generation fields) holds a value ``generate`` cannot use."""


@dataclass(frozen=True)
class GenerationDefaults:
    """``generate``'s defaults for one model and where they were read (``source``: a path, or a description)."""

    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    max_new_tokens: int | None = None
    max_length: int | None = None
    max_positions: int | None = None
    source: str = "transformers' defaults"

    def new_tokens(self, prompt: int) -> int:
        """How many tokens ``generate`` makes after a prompt of ``prompt`` tokens when not told.

        ``max_new_tokens``, else ``max_length - prompt``, else 20 (no further than ``max_positions``).
        A ``max_length`` the prompt already fills is a ValueError, as transformers raises one.
        """
        if self.max_new_tokens is not None:
            return self.max_new_tokens
        if self.max_length is not None:
            limit, name = self.max_length, f"max_length = {self.max_length} ({self.source})"
        else:
            limit = prompt + DEFAULT_NEW_TOKENS
            if self.max_positions is not None:
                limit = min(limit, self.max_positions)
            name = f"the model's {self.max_positions} positions"
        if limit <= prompt:
            raise ValueError(f"generate: a prompt of {prompt} tokens leaves no room under {name}; pass max_new_tokens")
        return limit - prompt


def _ids(where: str, name: str, value: Any, vocab: int | None, many: bool) -> tuple[int, ...]:
    """The ids of an eos field (``many``: an id or a list) or a pad field (one id), checked.

    An eos id past the vocabulary is left out: no step can produce it (transformers only warns of it,
    and small test models keep GPT-2's 50256). A pad id is written into the output, so it must be a token.
    """
    if value is None:
        return ()
    items = value if many and isinstance(value, list) else [value]
    for item in items:
        past = not many and vocab is not None and isinstance(item, int) and item >= vocab
        if isinstance(item, bool) or not isinstance(item, int) or item < 0 or past:
            inside = f" inside the vocabulary [0, {vocab})" if not many and vocab is not None else " (>= 0)"
            kind = "a token id or a list of them" if many else "a token id"
            raise GenerationConfigError(
                f"{where!r}: field {name!r} is {value!r}, expected {kind}{inside}, or null; "
                f"fix {Path(where).name} (or remove the field)"
            )
    return tuple(item for item in items if vocab is None or item < vocab)


def _length(where: str, name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise GenerationConfigError(
            f"{where!r}: field {name!r} is {value!r}, expected a positive integer or null; fix {Path(where).name} "
            "(or remove the field)"
        )
    return value


def defaults_from(values: dict[str, Any] | HFConfig, where: str, vocab: int | None) -> GenerationDefaults:
    """The defaults one JSON object (generation_config.json's, or a config's) gives, checked."""
    positions = values.get("max_position_embeddings", values.get("n_positions"))
    return GenerationDefaults(
        eos_token_ids=_ids(where, "eos_token_id", values.get("eos_token_id"), vocab, many=True),
        pad_token_id=(_ids(where, "pad_token_id", values.get("pad_token_id"), vocab, many=False) or (None,))[0],
        max_new_tokens=_length(where, "max_new_tokens", values.get("max_new_tokens")),
        max_length=_length(where, "max_length", values.get("max_length")),
        max_positions=positions if isinstance(positions, int) and not isinstance(positions, bool) else None,
        source=where,
    )


def read_generation_defaults(directory: Path, config: HFConfig) -> GenerationDefaults:
    """``directory/generation_config.json``'s defaults, else config.json's (see the module docstring)."""
    vocab = config.get("vocab_size")
    vocab = vocab if isinstance(vocab, int) and not isinstance(vocab, bool) else None
    path = directory / FILE
    try:
        values = read_json(path)
    except FileNotFoundError:
        return defaults_from(config, str(config.path), vocab)
    if not isinstance(values, dict):
        raise GenerationConfigError(f"{str(path)!r} holds a {type(values).__name__}, expected a JSON object")
    positions = {key: config[key] for key in ("max_position_embeddings", "n_positions") if key in config}
    return defaults_from({**values, **positions}, str(path), vocab)


__all__ = [
    "DEFAULT_NEW_TOKENS",
    "FIELDS",
    "FILE",
    "GenerationConfigError",
    "GenerationDefaults",
    "defaults_from",
    "read_generation_defaults",
]
