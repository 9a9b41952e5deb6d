"""``memory_report``: resident bytes per module, by kind. Reading a report changes nothing.

Besides raw, packed and borrowed bytes, a row says how many of its raw and borrowed bytes are
*mapped*: pages of a memory-mapped checkpoint file (shared with the page cache, not anonymous
memory), and which files they come from when the loader named them (:func:`name_mapped_file`,
which packrt-io calls for every file it maps). A plain parameter such as a LayerNorm weight stays
mapped even under ``packed`` residency: only layers with packs copy their weights out.

A loader that has to make a weight rather than map it (a GGUF block-quantised tensor dequantised at
load, rows reordered) names the array it made with :func:`name_converted_array`; a row then counts
those bytes as ``converted`` and says what they were made from, so the report shows both what is
served from the file's pages and what was built beside them.
"""

from __future__ import annotations

import mmap
import weakref
from typing import Any, NamedTuple

from packrt_base.pages import mapping_under
from packrt_core.nn.module import Module
from packrt_core.nn.packed import PackedLayer
from packrt_core.tensor import Tensor

_FILES: weakref.WeakKeyDictionary[mmap.mmap, str] = weakref.WeakKeyDictionary()
# id(array) -> (a weak reference to it, what it was made from); numpy arrays cannot be dict keys
_CONVERTED: dict[int, tuple[weakref.ref[Any], str]] = {}


def name_mapped_file(mapping: mmap.mmap, path: str) -> None:
    """Record that ``mapping`` maps the file at ``path`` (for the report's ``files``)."""
    _FILES[mapping] = path


def name_converted_array(array: Any, origin: str) -> None:
    """Record that the loader made ``array`` (and any view of it) from ``origin``, e.g.
    ``"Q4_1 dequantised to float32 from model.gguf"``, for the report's ``converted`` bytes."""
    key = id(array)
    _CONVERTED[key] = (weakref.ref(array), origin)
    weakref.finalize(array, _CONVERTED.pop, key, None)


def _converted_from(array: Any) -> str | None:
    """What the loader made ``array``'s storage from, if it named it (following views)."""
    obj = array
    for _ in range(64):
        entry = _CONVERTED.get(id(obj))
        if entry is not None and entry[0]() is obj:
            return entry[1]
        base = getattr(obj, "base", None)
        if base is None:
            return None
        obj = base
    return None


class MemoryRow(NamedTuple):
    """One module's resident bytes by kind; ``mapped`` counts the raw and borrowed bytes that are
    pages of a mapped checkpoint file, ``files`` names those files (when their loader did);
    ``converted`` counts the raw and borrowed bytes a loader made instead (dequantised, reordered),
    ``origins`` says from what."""

    path: str
    kind: str
    residency: str
    raw: int
    packed: int
    borrowed: int
    mapped: int = 0
    files: tuple[str, ...] = ()
    converted: int = 0
    origins: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        """Bytes this layer keeps in all: raw plus packed plus borrowed."""
        return self.raw + self.packed + self.borrowed


class MemoryReport(list[MemoryRow]):
    """Rows of :func:`memory_report`; ``str()`` prints them as a table with totals."""

    def totals(self) -> dict[str, int]:
        """The raw, packed, borrowed and mapped bytes summed over every row, by column name."""
        return {k: sum(getattr(r, k) for r in self) for k in ("raw", "packed", "borrowed", "mapped")}

    def files(self) -> tuple[str, ...]:
        """Every mapped file the model's tensors are views of, in first-seen order."""
        return tuple(dict.fromkeys(f for r in self for f in r.files))

    def converted(self) -> int:
        """Raw and borrowed bytes, over every row, that a loader made rather than mapped."""
        return sum(r.converted for r in self)

    def origins(self) -> tuple[str, ...]:
        """What the converted bytes were made from (``"Q4_1 dequantised to float32 from m.gguf"``)."""
        return tuple(dict.fromkeys(o for r in self for o in r.origins))

    def __str__(self) -> str:
        header = ("module", "type", "residency", "raw", "packed", "borrowed", "mapped")
        rows = [
            (r.path or "<root>", r.kind, r.residency, _mib(r.raw), _mib(r.packed), _mib(r.borrowed), _mib(r.mapped))
            for r in self
        ]
        t = self.totals()
        rows.append(("total", "", "", _mib(t["raw"]), _mib(t["packed"]), _mib(t["borrowed"]), _mib(t["mapped"])))
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        lines = [
            "  ".join(
                str(c).ljust(w) if i < 3 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
            for row in [header, *rows]
        ]
        if t["mapped"]:
            lines.append(
                "mapped: raw or borrowed bytes that are pages of the checkpoint file(s), shared with the page cache "
                "(not anonymous memory): " + ", ".join(self.files() or ("unnamed mappings",))
            )
        if self.converted():
            lines.append(
                f"converted: {_mib(self.converted())} of raw or borrowed bytes made at load (anonymous memory) from: "
                + "; ".join(self.origins())
            )
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
        in_place = set(layer.declared) if layer is not None and mode == "borrowed" else set()
        tally = _Tally()
        for registry in (mod._parameters, mod._buffers):
            for name, t in registry.items():
                if t is not None and id(t) not in seen:
                    seen.add(id(t))
                    tally.add(t, borrowed=registry is mod._parameters and name in in_place)
        packed = layer.resident_pack_bytes if layer is not None else 0
        if tally.raw or packed or tally.borrowed or layer is not None:
            row = MemoryRow(
                path, type(mod).__name__, mode, tally.raw, packed, tally.borrowed, tally.mapped, tuple(tally.files)
            )
            report.append(row._replace(converted=tally.converted, origins=tuple(tally.origins)))
    return report


class _Tally:
    """One module's bytes as its tensors are counted: raw or borrowed, and of those the mapped and
    converted ones, with the files and origins they name (first seen first)."""

    def __init__(self) -> None:
        self.raw = self.borrowed = self.mapped = self.converted = 0
        self.files: dict[str, None] = {}
        self.origins: dict[str, None] = {}

    def add(self, t: Tensor, borrowed: bool) -> None:
        nbytes = t.storage_nbytes
        if borrowed:
            self.borrowed += nbytes
        else:
            self.raw += nbytes
        if t._data is None:
            return
        mapping = mapping_under(t._data)
        if mapping is None:
            origin = _converted_from(t._data)
            if origin is not None:
                self.converted += nbytes
                self.origins[origin] = None
            return
        self.mapped += nbytes
        if mapping in _FILES:
            self.files[_FILES[mapping]] = None
