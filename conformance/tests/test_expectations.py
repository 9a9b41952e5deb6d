"""Expectation files: parsing, comments, errors by line, and entries that match no clause."""

from __future__ import annotations

from pathlib import Path

import pytest

from packrt_conformance.expectations import ExpectationsError, load_expectations, parse_expectations


def test_entries_comments_and_blank_lines() -> None:
    exp = parse_expectations("# header\n\nm.one   torch lacks it # not a comment\n  m.two reason two\n")
    assert dict(exp.entries) == {"m.one": "torch lacks it # not a comment", "m.two": "reason two"}
    assert exp.reason("m.one") == "torch lacks it # not a comment"
    assert exp.reason("m.three") is None


def test_entry_without_reason_is_refused_with_its_line() -> None:
    with pytest.raises(ExpectationsError, match=r"x\.txt:2: entry 'm\.two' has no reason"):
        parse_expectations("m.one why\nm.two\n", source="x.txt")


def test_repeated_entry_is_refused() -> None:
    with pytest.raises(ExpectationsError, match=r":2: clause 'm\.one' is listed twice"):
        parse_expectations("m.one a\nm.one b\n")


def test_unknown_entries_are_reported() -> None:
    exp = parse_expectations("m.one a\nm.gone b\n")
    assert exp.unknown(["m.one", "m.two"]) == ["m.gone"]


def test_unreadable_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(ExpectationsError, match=r"nope\.txt: cannot read the file"):
        load_expectations(missing)


def test_shipped_torch_expectations_name_only_known_clauses() -> None:
    from packrt_conformance.clauses import load_registry

    path = Path(__file__).parents[1] / "expectations" / "torch.txt"
    exp = load_expectations(path)
    assert exp.entries
    assert exp.unknown(load_registry()) == []
