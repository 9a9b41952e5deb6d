"""The memory a worker's weights take, measured from inside the worker's own process.

Two kinds of resident memory matter when several replicas serve one checkpoint on a node:

- **anonymous** pages belong to one process: a packed copy of the weights, or a page of a mapped
  file that was written to (copy-on-write). N replicas holding the weights this way hold N copies.
- **file-backed** pages are the page cache's: every process that maps the same checkpoint file
  shares them, so N replicas serving ``borrowed`` weights from the mapped file hold one copy.

:class:`ProcessMemory` reads the process's totals from ``/proc/self/smaps_rollup`` (or sums
``/proc/self/smaps`` where the kernel has no rollup); :func:`file_mappings` reads, from
``/proc/self/smaps``, how much of each checkpoint file this process has resident and how much of
it was copied. :class:`WeightMemory` puts these together with packrt's own
:func:`packrt.nn.memory_report` totals. Linux only: elsewhere the measures are None and asking
for them raises :class:`MemoryProbeError`.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packrt import nn
from packrt.errors import PackrtError

SMAPS_ROLLUP = Path("/proc/self/smaps_rollup")
SMAPS = Path("/proc/self/smaps")
_MAPPING_HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+\s")


class MemoryProbeError(PackrtError, OSError):
    """This process's memory cannot be read (no ``/proc/self/smaps``: not Linux, or /proc not mounted)."""


def _kib_field(line: str) -> tuple[str, int] | None:
    """``("Rss", bytes)`` for a line like ``Rss:   1024 kB``; None for any other line."""
    name, _, rest = line.partition(":")
    parts = rest.split()
    if len(parts) != 2 or parts[1] != "kB" or not parts[0].isdigit():
        return None
    return name.strip(), int(parts[0]) * 1024


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError as err:
        raise MemoryProbeError(
            f"cannot read {str(path)!r} ({err}); packrt_ray measures memory from /proc/self/smaps, which only Linux "
            "provides: run the workers on Linux, or leave the memory report out"
        ) from err


@dataclass(frozen=True)
class ProcessMemory:
    """This process's resident bytes at one moment: all of them, the anonymous ones, the file-backed rest."""

    rss: int
    anonymous: int
    swap: int

    @property
    def file_backed(self) -> int:
        """Resident bytes that are not anonymous: pages of mapped files (the page cache's, shared by every
        process mapping them) and shared memory (Ray's object store is mapped into every worker)."""
        return self.rss - self.anonymous

    @classmethod
    def read(cls) -> ProcessMemory:
        """The totals now, from ``/proc/self/smaps_rollup`` (summed from ``smaps`` without it)."""
        source = SMAPS_ROLLUP if SMAPS_ROLLUP.exists() else SMAPS
        totals: dict[str, int] = {}
        for line in _read(source).splitlines():
            field = _kib_field(line)
            if field is not None:
                totals[field[0]] = totals.get(field[0], 0) + field[1]
        return cls(totals.get("Rss", 0), totals.get("Anonymous", 0), totals.get("Swap", 0))

    @classmethod
    def read_or_none(cls) -> ProcessMemory | None:
        """:meth:`read`, or None where this process's memory cannot be read."""
        try:
            return cls.read()
        except MemoryProbeError:
            return None


@dataclass(frozen=True)
class FileMapping:
    """How one file is mapped into this process, summed over its mappings.

    ``resident`` counts every page of the file this process has in memory (file-backed pages are
    the page cache's and shared); ``anonymous`` the pages of the mapping that were written to and so
    copied into this process alone (zero while no one writes to the weights).
    """

    path: str
    size: int
    mapped: int
    resident: int
    anonymous: int


def file_mappings(paths: Iterable[str]) -> tuple[FileMapping, ...]:
    """Each file of ``paths`` as this process maps it (a file it does not map shows zeros)."""
    wanted = {os.path.realpath(p): p for p in paths}
    sums: dict[str, dict[str, int]] = {real: {} for real in wanted}
    current: dict[str, int] | None = None
    for line in _read(SMAPS).splitlines():
        if _MAPPING_HEADER.match(line):
            fields = line.split(maxsplit=5)
            name = fields[5].strip() if len(fields) == 6 else ""
            current = sums.get(os.path.realpath(name)) if name.startswith("/") else None
            continue
        field = _kib_field(line) if current is not None else None
        if current is not None and field is not None:
            current[field[0]] = current.get(field[0], 0) + field[1]
    return tuple(
        FileMapping(
            path=wanted[real],
            size=os.stat(real).st_size if os.path.exists(real) else 0,
            mapped=fields.get("Size", 0),
            resident=fields.get("Rss", 0),
            anonymous=fields.get("Anonymous", 0),
        )
        for real, fields in sums.items()
    )


@dataclass(frozen=True)
class WeightMemory:
    """The memory of one worker's weights, measured inside that worker.

    ``anonymous_added`` is the rule to read: the anonymous bytes the process gained across the
    load (measured before ``from_pretrained`` and after every layer was packed). Under
    ``borrowed`` it stays near zero, whatever the number of replicas on the node, because the
    weights are the mapped checkpoint; under ``packed`` it is about ``checkpoint_bytes``, once per
    replica. ``files`` says how much of each checkpoint file is resident here now (shared pages)
    and how much was copied; ``report`` holds :func:`packrt.nn.memory_report`'s totals.
    """

    pid: int
    hostname: str
    weight_residency: str
    checkpoint_bytes: int
    before: ProcessMemory
    after: ProcessMemory
    now: ProcessMemory
    files: tuple[FileMapping, ...]
    report: dict[str, int]

    @property
    def anonymous_added(self) -> int:
        """Anonymous bytes the load added to this process (packed copies, copied pages, loader objects)."""
        return self.after.anonymous - self.before.anonymous

    @property
    def anonymous_fraction(self) -> float:
        """``anonymous_added`` over the checkpoint's size: ~0 means shared, ~1 one private copy."""
        return self.anonymous_added / self.checkpoint_bytes if self.checkpoint_bytes else 0.0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field, with the two derived measures added."""
        out = asdict(self)
        out["anonymous_added"] = self.anonymous_added
        out["anonymous_fraction"] = self.anonymous_fraction
        for key in ("before", "after", "now"):
            out[key]["file_backed"] = getattr(self, key).file_backed
        return out


def weight_memory(
    model: nn.Module,
    weight_residency: str,
    checkpoint_files: Iterable[str],
    before: ProcessMemory | None,
    after: ProcessMemory | None,
) -> WeightMemory:
    """The :class:`WeightMemory` of ``model``, loaded from ``checkpoint_files`` between the ``before``
    and ``after`` measures (the files are sized whether or not any tensor of them is still mapped)."""
    if before is None or after is None:
        ProcessMemory.read()  # raises the MemoryProbeError that says why
        raise MemoryProbeError("the load was not measured (this process's memory could not be read then)")
    report = nn.memory_report(model)
    files = file_mappings(dict.fromkeys([*checkpoint_files, *report.files()]))
    return WeightMemory(
        pid=os.getpid(),
        hostname=socket.gethostname(),
        weight_residency=weight_residency,
        checkpoint_bytes=sum(f.size for f in files),
        before=before,
        after=after,
        now=ProcessMemory.read(),
        files=files,
        report=report.totals(),
    )


__all__ = ["FileMapping", "MemoryProbeError", "ProcessMemory", "WeightMemory", "file_mappings", "weight_memory"]
