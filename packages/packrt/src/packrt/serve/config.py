"""``packrt serve --config serve.toml``: every option of ``packrt serve`` from a TOML file.

The file is flat: each key is an option's name without ``--`` (``max_batch_sequences`` or
``max-batch-sequences``), the model directory included (``path``), each value of the option's type::

    path = "models/all-MiniLM-L6-v2"   # relative paths (path, access_log) are read from the file's directory
    port = 9000
    cors_origin = ["http://localhost:3000"]
    max_queued_requests = 128
    request_timeout_s = 30

The rules a user relies on: an option given on the command line wins over the file, the file wins over the
defaults; an unknown key, a value of the wrong type, or a bound that is not a positive number is a
:class:`ServeConfigError` (a ``ValueError``) naming the file, the key, what was expected and what was found,
and the fix, before anything is loaded. Reading the file needs only the standard library (``tomllib``).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packrt.errors import PackrtError
from packrt.serve.limits import LimitsError, ServeLimits


class ServeConfigError(PackrtError, ValueError):
    """A ``packrt serve`` config file that cannot be read, or a key in it that is unknown or of the wrong type."""


@dataclass(frozen=True)
class ServeOptions:
    """Every option of ``packrt serve``, resolved: the command line's over the config file's over the defaults."""

    path: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    name: str | None = None
    weight_residency: str | None = None
    drain: int = 30
    api_key: str | None = None
    cors_origin: tuple[str, ...] = ()
    dtype: str | None = None
    quantize: str | None = None
    access_log: str | None = None
    limits: ServeLimits = field(default_factory=ServeLimits)


# the TOML type of each option that is not a bound of ServeLimits, and a value to show in a fix
_TYPES: dict[str, tuple[type, str]] = {
    "path": (str, '"models/all-MiniLM-L6-v2"'),
    "host": (str, '"0.0.0.0"'),
    "port": (int, "8000"),
    "name": (str, '"all-MiniLM-L6-v2"'),
    "weight_residency": (str, '"packed"'),
    "drain": (int, "30"),
    "api_key": (str, '"sk-local"'),
    "cors_origin": (list, '["http://localhost:3000"]'),
    "dtype": (str, '"bfloat16"'),
    "quantize": (str, '"int8"'),
    "access_log": (str, '"access.jsonl"'),
}
_LIMITS = {each.name: each for each in dataclasses.fields(ServeLimits)}
_PATHS = ("path", "access_log")  # read from the file's directory when relative ("-" is standard output)


def keys() -> tuple[str, ...]:
    """Every key a config file may hold: the options of ``packrt serve`` (its parser has one flag per key)."""
    return (*_TYPES, *_LIMITS)


def _expected(key: str) -> tuple[type, str]:
    if key in _TYPES:
        return _TYPES[key]
    default = _LIMITS[key].default
    return type(default), str(default)


_NAMES = {str: "a string", int: "an integer", float: "a number", list: "an array of strings"}


def _shown(value: Any) -> str:
    kind = {bool: "a boolean", str: "a string", int: "an integer", float: "a number", list: "an array"}
    kind |= {dict: "a table"}
    return f"{kind.get(type(value), type(value).__name__)} {value!r}"


def _typed(value: Any, expected: type) -> bool:
    if isinstance(value, bool):  # a TOML boolean is no number (bool is an int to Python)
        return False
    if expected is float:
        return isinstance(value, (int, float))
    if expected is list:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    return isinstance(value, expected)


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The options the TOML file at ``path`` sets, each key checked and its value typed (a path made absolute
    from the file's directory); ServeConfigError naming the file and the key otherwise."""
    where = Path(os.fspath(path))
    try:
        with where.open("rb") as file:
            data = tomllib.load(file)
    except OSError as err:
        raise ServeConfigError(
            f"config file {str(where)!r} cannot be read ({err.strerror or err}); pass the path of a TOML file "
            "to --config"
        ) from err
    except tomllib.TOMLDecodeError as err:
        raise ServeConfigError(f"config file {str(where)!r} is not valid TOML: {err}; fix the line it names") from err
    options: dict[str, Any] = {}
    for given, value in data.items():
        key = given.replace("-", "_")
        if key not in _TYPES and key not in _LIMITS:
            close = difflib.get_close_matches(key, keys(), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ServeConfigError(
                f"config file {str(where)!r}: unknown key {given!r}; expected one of packrt serve's options "
                f"({', '.join(keys())}); {hint}rename or remove it"
            )
        expected, example = _expected(key)
        if not _typed(value, expected):
            raise ServeConfigError(
                f"config file {str(where)!r}: key {given!r} must be {_NAMES[expected]}, got {_shown(value)}; "
                f"write it as, e.g., {given} = {example}"
            )
        if key in _LIMITS:
            try:
                ServeLimits(**{key: value})
            except LimitsError as err:
                raise ServeConfigError(
                    f"config file {str(where)!r}: key {given!r} must be a positive number, got {value!r}; "
                    f"write it as, e.g., {given} = {example}"
                ) from err
        if key in _PATHS and value != "-":
            value = str(where.parent / Path(value).expanduser())
        options[key] = tuple(value) if isinstance(value, list) else value
    return options


def _check_load(chosen: dict[str, Any], named: dict[str, str]) -> None:
    """``dtype`` and ``quantize`` are values from_pretrained takes (ServeConfigError naming where each was set)."""
    from packrt.models.quantization import QUANTIZE
    from packrt_core.dtypes import FLOATING_DTYPES, as_dtype, names_of

    dtype, quantize = chosen.get("dtype"), chosen.get("quantize")
    floating = ", ".join(names_of(each)[0] for each in FLOATING_DTYPES)
    if dtype is not None:
        try:
            found = as_dtype(dtype)
        except PackrtError:
            found = None
        if found is None or not found.is_floating_point:
            raise ServeConfigError(
                f"{named['dtype']}: dtype {dtype!r} is not a floating dtype the weights can be served in; expected "
                f"one of {floating}, or leave it out to serve the checkpoint's own dtype"
            )
    if quantize is not None and quantize not in QUANTIZE:
        raise ServeConfigError(
            f"{named['quantize']}: quantize {quantize!r} is not a scheme packrt has; expected one of "
            f"{', '.join(QUANTIZE)}, or leave it out to serve the checkpoint's floats"
        )


def resolve(given: Mapping[str, Any], config: str | os.PathLike[str] | None = None) -> ServeOptions:
    """The options to serve with: each of ``given`` that is not None (the command line's), else the ``config``
    file's, else the default. A bound of ServeLimits that is not a positive number is a LimitsError; a ``dtype``
    or ``quantize`` from_pretrained does not take is a ServeConfigError naming the flag or the file's key."""
    chosen = read_config(config) if config is not None else {}
    named = {key: f"config file {str(config)!r}: key {key!r}" for key in chosen}
    for key in keys():
        value = given.get(key)
        if value is not None:
            chosen[key] = tuple(value) if isinstance(value, list) else value
            named[key] = "--" + key.replace("_", "-")
    _check_load(chosen, named)
    limits = ServeLimits(**{key: chosen.pop(key) for key in list(chosen) if key in _LIMITS})
    return ServeOptions(**chosen, limits=limits)


__all__ = ["ServeConfigError", "ServeOptions", "keys", "read_config", "resolve"]
