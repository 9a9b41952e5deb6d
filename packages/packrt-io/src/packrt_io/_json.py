"""Strict, bounded JSON for headers, indexes and metadata values: no RecursionError, no silent duplicate.

Before any parsing work, :func:`structure` measures the text's nesting depth and counts its object
members with a few passes of bytes-level operations (strings are cut out first, so a bracket or colon
inside a string counts for nothing). A document nested deeper than the caller's limit is refused
there; Python's decoder, which recurses per level, never sees it. Duplicate keys are detected without a
Python call per object: the decoder's dicts hold fewer members than the text has exactly when some
object repeats a key, and only then is the text decoded again to name the key. ``NaN`` / ``Infinity``
are refused, as strict JSON (and the safetensors library) refuse them, and so is a string holding a
lone surrogate (``"\\ud800"``), which is no UTF-8 text: keys and metadata must be valid UTF-8.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import Any, Final, NoReturn

import numpy as np

# Nesting limits: the deepest a value may go. A safetensors header needs 3 (header, entry, shape);
# ties are a flat object (1); an index needs 2; extra state is user JSON, held to 64.
HEADER_DEPTH: Final = 8
INDEX_DEPTH: Final = 16
VALUE_DEPTH: Final = 64

_KEEP: Final = b'"[]{}:'
_DROP: Final = bytes(c for c in range(256) if c not in _KEEP)
_STEP: Final = np.zeros(256, dtype=np.int8)
_STEP[[ord("{"), ord("[")]] = 1
_STEP[[ord("}"), ord("]")]] = -1
_STRING: Final = re.compile(rb'"[^"]*"')

Fail = Callable[[str], NoReturn]


def structure(raw: bytes) -> tuple[int, int]:
    """The nesting depth of the JSON text ``raw`` and how many object members (``key: value``) it has.

    Exact for valid JSON; for text that is not JSON the numbers are only used to refuse early, and the
    decoder refuses the text anyway.
    """
    if b"\\" in raw:
        # Escaped backslashes go first (left to right, as JSON reads them), then escaped quotes; the
        # escapes left (\n, \u0041, ...) hold no quote, bracket or colon.
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    skeleton = raw.translate(None, _DROP)  # only quotes, brackets and colons are left
    skeleton = skeleton.replace(b'""', b"")  # the strings that held no bracket or colon
    if b'"' in skeleton:
        skeleton = _STRING.sub(b"", skeleton)
    members = skeleton.count(b":")
    steps = _STEP[np.frombuffer(skeleton, dtype=np.uint8)]
    if not steps.size:
        return 0, members
    depth = int(np.cumsum(steps, dtype=np.int64).max())
    return max(depth, 0), members


def json_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in the JSON text ``raw``, brackets inside strings not counted
    (:func:`structure`'s first number): measured without parsing, so a text built to make a recursive parser
    overflow is refused before one sees it. Exact for valid JSON; a text that is not JSON gets a number the
    parser refuses anyway."""
    return structure(raw)[0]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def first_duplicate(raw: bytes | str) -> tuple[str, Any, Any]:
    """The first key the JSON text ``raw`` repeats within one object, with its first and second value."""
    text = raw if isinstance(raw, str) else raw.decode("utf-8")
    found: list[tuple[str, Any, Any]] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for name, value in items:
            if name in result and not found:
                found.append((name, result[name], value))
            result[name] = value
        return result

    json.loads(text, object_pairs_hook=pairs, parse_constant=_reject_constant)
    return found[0] if found else ("", None, None)


def member_count(value: Any) -> int:
    """How many object members ``value`` holds, nested ones included."""
    if isinstance(value, dict):
        return len(value) + sum(member_count(item) for item in value.values() if isinstance(item, dict | list))
    if isinstance(value, list):
        return sum(member_count(item) for item in value if isinstance(item, dict | list))
    return 0


# A ``\\uD800``-``\\uDFFF`` escape: the only way JSON text can carry a surrogate (UTF-8 bytes cannot).
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def first_lone_surrogate(value: Any) -> str | None:
    """The first string (key or value) in ``value`` that holds a lone surrogate, which UTF-8 cannot encode."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if not key.isascii():
                    try:
                        key.encode("utf-8")
                    except UnicodeEncodeError:
                        return str(key)
                pending.append(inner)
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return item
    return None


def _refuse_surrogates(data: bytes, value: Any, fail: Fail) -> None:
    # Escapes of a valid pair decode to one character; only a lone half is refused, as safetensors does.
    if b"\\u" not in data or _SURROGATE_ESCAPE.search(data) is None:
        return
    found = first_lone_surrogate(value)
    if found is not None:
        shown = found.encode("utf-8", "backslashreplace").decode("ascii")
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        fail(
            f"holds the string {shown!r} with a lone surrogate escape, which is not valid UTF-8 "
            "(safetensors refuses it too)"
        )


def decode(raw: bytes | str, limit: int, fail: Fail) -> tuple[Any, int]:
    """Decode ``raw`` as strict JSON nested at most ``limit`` deep (else ``fail``), with its member count.

    The count is :func:`structure`'s; a caller that counts the decoded members itself compares the two
    and calls :func:`fail_duplicate` when they differ.
    """
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    depth, members = structure(data)
    if depth > limit:
        fail(f"nests {depth} levels deep, deeper than the {limit} allowed")
    try:
        text = raw if isinstance(raw, str) else raw.decode("utf-8")
        value = json.loads(text, parse_constant=_reject_constant)
    except UnicodeDecodeError as err:
        fail(f"is not valid UTF-8 ({err.reason} at byte {err.start})")
    except (ValueError, RecursionError) as err:
        if "integer string conversion" in str(err):  # Python's own bound on int(str): the text is JSON
            fail(f"holds an integer of more than {sys.get_int_max_str_digits()} digits; no size or offset is that long")
        fail(f"is not valid JSON ({err})")
    _refuse_surrogates(data, value, fail)
    return value, members


def fail_duplicate(raw: bytes | str, fail: Fail) -> NoReturn:
    """Call ``fail`` naming the first key the JSON text ``raw`` repeats within one object."""
    name, first, second = first_duplicate(raw)
    fail(f"key {_short(name)} appears twice in one JSON object (first {_short(first)}, then {_short(second)})")


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def loads(raw: bytes | str, limit: int, fail: Fail) -> Any:
    """Decode ``raw`` as strict JSON nested at most ``limit`` deep with no repeated key, or ``fail``."""
    value, members = decode(raw, limit, fail)
    if member_count(value) != members:
        fail_duplicate(raw, fail)
    return value


__all__ = [
    "HEADER_DEPTH",
    "INDEX_DEPTH",
    "VALUE_DEPTH",
    "decode",
    "fail_duplicate",
    "first_duplicate",
    "first_lone_surrogate",
    "json_depth",
    "loads",
    "member_count",
    "structure",
]
