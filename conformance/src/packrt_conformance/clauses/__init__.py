"""The clause registry: every rule of the Module contract, one TOML file per method.

Each clause has a permanent ID (``<method>.<rule>``), the revisions it belongs to, the rule in this
project's own words, and optionally the packrt reading it relies on, whether revision 2 superseded it,
and the capabilities an implementation needs before the clause can be checked. :func:`load_registry`
reads and validates the registry; a malformed registry is a :class:`RegistryError` naming the file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "CAPABILITIES",
    "REVISIONS",
    "Clause",
    "Registry",
    "RegistryError",
    "load_registry",
]

#: The contract revisions a clause may belong to.
REVISIONS: frozenset[int] = frozenset({1, 2})

#: Every capability a clause may require, with what an implementation promises by declaring it.
CAPABILITIES: Mapping[str, str] = {
    "packing": "layers pack bound weights for serving (first forward, pack=True, initialize)",
    "residency": "load_state_dict(weight_residency=...) with packed/borrowed/auto/per_call",
    "dtype-names": "to() accepts a dtype name string such as 'half'",
    "datatype-enum": "to() accepts a DataType enumeration value",
    "storage-free-to-empty": "to_empty keeps meta-init tensors storage-free",
    "meta-init": "a meta-init region declaring storage-free tensors",
    "cuda": "a CUDA device is present",
    "bfloat16": "the bfloat16 dtype",
    "extra-state": "get_extra_state / set_extra_state in state_dict",
    "forward-hooks": "forward hooks and forward pre-hooks",
    "quantized-layers": "a quantized linear layer that refuses a dtype change",
    "transactional-load": "a load that raises leaves the module unchanged",
    "free-memory-control": "short_free_memory(): a block in which weight_residency='auto' finds no room for a pack",
    "threads": "a load that commits while module calls run on other threads reaches them as one change",
}

_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[a-z0-9][a-z0-9-]*)+$")
_KEYS = {"id", "revisions", "rule", "reading", "superseded", "capabilities"}


class RegistryError(ValueError):
    """The clause registry is malformed (the message names the file and the clause)."""


@dataclass(frozen=True)
class Clause:
    """One atomic, testable rule of the contract."""

    id: str
    method: str
    revisions: frozenset[int]
    rule: str
    reading: str | None = None
    superseded: bool = False
    capabilities: frozenset[str] = field(default_factory=frozenset)
    source: str = ""

    def applies_to(self, revision: int) -> bool:
        """Whether the clause belongs to ``revision``."""
        return revision in self.revisions


class Registry(Mapping[str, Clause]):
    """Clauses by ID, in file order (files sorted by name)."""

    def __init__(self, clauses: list[Clause]) -> None:
        self._clauses: dict[str, Clause] = {}
        for clause in clauses:
            if clause.id in self._clauses:
                first = self._clauses[clause.id].source
                raise RegistryError(
                    f"clause ID {clause.id!r} is defined twice ({first} and {clause.source}); "
                    "IDs are permanent and must be unique: rename the newer one"
                )
            self._clauses[clause.id] = clause

    def __getitem__(self, key: str) -> Clause:
        return self._clauses[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._clauses)

    def __len__(self) -> int:
        return len(self._clauses)

    def for_revision(self, revision: int) -> list[Clause]:
        """The clauses that belong to ``revision``."""
        return [c for c in self._clauses.values() if c.applies_to(revision)]


def _parse_clause(raw: Any, method: str, source: str) -> Clause:
    if not isinstance(raw, dict):
        raise RegistryError(f"{source}: every [[clause]] must be a table, got {type(raw).__name__}")
    cid = raw.get("id")
    where = f"{source}: clause {cid!r}"
    unknown = set(raw) - _KEYS
    if unknown:
        raise RegistryError(f"{where} has unknown keys {sorted(unknown)}; allowed: {sorted(_KEYS)}")
    if not isinstance(cid, str) or not _ID.match(cid):
        raise RegistryError(f"{where}: the id must look like '<method>.<rule>' in lower-case-with-dashes")
    revisions = raw.get("revisions")
    if (
        not isinstance(revisions, list)
        or not revisions
        or any(not isinstance(r, int) or r not in REVISIONS for r in revisions)
    ):
        raise RegistryError(f"{where}: revisions must be a non-empty list drawn from {sorted(REVISIONS)}")
    rule = raw.get("rule")
    if not isinstance(rule, str) or not rule.strip():
        raise RegistryError(f"{where}: rule must be a non-empty string")
    reading = raw.get("reading")
    if reading is not None and not isinstance(reading, str):
        raise RegistryError(f"{where}: reading must be a string")
    superseded = raw.get("superseded", False)
    if not isinstance(superseded, bool):
        raise RegistryError(f"{where}: superseded must be true or false")
    if superseded and 2 in revisions:
        raise RegistryError(f"{where}: only a revision-1 clause can be superseded (by revision 2)")
    caps = raw.get("capabilities", [])
    if not isinstance(caps, list) or any(c not in CAPABILITIES for c in caps):
        raise RegistryError(f"{where}: capabilities {caps!r} must be a list drawn from {sorted(CAPABILITIES)}")
    return Clause(
        id=cid,
        method=method,
        revisions=frozenset(revisions),
        rule=rule.strip(),
        reading=reading,
        superseded=superseded,
        capabilities=frozenset(caps),
        source=source,
    )


def parse_file(path: Path) -> list[Clause]:
    """Read one clause file; raise :class:`RegistryError` naming the file when it is malformed."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise RegistryError(f"{path.name}: not valid TOML ({err}); fix the file's syntax") from err
    method = data.get("method")
    if not isinstance(method, str) or not method:
        raise RegistryError(f'{path.name}: the file needs a top-level method = "<name>"')
    raw_clauses = data.get("clause")
    if not isinstance(raw_clauses, list) or not raw_clauses:
        raise RegistryError(f"{path.name}: the file defines no [[clause]] tables")
    return [_parse_clause(raw, method, path.name) for raw in raw_clauses]


def load_registry(directory: Path | None = None) -> Registry:
    """Load and validate every ``*.toml`` clause file in ``directory`` (default: the shipped registry)."""
    if directory is None:
        directory = Path(str(resources.files(__name__)))
    files = sorted(directory.glob("*.toml"))
    if not files:
        raise RegistryError(f"{directory}: no clause files (*.toml) found")
    clauses: list[Clause] = []
    for path in files:
        clauses.extend(parse_file(path))
    return Registry(clauses)
