"""Bound layer objects and weight residency.

A layer with weights (Linear, Conv2d, Embedding, QuantizedLinear) declares them as
parameters and serves through a *bound object* that owns the serving form (the *pack*)
and keeps the weights at rest the way its residency says:

- ``packed``: one packed copy; the raw parameter storage is dropped (the Parameter object
  stays; reading it rebuilds its values from the pack; an in-place edit restores raw
  storage and the next forward repacks).
- ``borrowed``: no pack; every forward computes from the bound tensor itself, so a
  memory-mapped checkpoint stays the only copy and writes through its handle are seen.
- ``auto``: packs when the pack fits the free memory, otherwise borrows; the decision is
  recorded per layer (``layer.residency_decision``).
- ``per_call``: nothing kept between calls; each forward rebuilds only what its kernel needs
  beyond the bound arrays (a half-precision upcast) and frees it, the memory-pressure fallback.
  For float32 weights that is nothing, so it computes like ``borrowed``; the two differ in
  intent (``borrowed`` promises the bound storage is the serving copy).

Packing happens once, under a lock (forwards may run on many threads), on the first
forward or at ``load_state_dict(..., pack=True)`` / ``initialize()``. A pack is swapped in
by one reference assignment, so a forward beside an in-place edit uses the old pack or
the new one, never a mix. Staleness is noticed by comparing each declared parameter's
object, lineage and version with those the pack was built from.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from packrt_core.errors import ResidencyError, StateDictError
from packrt_core.nn.state import WEIGHT_RESIDENCIES
from packrt_core.revision import current_revision

if TYPE_CHECKING:
    from packrt_core.nn.module import Module
    from packrt_core.tensor import Tensor

Array = Any
_free_override: list[int] = []


def free_memory() -> int:
    """Bytes the OS reports available (MemAvailable), or the override tests set."""
    if _free_override:
        return _free_override[-1]
    env = os.environ.get("PACKRT_FREE_MEMORY_BYTES")
    if env:
        return int(env)
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62  # unknown: assume plenty, as a pack then only costs what it costs


@contextmanager
def free_memory_override(nbytes: int) -> Iterator[None]:
    """Make ``auto`` residency see ``nbytes`` of free memory inside the block."""
    _free_override.append(int(nbytes))
    try:
        yield
    finally:
        _free_override.pop()


def check_residency(residency: str | None, where: str) -> None:
    if residency is not None and residency not in WEIGHT_RESIDENCIES:
        raise ResidencyError(
            f"{where}: unknown weight_residency {residency!r}; expected one of {', '.join(WEIGHT_RESIDENCIES)}"
        )


def _same_stamp(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Same parameter objects, lineages and versions, in the same slots."""
    return len(a) == len(b) and all(
        x[0] == y[0] and x[1] is y[1] and x[2] is y[2] and x[3] == y[3] for x, y in zip(a, b, strict=True)
    )


class _PackSource:
    """Gives a dropped parameter its values back from the pack that holds them."""

    __slots__ = ("bound", "name", "pack")

    def __init__(self, bound: BoundWeights, pack: Any, name: str) -> None:
        self.bound, self.pack, self.name = bound, pack, name

    def rebuild(self) -> Array:
        return self.bound.unpack(self.pack)[self.name]


