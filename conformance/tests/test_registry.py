"""The clause registry: the shipped one is valid, and malformed registries are refused by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from packrt_conformance.clauses import CAPABILITIES, RegistryError, load_registry

SPEC = Path("/work/shared/spec")


def _write(tmp_path: Path, body: str, name: str = "m.toml") -> Path:
    (tmp_path / name).write_text(body, encoding="utf-8")
    return tmp_path


GOOD = 'method = "m"\n[[clause]]\nid = "m.rule"\nrevisions = [2]\nrule = "A rule."\n'


def test_shipped_registry_loads_with_both_revisions() -> None:
    reg = load_registry()
    assert len(reg.for_revision(1)) >= 40
    assert len(reg.for_revision(2)) >= 150
    assert len(set(reg)) == len(reg)


def test_every_shipped_clause_id_starts_with_its_file_and_carries_no_line_number() -> None:
    for clause in load_registry().values():
        assert clause.capabilities <= set(CAPABILITIES), clause.id
        assert clause.id.split(".")[0] == Path(clause.source).stem, clause.id
        assert not re.search(r"\d{2,}|\bline\b|\bL\d", clause.id.split(".", 1)[1]), clause.id


def test_superseded_clauses_are_revision_1_only_and_the_conflict_is_not_superseded() -> None:
    reg = load_registry()
    superseded = [c for c in reg.values() if c.superseded]
    assert superseded
    assert all(c.revisions == frozenset({1}) for c in superseded)
    assert not reg["state_dict.drops-packed-entries"].superseded
    assert reg["state_dict.complete-after-forward"].revisions == frozenset({2})


def test_readings_are_recorded_where_packrt_decides() -> None:
    reg = load_registry()
    for cid in ("named_modules.recurse", "module.dedup.state-dict", "load_state_dict.assign.tied-weight"):
        assert reg[cid].reading, cid


@pytest.mark.skipif(not SPEC.exists(), reason="the contract pages are not in this checkout")
def test_no_rule_copies_a_sentence_fragment_of_the_pages() -> None:
    words = re.findall(r"[a-z_]+", " ".join(p.read_text().lower() for p in SPEC.glob("*.txt")))
    grams = {" ".join(words[i : i + 9]) for i in range(len(words) - 8)}
    for clause in load_registry().values():
        rule = re.findall(r"[a-z_]+", clause.rule.lower())
        copied = [" ".join(rule[i : i + 9]) for i in range(len(rule) - 8) if " ".join(rule[i : i + 9]) in grams]
        assert not copied, f"{clause.id} copies the pages: {copied[0]!r}"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (GOOD + GOOD.split("\n", 1)[1], r"defined twice"),
        (GOOD.replace("[2]", "[3]"), r"revisions must be"),
        (GOOD.replace("[2]", "[]"), r"revisions must be"),
        (GOOD + 'capabilities = ["telepathy"]\n', r"capabilities .*telepathy"),
        (GOOD.replace("[2]", "[2]\nsuperseded = true"), r"only a revision-1 clause can be superseded"),
        (GOOD.replace('"m.rule"', '"Line 12"'), r"the id must look like"),
        (GOOD.replace('"A rule."', '"  "'), r"rule must be a non-empty string"),
        (GOOD + 'colour = "red"\n', r"unknown keys \['colour'\]"),
        (GOOD.replace('method = "m"', ""), r"top-level method"),
        ('method = "m"\n', r"defines no \[\[clause\]\]"),
        ("method = = 1", r"not valid TOML"),
    ],
)
def test_malformed_registry_is_refused_naming_file_and_problem(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(RegistryError, match=message) as info:
        load_registry(_write(tmp_path, body))
    assert "m.toml" in str(info.value)


def test_duplicate_id_across_files_names_both_files(tmp_path: Path) -> None:
    _write(tmp_path, GOOD, "a.toml")
    _write(tmp_path, GOOD, "b.toml")
    with pytest.raises(RegistryError, match=r"a\.toml and b\.toml"):
        load_registry(tmp_path)


def test_empty_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match=r"no clause files"):
        load_registry(tmp_path)
