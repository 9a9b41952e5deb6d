"""Implementer-owned expectation files: the clauses an implementation is known to fail, and why.

One entry per line: a clause ID, whitespace, then the reason (required). ``#`` starts a comment;
blank lines are ignored.
(A ``#`` inside a reason is kept.) A listed clause runs as an expected failure: if it fails the report says
``xfail`` with the reason, if it passes the report says ``xpass`` so the entry can be removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Expectations", "ExpectationsError", "parse_expectations"]


class ExpectationsError(ValueError):
    """A malformed expectation file (the message names the file and line)."""


@dataclass(frozen=True)
class Expectations:
    """Clause ID -> reason the implementation is expected to fail it."""

    entries: Mapping[str, str]
    source: str = "<memory>"

    def reason(self, clause_id: str) -> str | None:
        """The recorded reason for ``clause_id``, or None when it is expected to pass."""
        return self.entries.get(clause_id)

    def unknown(self, known_ids: Iterable[str]) -> list[str]:
        """Entries that match no clause of the registry (stale or misspelled IDs)."""
        known = set(known_ids)
        return [cid for cid in self.entries if cid not in known]


def parse_expectations(text: str, source: str = "<memory>") -> Expectations:
    """Parse expectation-file text; raise :class:`ExpectationsError` naming the line when malformed."""
    entries: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) < 2 or not parts[1].strip():
            raise ExpectationsError(
                f"{source}:{lineno}: entry {parts[0]!r} has no reason; write '<clause id> <why it fails>'"
            )
        cid, reason = parts[0], parts[1].strip()
        if cid in entries:
            raise ExpectationsError(f"{source}:{lineno}: clause {cid!r} is listed twice; keep one entry")
        entries[cid] = reason
    return Expectations(entries=entries, source=source)


def load_expectations(path: Path) -> Expectations:
    """Read an expectation file from ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ExpectationsError(f"--expectations {path}: cannot read the file ({err})") from err
    return parse_expectations(text, source=str(path))