class BoundWeights:
    """The serving form of one layer. Subclasses say how to build a pack from the declared
    arrays (:meth:`build`), serve from it (:meth:`serve_packed`) or from the raw arrays
    (:meth:`serve_raw`), rebuild the declared arrays (:meth:`unpack`), and estimate a
    pack's size before building it (:meth:`pack_nbytes`)."""

    declared: tuple[str, ...] = ("weight", "bias")
    default_residency = "packed"

    def __init__(self, residency: str | None = None) -> None:
        check_residency(residency, type(self).__name__)
        self.residency: str = residency or self.default_residency
        self.decision: str | None = None  # what "auto" chose for the current weights
        self.pack_count = 0  # how many packs were built (threads share one)
        # (pack, stamp of the weights it was built from), swapped as one reference so a reader
        # never pairs a new pack with an old stamp or the reverse
        self._served: tuple[Any, tuple[Any, ...]] | None = None
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> BoundWeights:
        fresh = type(self).__new__(type(self))
        fresh.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("_served", "_lock")})
        fresh._served, fresh._lock = None, threading.Lock()
        fresh.decision, fresh.pack_count = None, 0
        return fresh

    # -- what subclasses provide -----------------------------------------------------------
    def build(self, layer: Module, arrays: Mapping[str, Array | None]) -> Any:
        raise NotImplementedError

    def serve_packed(self, layer: Module, pack: Any, x: Array) -> Array:
        raise NotImplementedError

    def serve_raw(self, layer: Module, arrays: Mapping[str, Array | None], x: Array) -> Array:
        raise NotImplementedError

    def unpack(self, pack: Any) -> dict[str, Array]:
        """The declared arrays rebuilt from ``pack`` (whose ``unpack()`` gives them in declared order)."""
        parts = pack.unpack()
        return dict(zip(self.declared, parts if isinstance(parts, tuple) else (parts,), strict=True))

    def pack_nbytes(self, layer: Module) -> int:
        """The size a pack will take, before building it: each declared tensor in its compute
        dtype (half precision packs as float32)."""
        return sum(p.numel() * max(p.dtype.itemsize, 4) for _, p in self._params(layer))

    # -- state ---------------------------------------------------------------------------------
    def _params(self, layer: Module) -> Iterator[tuple[str, Tensor]]:
        for name in self.declared:
            param = layer._parameters.get(name)
            if param is not None:
                yield name, param

    def _current_stamp(self, layer: Module) -> tuple[Any, ...]:
        return tuple((name, p, p._lineage, p._lineage.version) for name, p in self._params(layer))

    @property
    def _pack(self) -> Any:
        served = self._served
        return None if served is None else served[0]

    def _fresh_pack(self, layer: Module) -> Any:
        """The resident pack if it was built from the layer's current weights, else None."""
        served = self._served
        if served is None or not _same_stamp(served[1], self._current_stamp(layer)):
            return None
        return served[0]

    def arrays(self, layer: Module) -> dict[str, Array | None]:
        """The declared parameters' current arrays (rebuilt where a pack holds them)."""
        out: dict[str, Array | None] = dict.fromkeys(self.declared)
        for name, param in self._params(layer):
            out[name] = param._array()
        return out

    @property
    def packed(self) -> bool:
        """Whether a pack is resident now."""
        return self._pack is not None

    @property
    def resident_pack_bytes(self) -> int:
        pack = self._pack
        return 0 if pack is None else int(pack.nbytes)

    def effective(self, layer: Module) -> str:
        """The residency a forward uses now: ``auto`` resolves to packed or borrowed."""
        if self.residency != "auto":
            return self.residency
        if self.decision is None:  # decided once per binding; a load or a residency change resets it
            self.decision = "packed" if self.pack_nbytes(layer) <= free_memory() else "borrowed"
        return self.decision

    # -- serving -----------------------------------------------------------------------------------
    def forward(self, layer: Module, x: Array) -> Array:
        mode = self.effective(layer)
        if mode == "packed":
            return self.serve_packed(layer, self.current_pack(layer), x)
        # borrowed and per_call both compute from the bound arrays; what a kernel needs beyond
        # them (a half-precision upcast) is made for the call and freed, never kept
        return self.serve_raw(layer, self.arrays(layer), x)

    def current_pack(self, layer: Module) -> Any:
        """The pack for the layer's current weights, building it (once, under the lock) when
        there is none or the weights changed since it was built."""
        pack = self._fresh_pack(layer)
        if pack is not None:
            return pack
        with self._lock:
            pack = self._fresh_pack(layer)
            if pack is not None:
                return pack
            while True:  # a seqlock read: never pack from storage an edit is halfway through
                before = self._current_stamp(layer)
                if not any(s[2].writers for s in before):
                    built = self.build(layer, self.arrays(layer))
                    after = self._current_stamp(layer)
                    if _same_stamp(before, after) and not any(s[2].writers for s in after):
                        return self._install(layer, built, after)
                time.sleep(0)

    def _install(self, layer: Module, pack: Any, stamp: tuple[Any, ...] | None = None) -> Any:
        """Swap ``pack`` in, record what it was built from, drop raw storage under packed."""
        self._served = (pack, stamp if stamp is not None else self._current_stamp(layer))
        self.pack_count += 1
        for name, param in self._params(layer):
            param._drop(_PackSource(self, pack, name))
        return pack

    def release(self, layer: Module) -> None:
        """Give the raw storage back to the parameters and drop the pack (leaving ``packed``)."""
        with self._lock:
            for _, param in self._params(layer):
                param._restore()
            self._served = None

    def pack_now(self, layer: Module) -> None:
        """What the first forward would do, now: pack under packed (or auto when it fits);
        under borrowed and per_call only the decision is made, and nothing is copied. A layer
        whose weights are still storage-free (meta init, not loaded yet) has nothing to pack."""
        if any(not p.has_storage for _, p in self._params(layer)):
            return
        if self.effective(layer) == "packed":
            self.current_pack(layer)

    # -- load_state_dict --------------------------------------------------------------------------
    def prepare_load(
        self, layer: Module, incoming: Mapping[str, Tensor], assign: bool, pack: bool, residency: str | None
    ) -> Callable[[], None]:
        """Build what the load needs before anything is written (a pack from the incoming
        values when ``pack=True`` and the residency packs), and return the commit step."""
        target = residency or self.residency
        prebuilt = None
        if pack and target in ("packed", "auto"):
            arrays: dict[str, Array | None] = dict.fromkeys(self.declared)
            for name, param in self._params(layer):
                value = incoming.get(name)
                if value is not None:
                    arrays[name] = (value if assign else value.to(param.dtype))._array()
                elif param.has_storage:
                    arrays[name] = param._array()
                else:
                    raise StateDictError(
                        f"{type(layer).__name__}: cannot pack at load, its {name!r} is storage-free and this load "
                        "does not bind it"
                    )
            if target == "packed" or self.pack_nbytes(layer) <= free_memory():
                prebuilt = self.build(layer, arrays)

        def commit() -> None:
            self.release(layer)
            self.residency = target
            self.decision = None
            if prebuilt is not None:
                with self._lock:
                    if target == "auto":
                        self.decision = "packed"
                    self._install(layer, prebuilt)
            elif pack:
                self.pack_now(layer)

        return commit

    def state_value(self, name: str, param: Tensor, keep_vars: bool) -> Tensor | None:
        """Revision 2: every declared weight, rebuilt from the pack where the raw was dropped.
        Revision 1: a packed layer's declared entries leave the dict."""
        if name in self.declared and self._pack is not None and current_revision() == 1:
            return None
        return param if keep_vars else param.detach()


