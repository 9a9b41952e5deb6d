"""Reading a Hugging Face ``config.json``: typed fields with messages that name the file and the field.

A family reads its geometry through :class:`HFConfig` (``config.integer("hidden_size")``), so a
config that lacks a field or gives it the wrong type fails with a
:class:`~packrt.errors.CheckpointError` saying which file, which field, what was found and what
was expected, before any model is built.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from packrt.errors import CheckpointError

_MISSING = object()


class UnsupportedModelError(CheckpointError):
    """config.json (or a GGUF file's metadata) names a ``model_type`` or an architecture packrt has no family
    for, or a setting packrt does not implement yet."""


class HFConfig(Mapping[str, Any]):
    """config.json's object, read-only, with typed getters; ``path`` is the file it came from."""

    def __init__(self, values: Mapping[str, Any], path: Path | str = "config.json") -> None:
        self._values = dict(values)
        self.path = Path(path)

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def with_values(self, values: Mapping[str, Any]) -> HFConfig:
        """This config with ``values`` added (a new config of the same class and file, so its errors name a
        field as this one's do)."""
        return type(self)({**self._values, **values}, self.path)

    def describe(self, name: str, problem: str, fix: str) -> str:
        """An error message about field ``name``: this file and the field, ``problem``, then ``fix``.

        Every message about a field is written here (the typed getters' and the schema's), so a config
        read from somewhere other than config.json names the field as its own file does.
        """
        return f"{str(self.path)!r}: field {name!r} {problem}; {fix}"

    def error(self, name: str, problem: str) -> CheckpointError:
        """The CheckpointError for field ``name`` of this file, saying what is wrong and how to fix it."""
        fix = "fix config.json (it must describe the checkpoint beside it, as transformers' save_pretrained writes it)"
        return CheckpointError(self.describe(name, problem, fix))

    def _get(self, name: str, default: Any) -> Any:
        value = self._values.get(name, default)
        if value is _MISSING:
            raise self.error(name, "is missing")
        return value

    def integer(self, name: str, default: Any = _MISSING) -> int:
        """A positive int field (``default`` when absent; required when no default is given)."""
        value = self._get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.error(name, f"is {value!r}, expected a positive integer")
        return value

    def optional_int(self, name: str) -> int | None:
        """A positive int field, or None when it is absent or null."""
        value = self._values.get(name)
        return None if value is None else self.integer(name)

    def number(self, name: str, default: Any = _MISSING) -> float:
        """A positive number field."""
        value = self._get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise self.error(name, f"is {value!r}, expected a positive number")
        return float(value)

    def flag(self, name: str, default: Any = _MISSING) -> bool:
        """A true/false field."""
        value = self._get(name, default)
        if not isinstance(value, bool):
            raise self.error(name, f"is {value!r}, expected true or false")
        return value

    def text(self, name: str, default: Any = _MISSING) -> str:
        """A string field."""
        value = self._get(name, default)
        if not isinstance(value, str):
            raise self.error(name, f"is {value!r}, expected a string")
        return value

    def choice(self, name: str, allowed: tuple[str, ...], default: Any = _MISSING) -> str:
        """A string field that must be one of ``allowed`` (what packrt implements)."""
        value = self.text(name, default)
        if value not in allowed:
            raise self.error(name, f"is {value!r}, which packrt does not implement (supported: {', '.join(allowed)})")
        return value

    def token_ids(self, name: str) -> tuple[int, ...]:
        """A token id field given as an int, a list of ints, or null (empty)."""
        value = self._values.get(name)
        if value is None:
            return ()
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in items):
            raise self.error(name, f"is {value!r}, expected a token id or a list of token ids")
        return tuple(items)


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def _not_regular(path: Path, mode: int) -> CheckpointError:
    found = next((name for test, name in _KINDS if test(mode)), "a device or other special file")
    return CheckpointError(f"{str(path)!r} is {found}, not a regular file; replace it with the file itself")


def read_regular(path: Path) -> bytes:
    """The bytes of the regular file at ``path``; anything else (a FIFO, a device) is refused unopened.

    FileNotFoundError passes through for the caller to explain; other failures are CheckpointErrors.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{str(path)!r} cannot be read ({err}); check the path and its permissions") from err
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)
    try:
        # O_NONBLOCK: a file swapped for a FIFO after the check still opens at once (and fstat sees it).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise CheckpointError(f"{str(path)!r} cannot be opened ({err}); check the path and its permissions") from err
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        with os.fdopen(fd, "rb", closefd=False) as stream:
            return stream.read()
    except OSError as err:
        raise CheckpointError(f"{str(path)!r} cannot be read ({err}); check the file") from err
    finally:
        os.close(fd)


def read_json(path: Path) -> Any:
    """The JSON value in the regular file ``path``; unreadable, non-UTF-8, malformed or too deeply
    nested text is a CheckpointError naming the file (FileNotFoundError passes through)."""
    raw = read_regular(path)
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{str(path)!r} is not UTF-8 text ({err}); re-save the file") from err
    except RecursionError as err:
        raise CheckpointError(
            f"{str(path)!r} nests its JSON too deeply to read; a model's config is a shallow object: re-save the file"
        ) from err
    except ValueError as err:
        raise CheckpointError(f"{str(path)!r} cannot be read as JSON ({err}); fix or re-save the file") from err


def read_config(directory: Path) -> HFConfig:
    """``directory/config.json`` as an :class:`HFConfig`; a missing or malformed file is a CheckpointError."""
    path = directory / "config.json"
    if not directory.is_dir():
        raise CheckpointError(
            f"{str(directory)!r} is not a directory; from_pretrained takes a model directory holding config.json "
            "and model.safetensors (or model.safetensors.index.json with its shards)"
        )
    try:
        values = read_json(path)
    except FileNotFoundError:
        raise CheckpointError(
            f"{str(directory)!r} has no config.json; a Hugging Face model directory (save_pretrained) holds one "
            "beside its safetensors weights"
        ) from None
    if not isinstance(values, dict):
        raise CheckpointError(f"{str(path)!r} holds a {type(values).__name__}, expected a JSON object")
    return HFConfig(values, path)


__all__ = ["HFConfig", "UnsupportedModelError", "read_config", "read_json", "read_regular"]
