"""Every sentence of both contract pages has a mutant that breaks it, or is on the backlog (issue 45).

The sentences are the clause registry's clauses (superseded ones left out: nothing holds a page to
them). A sentence counts as covered on a page when a mutant run under that page's revision names it in
its ``breaks``; ``test_mutants.py`` then proves the suite kills that mutant on exactly those clauses.
``mutation/sentences_without_mutant.txt`` lists the sentences still without one, per page: it may only
shrink. Running these with ``-s`` prints the counts per page.
"""

from __future__ import annotations

from pathlib import Path

import mutants
import mutants_backlog
import mutants_families
import mutants_sentences
import mutants_threads
import pytest

from packrt_conformance.clauses import load_registry

BACKLOG = Path(__file__).resolve().parent.parent / "mutation" / "sentences_without_mutant.txt"
PAGES = (1, 2)
ALL_MUTANTS = (
    *mutants.MUTANTS,
    *mutants_sentences.MUTANTS,
    *mutants_backlog.MUTANTS,
    *mutants_families.MUTANTS,
    *mutants_threads.MUTANTS,
)


def _backlog() -> list[tuple[int, str]]:
    entries = []
    for raw in BACKLOG.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            page, clause = line.split()
            entries.append((int(page), clause))
    return entries


def _sentences(page: int) -> set[str]:
    return {c.id for c in load_registry().for_revision(page) if not c.superseded}


def _covered(page: int) -> set[str]:
    return {cid for m in ALL_MUTANTS if m.revision_under_test == page for cid in m.breaks}


@pytest.mark.parametrize("page", PAGES)
def test_every_sentence_of_the_page_has_a_mutant_or_waits_on_the_backlog(page: int) -> None:
    waiting = {clause for p, clause in _backlog() if p == page}
    sentences, covered = _sentences(page), _covered(page)
    print(f"page {page}: {len(sentences)} sentences, {len(sentences & covered)} with a mutant, {len(waiting)} waiting")
    assert sorted(sentences - covered - waiting) == [], f"page {page}: give these a mutant (mutants_sentences.py)"


@pytest.mark.parametrize("page", PAGES)
def test_the_backlog_holds_only_sentences_still_without_a_mutant(page: int) -> None:
    waiting = {clause for p, clause in _backlog() if p == page}
    assert sorted(waiting & _covered(page)) == [], f"page {page}: a mutant breaks these now; delete their lines"
    assert sorted(waiting - _sentences(page)) == [], f"page {page}: not a live sentence of this page"


def test_the_backlog_lists_each_sentence_once() -> None:
    entries = _backlog()
    assert len(entries) == len(set(entries))