class BoundLayer:
    """Mixin for a Module subclass that serves through a :class:`BoundWeights` in ``_bound``:
    it wires loads, state dicts, ``initialize()`` and the repr to the bound object."""

    _bound: BoundWeights

    @property
    def weight_residency(self) -> str:
        """The residency this layer keeps its weights in ("packed", "borrowed", "auto", "per_call")."""
        return self._bound.residency

    @property
    def residency_decision(self) -> str | None:
        """What ``auto`` chose for the current weights (None before the first decision)."""
        return self._bound.decision if self._bound.residency == "auto" else self._bound.residency

    def set_weight_residency(self, residency: str) -> None:
        """Change how this layer keeps its weights; the next forward applies it."""
        check_residency(residency, type(self).__name__)
        layer: Module = self  # type: ignore[assignment]
        self._bound.release(layer)
        self._bound.residency = residency
        self._bound.decision = None

    @property
    def is_packed(self) -> bool:
        """Whether a pack is resident now."""
        return self._bound.packed

    def _prepare_load(
        self, path: str, incoming: Mapping[str, Tensor], assign: bool, pack: bool, residency: str | None
    ) -> Callable[[], None] | None:
        layer: Module = self  # type: ignore[assignment]
        return self._bound.prepare_load(layer, incoming, assign, pack, residency)

    def _pack_now(self) -> None:
        layer: Module = self  # type: ignore[assignment]
        self._bound.pack_now(layer)

    def _state_value(self, name: str, param: Tensor, keep_vars: bool) -> Tensor | None:
        return self._bound.state_value(name, param, keep_vars)


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
        return self.raw + self.packed + self.borrowed


class MemoryReport(list[MemoryRow]):
    """Rows of :func:`memory_report`; ``str()`` prints them as a table with totals."""

    def totals(self) -> dict[str, int]:
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
    parameters and buffers hold), ``packed`` (a bound layer's serving form) and ``borrowed``
    (weights a layer serves from in place). A tied tensor is counted once."""
    report = MemoryReport()
    seen: set[int] = set()
    for path, mod in module.named_modules():
        found = getattr(mod, "_bound", None)
        bound = found if isinstance(found, BoundWeights) else None
        mode = bound.effective(mod) if bound is not None else "-"
        served_in_place = set(bound.declared) if bound is not None and mode == "borrowed" else set()
        raw = borrowed = 0
        for registry in ("_parameters", "_buffers"):
            for name, t in getattr(mod, registry).items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                if registry == "_parameters" and name in served_in_place:
                    borrowed += t.storage_nbytes
                else:
                    raw += t.storage_nbytes
        packed = bound.resident_pack_bytes if bound is not None else 0
        if raw or packed or borrowed or bound is not None:
            report.append(MemoryRow(path, type(mod).__name__, mode, raw, packed, borrowed))
    return report
