"""The one base class of layers that pack their weights.

A layer with weights (Linear, Conv2d, Embedding, QuantizedLinear) subclasses
:class:`PackedLayer`: it declares its weights as parameters (``declared`` names them) and
says how to turn their arrays into a serving form, a *pack*, in two ways: an owned pack
(``_pack``) and a zero-copy one over the bound arrays (``_borrow``). Every residency
(:mod:`packrt_core.nn.residency`) serves ``pack.forward(x)``; what differs is which pack and
how long it lives:

- ``packed``: one owned pack; each declared Parameter drops its raw storage (the object
  stays; reading it rebuilds its values from the pack; an in-place edit restores raw storage
  and the next forward repacks).
- ``borrowed``: the zero-copy pack over the bound tensors, made per call (it costs nothing),
  so a memory-mapped checkpoint stays the only copy and writes through its handle are seen.
- ``per_call``: nothing kept between calls; for float32 weights it computes like ``borrowed``
  (half weights convert for the call and the converted copy is freed). The two differ in
  intent: ``borrowed`` promises the bound storage is the serving copy.
- ``auto``: decided once per binding by :func:`~packrt_core.nn.residency.resolve` and recorded
  (``layer.residency_decision``).

Packing happens once, under a lock (forwards may run on many threads), on the first forward
or at ``load_state_dict(..., pack=True)`` / ``initialize()``. The pair (pack, stamp of the
weights it was built from) is swapped in as one reference, so a forward beside an in-place
edit uses the old pack or the new one, never a mix. Layers reach their kernels through their
weights' device backend, never by importing a kernels package.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

from packrt_base.kernels import Kernels, Pack
from packrt_base.pages import release_pages
from packrt_core import dispatch
from packrt_core.device import Device
from packrt_core.errors import StateDictError
from packrt_core.nn.module import Module
from packrt_core.nn.parameter import Parameter
from packrt_core.nn.residency import check_residency, resolve
from packrt_core.publication import publishing
from packrt_core.revision import current_revision
from packrt_core.tensor import WRITES, Tensor

Array = Any
# Per-instance state a deep copy starts afresh: a copy packs its own weights on its first forward.
_FRESH_IN_A_COPY = ("_served", "_lock", "_decision", "pack_count")
Stamp = tuple[tuple[str, Parameter, Any, int], ...]


def _same_stamp(a: Stamp, b: Stamp) -> bool:
    """Same parameter objects, lineages and versions, in the same slots."""
    return len(a) == len(b) and all(
        x[0] == y[0] and x[1] is y[1] and x[2] is y[2] and x[3] == y[3] for x, y in zip(a, b, strict=True)
    )


class _PackSource:
    """Gives a dropped parameter its values back from the pack that holds them."""

    __slots__ = ("index", "pack")

    def __init__(self, pack: Any, index: int) -> None:
        self.pack, self.index = pack, index

    def rebuild(self) -> Array:
        parts = self.pack.unpack()
        return (parts if isinstance(parts, tuple) else (parts,))[self.index]


class PackedLayer(Module):
    """Base class of layers that serve their declared weights through a pack.

    Subclasses name their weights in ``declared`` (in the order their pack's ``unpack()``
    returns them) and implement :meth:`_pack` and :meth:`_borrow`; the base class owns the
    residency, the (pack, stamp) pair, loads, state dicts and ``initialize()``.
    """

    declared: ClassVar[tuple[str, ...]] = ("weight", "bias")
    default_residency: ClassVar[str] = "packed"

    _residency: str
    _decision: str | None
    _served: tuple[Pack, Stamp] | None
    _lock: threading.Lock
    pack_count: int

    def __init__(self, weight_residency: str | None = None) -> None:
        super().__init__()
        check_residency(weight_residency, type(self).__name__)
        self._residency = weight_residency or self.default_residency
        self._decision = None  # what "auto" chose for the current weights
        self.pack_count = 0  # how many packs were built (threads share one)
        self._served = None
        self._lock = threading.Lock()

    # -- what subclasses provide -------------------------------------------------------------
    def _pack(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        """An owned serving form built from the declared arrays."""
        raise NotImplementedError

    def _borrow(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        """A zero-copy serving form over the declared arrays."""
        raise NotImplementedError

    def _floating(self, name: str) -> bool:
        """Whether declared weight ``name`` must be floating point (QuantizedLinear's int8 weight is not)."""
        param = self._parameters.get(name)
        return param is not None and param.dtype.is_floating_point

    def _pack_nbytes(self) -> int:
        """The size a pack will take, before building it: each declared tensor in its compute
        dtype (half precision packs as float32)."""
        return sum(p.numel() * max(p.dtype.itemsize, 4) for _, p in self._declared_params())

    # -- the public face -------------------------------------------------------------------------
    @property
    def weight_residency(self) -> str:
        """The residency this layer keeps its weights in ("packed", "borrowed", "auto", "per_call")."""
        return self._residency

    @property
    def residency_decision(self) -> str | None:
        """What ``auto`` chose for the current weights (None before the first decision)."""
        return self._decision if self._residency == "auto" else self._residency

    def set_weight_residency(self, residency: str | None) -> None:
        """Change how this layer keeps its weights (None: the layer's default); the next forward applies it.
        A publication: a forward running on another thread finishes in the old residency first."""
        check_residency(residency, type(self).__name__)
        with publishing():
            self._release()
            self._residency = residency or self.default_residency
            self._decision = None
            self._changed()

    @property
    def is_packed(self) -> bool:
        """Whether a pack is resident now."""
        return self._served is not None

    @property
    def resident_pack_bytes(self) -> int:
        """Bytes the resident pack holds (0 without one)."""
        served = self._served
        return 0 if served is None else int(served[0].nbytes)

    def serving_residency(self) -> str:
        """The residency a forward would use now (``auto`` resolved), without deciding anything."""
        if self._decision is not None:  # only auto records a decision
            return self._decision
        return resolve(self._residency, self._pack_nbytes(), self._device())

    def _mode(self) -> str:
        """The mode a forward serves from; ``auto`` decides once per binding and keeps the decision."""
        if self._residency != "auto":
            return self._residency
        if self._decision is None:
            self._decision = self.serving_residency()
        return self._decision

    # -- serving ---------------------------------------------------------------------------------
    def _serve(self, x: Tensor) -> Tensor:
        """``pack.forward(x)`` with the pack this layer's residency serves from (the layer has
        checked ``x``; the kernels check nothing)."""
        return x._wrap(self._serving_pack().forward(x._array()))

    def _serving_pack(self) -> Pack:
        if self._mode() == "packed":
            return self._current_pack()
        return self._borrow(self._kernels(), self._arrays())

    def _device(self) -> Device:
        return self._parameters[self.declared[0]].device  # type: ignore[union-attr]

    def _kernels(self) -> Any:
        return dispatch.kernels_for(self._device())

    def _declared_params(self) -> Iterator[tuple[str, Parameter]]:
        for name in self.declared:
            param = self._parameters.get(name)
            if param is not None:
                yield name, param

    def _arrays(self) -> dict[str, Array | None]:
        """The declared parameters' current arrays (rebuilt where a pack holds them)."""
        out: dict[str, Array | None] = dict.fromkeys(self.declared)
        for name, param in self._declared_params():
            out[name] = param._array()
        return out

    def _stamp(self) -> Stamp:
        return tuple((name, p, p._lineage, p._lineage.version) for name, p in self._declared_params())

    def _fresh_pack(self) -> Pack | None:
        """The resident pack if it was built from the layer's current weights, else None.

        Every forward asks: the stamp is compared slot by slot, without building the current one."""
        served = self._served
        if served is None:
            return None
        pack, stamp = served
        params, seen = self._parameters, 0
        for name in self.declared:
            param = params.get(name)
            if param is None:
                continue
            if seen == len(stamp):
                return None
            slot, packed, lineage, version = stamp[seen]
            if slot != name or packed is not param or lineage is not param._lineage or version != lineage.version:
                return None
            seen += 1
        return pack if seen == len(stamp) else None

    def _current_pack(self) -> Pack:
        """The pack for the layer's current weights, building it (once, under the lock) when
        there is none or the weights changed since it was built."""
        pack = self._fresh_pack()
        if pack is not None:
            return pack
        with self._lock:
            pack = self._fresh_pack()
            if pack is not None:
                return pack
            while True:  # a seqlock read: never pack from storage an edit is halfway through
                before = self._stamp()
                if not any(s[2].writers for s in before):
                    built = self._pack(self._kernels(), self._arrays())
                    with WRITES:  # no write can start (or be halfway) while the pack goes in
                        after = self._stamp()
                        if _same_stamp(before, after):
                            return self._install(built, after)
                time.sleep(0)

    def _install(self, pack: Pack, stamp: Stamp | None = None) -> Pack:
        """Swap ``pack`` in, record what it was built from, drop raw storage under packed.
        The caller holds :data:`~packrt_core.tensor.WRITES`.

        Storage that was a view of a mapped checkpoint also leaves the resident set
        (:func:`packrt_base.pages.release_pages`): the pack is the copy that serves, and the file's pages
        would otherwise stay resident beside it for as long as anything keeps the file open."""
        self._served = (pack, stamp if stamp is not None else self._stamp())
        self.pack_count += 1
        for name, param in self._declared_params():
            raw = param._data
            param._drop(_PackSource(pack, self.declared.index(name)))
            if raw is not None:
                release_pages(raw)
        return pack

    def _adopt(self, old: Pack, new: Pack) -> bool:
        """Serve ``new``, the same values in another layout (a view into a serving plan's fused weight),
        instead of ``old``, keeping old's stamp; False (nothing changed) when ``old`` is no longer the
        resident pack. The dropped parameters then rebuild from ``new``, so ``old`` can be freed."""
        with self._lock, WRITES:
            served = self._served
            if served is None or served[0] is not old:
                return False
            self._served = (new, served[1])
            for name, param in self._declared_params():
                if param._source is not None:
                    param._source = _PackSource(new, self.declared.index(name))
            return True

    def _release(self) -> None:
        """Give the raw storage back to the parameters and drop the pack (leaving ``packed``)."""
        with self._lock, WRITES:
            for _, param in self._declared_params():
                param._restore()
            self._served = None

    # -- Module hooks --------------------------------------------------------------------------
    def _pack_now(self) -> None:
        """What the first forward would do, now: pack under packed (or auto when it fits);
        under borrowed and per_call only the decision is made, and nothing is copied. A layer
        whose weights are still storage-free (meta init, not loaded yet) has nothing to pack."""
        if any(not p.has_storage for _, p in self._declared_params()):
            return
        if self._mode() == "packed":
            self._current_pack()

    def _prepare_load(
        self, path: str, incoming: Mapping[str, Tensor], assign: bool, pack: bool, residency: str | None
    ) -> Callable[[], None] | None:
        """Build what the load needs before anything is written (a pack from the incoming
        values when ``pack=True`` and the residency packs), and return the commit step."""
        target = residency or self._residency
        if assign:
            self._check_floating(path, incoming)
        prebuilt = None
        if pack and target in ("packed", "auto"):  # the residencies that may keep a pack
            arrays = self._incoming_arrays(incoming, assign)
            if resolve(target, self._pack_nbytes(), self._device()) == "packed":
                prebuilt = self._pack(self._kernels(), arrays)

        def commit() -> None:
            self._release()
            self._residency = target
            self._decision = None
            self._changed()
            if prebuilt is not None:
                with self._lock, WRITES:
                    if target == "auto":
                        self._decision = "packed"
                    self._install(prebuilt)
            elif pack:
                self._pack_now()

        return commit

    def _check_floating(self, path: str, incoming: Mapping[str, Tensor]) -> None:
        """A float layer bound to integer weights would serve integers, or fail to pack: refuse it."""
        prefix = f"{path}." if path else ""
        wrong = [
            f"{prefix}{name}: {type(self).__name__} serves floating-point weights, the checkpoint has "
            f"{value.dtype.name}; cast it to a float dtype first (an int8 weight belongs in QuantizedLinear)"
            for name, value in incoming.items()
            if name in self.declared and not value.dtype.is_floating_point and self._floating(name)
        ]
        if wrong:
            raise StateDictError("; ".join(wrong))

    def _incoming_arrays(self, incoming: Mapping[str, Tensor], assign: bool) -> dict[str, Array | None]:
        """The arrays a pack built at load takes: the incoming values (cast to the parameter's dtype
        unless the load binds them as they are), else the layer's own."""
        arrays: dict[str, Array | None] = dict.fromkeys(self.declared)
        for name, param in self._declared_params():
            value = incoming.get(name)
            if value is not None:
                arrays[name] = (value if assign else value.to(param.dtype))._array()
            elif param.has_storage:
                arrays[name] = param._array()
            else:
                raise StateDictError(
                    f"{type(self).__name__}: cannot pack at load, its {name!r} is storage-free and this load "
                    "does not bind it"
                )
        return arrays

    def _transaction_state(self) -> Any:
        """The pack, its stamp and the residency bookkeeping, and each declared parameter's storage
        slots: what a failed load puts back so the layer is as it was, pack included."""
        params = [(p, p._data, p._source) for _, p in self._declared_params()]
        return (self._served, self._residency, self._decision, self.pack_count, params)

    def _restore_transaction_state(self, state: Any) -> None:
        served, residency, decision, pack_count, params = state
        with WRITES:
            for param, data, source in params:
                param._data, param._source = data, source
            self._served, self._residency, self._decision, self.pack_count = served, residency, decision, pack_count

    def _state_value(self, name: str, param: Parameter, keep_vars: bool) -> Tensor | None:
        """Revision 2: every declared weight, rebuilt from the pack where the raw was dropped.
        Revision 1: a packed layer's declared entries leave the dict."""
        if name in self.declared and self._served is not None and current_revision() == 1:
            return None
        return param if keep_vars else param.detach()

    def __deepcopy__(self, memo: dict[int, Any]) -> PackedLayer:
        fresh = type(self).__new__(type(self))
        memo[id(self)] = fresh
        for key, value in self.__dict__.items():
            if key not in _FRESH_IN_A_COPY:
                fresh.__dict__[key] = copy.deepcopy(value, memo)
        fresh.__dict__.update(_served=None, _lock=threading.Lock(), _decision=None, pack_count=0)
        return fresh
