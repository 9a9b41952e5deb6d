"""Which revision of the Module contract's state_dict rule is in force."""

from __future__ import annotations

from types import TracebackType

from packrt_core.errors import RevisionError

SUPPORTED = (1, 2)
_current = 2


class contract_revision:  # noqa: N801 - reads as a function call: packrt.contract_revision(1)
    """Switch the contract revision now; as a context manager, switch back on exit.

    Revision 2 (the default) keeps ``state_dict()`` complete after a layer packs its
    weights; revision 1 drops a packed layer's entries from it. Nothing else changes.
    """

    def __init__(self, revision: int) -> None:
        global _current
        if revision not in SUPPORTED:
            raise RevisionError(f"contract revision {revision!r} is not implemented: packrt knows {SUPPORTED}")
        self.previous = _current
        self.revision = revision
        _current = revision

    def __enter__(self) -> contract_revision:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        global _current
        _current = self.previous


def current_revision() -> int:
    """The contract revision in force (1 or 2)."""
    return _current
