"""``packrt_io.json_depth`` measures a JSON text's nesting without parsing it: the one scan packrt-io holds
headers, indexes and metadata to, and ``packrt serve`` its request bodies."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from packrt_io import json_depth

TEXT = st.text(st.sampled_from('ab[]{}":,\\ \n\u00e9'), max_size=8)  # brackets, quotes and escapes inside strings
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=20,
)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0


@given(VALUES, st.booleans())
def test_json_depth_is_the_parsed_values_nesting_whatever_its_strings_hold(value: Any, ascii_only: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8")
    assert json_depth(raw) == _depth(value)


def test_json_depth_counts_arrays_and_objects_but_not_brackets_inside_strings() -> None:
    assert json_depth(b'{"input": ["a", "b"]}') == 2
    assert json_depth(b'{"input": "[[[[{{{{"}') == 1
    assert json_depth(b'["\\"", [["\\\\"]]]') == 3  # escaped quotes and backslashes do not end a string early
    assert json_depth(b"[" * 100_000) == 100_000  # measured without recursing
    assert json_depth(b'"plain"') == 0
