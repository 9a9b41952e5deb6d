"""``memory_report``: resident bytes per module, by kind. Reading a report changes nothing."""

from __future__ import annotations

from typing import NamedTuple

from packrt_core.nn.module import Module
from packrt_core.nn.residency import PackedLayer


class MemoryRow(NamedTuple):
    """One module's resident bytes by kind."""

    path: str
    kind: str
    residency: str
    raw: int
    packed: int
    borrowed: int

    @property
    def total(self) -> int:
        """Bytes this layer keeps in all: raw plus packed plus borrowed."""
        return self.raw + self.packed + self.borrowed


class MemoryReport(list[MemoryRow]):
    """Rows of :func:`memory_report`; ``str()`` prints them as a table with totals."""

    def totals(self) -> dict[str, int]:
        """The raw, packed and borrowed bytes summed over every row, by column name."""
        return {k: sum(getattr(r, k) for r in self) for k in ("raw", "packed", "borrowed")}

    def __str__(self) -> str:
        header = ("module", "type", "residency", "raw", "packed", "borrowed")
        rows = [(r.path or "<root>", r.kind, r.residency, _mib(r.raw), _mib(r.packed), _mib(r.borrowed)) for r in self]
        t = self.totals()
        rows.append(("total", "", "", _mib(t["raw"]), _mib(t["packed"]), _mib(t["borrowed"])))
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        lines = [
            "  ".join(
                str(c).ljust(w) if i < 3 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
            for row in [header, *rows]
        ]
        return "\n".join(lines)


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def memory_report(module: Module) -> MemoryReport:
    """Resident bytes of every module that holds tensors, by kind: ``raw`` (storage its
    parameters and buffers hold), ``packed`` (a layer's owned serving form) and ``borrowed``
    (weights a layer serves from in place). A tied tensor is counted once. ``auto`` layers
    that have not decided yet are reported as they would decide now; nothing is recorded."""
    report = MemoryReport()
    seen: set[int] = set()
    for path, mod in module.named_modules():
        layer = mod if isinstance(mod, PackedLayer) else None
        mode = layer.serving_residency() if layer is not None else "-"
        served_in_place = set(layer.declared) if layer is not None and mode == "borrowed" else set()
        raw = borrowed = 0
        for registry in (mod._parameters, mod._buffers):
            for name, t in registry.items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                if registry is mod._parameters and name in served_in_place:
                    borrowed += t.storage_nbytes
                else:
                    raw += t.storage_nbytes
        packed = layer.resident_pack_bytes if layer is not None else 0
        if raw or packed or borrowed or layer is not None:
            report.append(MemoryRow(path, type(mod).__name__, mode, raw, packed, borrowed))
    return report
