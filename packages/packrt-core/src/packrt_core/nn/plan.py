"""The serving plan: a block's forward as a few fused steps, built from its layers' packs, used only
where nobody could tell it from the module-by-module road.

A block that has a fused form (a model's layer, an encoder's embeddings, in ``packrt.models``; or a whole
model) asks :func:`serve` at the start of its own forward, as vLLM's layers call their fused kernels inside
their forward: the model keeps one forward and each block decides for itself. The block gets its plan, or
None and runs its children one by one, as always. The rules a user relies on:

- **A hook sees every call.** While any module inside a block has a forward hook or pre-hook, every
  call of that block takes the plain road (hooks on the block itself run either way: they wrap its call;
  the model's other blocks keep their plans).
- **The plan is the block's current weights.** A plan records what it was built from: every module's
  registrations (a replaced submodule, a new Parameter, a residency set), every parameter's object,
  lineage and version (an in-place edit, a load, a cast or a move). A call that finds any of them
  changed drops the plan and builds a new one (or serves the plain road while a hook is registered); a
  plan is never used over weights it was not built from.
- **Both roads give the same numbers** within the road tolerance
  (``packrt_kernels_cpu.tolerance.ROAD_TOLERANCES``), the same shapes and dtypes.
- **One call, one snapshot.** A block's call validates its plan once, at the start, and then computes only
  from the arrays the plan holds (the layers' packs as they were, its own copies of the small norm
  weights), so a load committed during the call is not half-seen by the block; its next call sees all of it.
- **Which road ran** is in :func:`plan_report` (the last call's road and why, what the plans fuse
  and hold, gathered over a model's blocks). ``PACKRT_PLAN=0`` or :func:`serving_plans` turns plans off.

A device serves plans where its kernels have :class:`packrt_base.plan.PlanKernels`
(``kernels.plan_kernels()``); elsewhere every call takes the plain road.

**What a builder may read.** A plan runs on raw arrays and the layers' packs, which packrt-core keeps
private. The four functions at the end of this module are the one surface a builder outside packrt-core
uses to reach them (no other module reaches a private name of packrt-core; ruff's SLF001 and PLC2701
check it): :func:`serving_pack` (the pack a layer's forward would serve now), :func:`share_pack` (a
layer serves a view into the plan's fused weight instead of its own pack), :func:`array_of` (a
tensor's device array, uncopied) and :func:`tensor_like` (an array as a new tensor on another
tensor's device).
"""

from __future__ import annotations

import contextlib
import operator
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from packrt_base.kernels import Pack
from packrt_base.pages import release_unserved_pages
from packrt_base.plan import PlanKernels
from packrt_core import dispatch
from packrt_core.errors import PackrtError
from packrt_core.nn.module import Module
from packrt_core.nn.packed import PackedLayer
from packrt_core.nn.parameter import Parameter
from packrt_core.tensor import Tensor

_epoch = operator.attrgetter("_epoch")
_hooked = operator.attrgetter("_hooked")
_lineage = operator.attrgetter("_lineage")
_version = operator.attrgetter("version")


class PlanUnavailableError(PackrtError, ValueError):
    """A builder cannot plan this model as it is (a module it does not know, storage-free weights):
    the model serves the plain road, and :func:`plan_report` says why."""


class Plan(Protocol):
    """What a builder returns: its size and contents for the report (it runs by the model's own call)."""

    nbytes: int  # bytes held beyond the layers' packs (fused weights, norm copies)
    fused: tuple[str, ...]  # one line per fusion, for the report


class Guard:
    """What a plan was built from, and the check at the start of each call that it still is.

    Built before the builder reads any pack, so a write that lands during the build shows as a stale
    guard at the check right after it (the plan is then not used)."""

    def __init__(self, root: Module, record: Any, device: Any) -> None:
        self.modules = [module for _, module in root.named_modules()]
        self.inner = self.modules[1:]
        self.record, self.device = record, device  # the device's kernels (a test may put another backend in)
        self.epochs = list(map(_epoch, self.modules))
        self.tables = [m._parameters for m in self.modules for _ in m._parameters]
        self.names = [name for m in self.modules for name in m._parameters]
        self.params = [table[name] for table, name in zip(self.tables, self.names, strict=True)]
        present = [p for p in self.params if p is not None]
        self.lineages = list(map(_lineage, present))
        self.versions = list(map(_version, self.lineages))

    def hooked(self) -> Module | None:
        """The first inner module with a forward hook or pre-hook, else None."""
        if not any(map(_hooked, self.inner)):
            return None
        return next(m for m in self.inner if m._hooked)

    def stale(self, device: Any) -> str | None:
        """Why the plan no longer describes the model served on ``device`` (None: it does)."""
        if device != self.device or dispatch.kernels_for(device) is not self.record:
            return f"the model now serves on {device} (or its backend was replaced) since the plan was built"
        if list(map(_epoch, self.modules)) != self.epochs:
            return "a submodule, parameter, buffer or residency was changed since the plan was built"
        params = list(map(dict.get, self.tables, self.names))
        if not all(map(operator.is_, params, self.params)):
            return "a parameter was rebound (a load with assign=True) since the plan was built"
        lineages = [p._lineage for p in params if p is not None]
        if lineages != self.lineages or list(map(_version, lineages)) != self.versions:
            return "a weight was written, loaded, cast or moved since the plan was built"
        return None


@dataclass
class _Slot:
    """One model's plan and what its last calls did, kept in the model's ``__dict__`` (the plan refers to
    the model's modules: kept beside it in a weak table, it would keep the model alive). A copy or an
    unpickled model starts with an empty slot and plans its own weights."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    plan: Any = None
    guard: Guard | None = None
    unavailable: str | None = None  # why the builder refused the model as the guard describes it
    road: str = "none"
    reason: str = "not called yet"
    builds: int = 0
    planned_calls: int = 0
    plain_calls: int = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> _Slot:
        return _Slot()

    def __reduce__(self) -> tuple[type[_Slot], tuple[()]]:
        return (_Slot, ())


_SLOT = "_serving_plan_slot"
_SLOTS_LOCK = threading.Lock()
_enabled = [os.environ.get("PACKRT_PLAN", "1").strip() != "0"]


def _slot(root: Module) -> _Slot:
    slot: _Slot | None = root.__dict__.get(_SLOT)
    if slot is None:
        with _SLOTS_LOCK:
            slot = root.__dict__.setdefault(_SLOT, _Slot())
    return slot


def set_serving_plans(enabled: bool) -> bool:
    """Let models serve through plans (True, the default unless ``PACKRT_PLAN=0``) or not, process-wide,
    from the next call on; returns the previous setting."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_serving_plans takes a bool, got {type(enabled).__name__}")
    before, _enabled[0] = _enabled[0], enabled
    return before


@contextlib.contextmanager
def serving_plans(enabled: bool) -> Iterator[None]:
    """Within the block, models serve through plans or not (process-wide); the setting comes back after."""
    before = set_serving_plans(enabled)
    try:
        yield
    finally:
        set_serving_plans(before)


Builder = Callable[[Module, PlanKernels], Plan]


def serve(root: Module, device: Any, build: Builder) -> Any:
    """The plan ``root`` (a block, or a whole model) serves this call through, or None for the plain road (the
    reason is kept for :func:`plan_report`). ``device``: where the block's weights are. Builds the plan with
    ``build(root, kernels)`` on the first call and after a change; a plan that is returned was valid at the
    start of this call."""
    slot = _slot(root)
    plan, reason = _plan_for_call(slot, root, device, build)
    if plan is None:
        slot.road, slot.reason = "plain", reason or "no plan"
        slot.plain_calls += 1
        return None
    slot.road, slot.reason = "plan", "no hook on an inner module; the plan matches the weights"
    slot.planned_calls += 1
    return plan


def _plan_for_call(slot: _Slot, root: Module, device: Any, build: Builder) -> tuple[Any, str | None]:
    if not _enabled[0]:
        return None, "serving plans are turned off (PACKRT_PLAN=0 or set_serving_plans(False))"
    guard = slot.guard
    fresh = guard is not None and guard.stale(device) is None
    hooked = guard.hooked() if fresh and guard is not None else _first_hooked(root)
    if hooked is not None:
        where = _path_of(root, hooked)
        return None, f"a forward hook or pre-hook is registered on {where}: every inner call runs as a module"
    if fresh and slot.plan is not None:
        return slot.plan, None
    if fresh and slot.unavailable is not None:
        return None, slot.unavailable
    if dispatch.kernels_for(device).plan_kernels() is None:
        return None, f"the {device} backend has no serving-plan kernels"
    return _rebuild(slot, root, device, build)


def _first_hooked(root: Module) -> Module | None:
    return next((m for _, m in root.named_modules() if m is not root and m._hooked), None)


def _path_of(root: Module, module: Module) -> str:
    return next((path for path, m in root.named_modules() if m is module), "an inner module")


def _rebuild(slot: _Slot, root: Module, device: Any, build: Builder) -> tuple[Any, str | None]:
    """A fresh plan (or the one another thread just built), or (None, why not)."""
    with slot.lock:
        guard = slot.guard
        if guard is not None and guard.stale(device) is None:
            return slot.plan, slot.unavailable
        record = dispatch.kernels_for(device)
        kernels = record.plan_kernels()
        if kernels is None:
            return None, f"the {device} backend has no serving-plan kernels"
        guard = Guard(root, record, device)
        slot.plan, slot.guard, slot.unavailable = None, guard, None
        try:
            plan = build(root, kernels)
        except PlanUnavailableError as err:
            slot.unavailable = str(err)
            return None, slot.unavailable
        if guard.stale(device) is not None:  # a write landed while the plan was built: not this plan
            slot.guard = None
            return None, "the weights changed while the plan was being built"
        slot.plan = plan
        slot.builds += 1
        _hand_back_pages(root)
        return plan, None


def _hand_back_pages(root: Module) -> None:
    """Drop the pages of ``root``'s mapped checkpoint that nothing serves from any more
    (:func:`packrt_base.pages.release_unserved_pages`): once the plan is built, its packed layers' weights are
    copies, while building it read the file's small tensors (norms, biases), and each such read maps the cached
    folio around it, pages of packed neighbours included. The arrays ``root`` still holds keep their pages."""
    served = [t._data for t in (*root.parameters(), *root.buffers()) if t._data is not None]
    release_unserved_pages(served)


class PlanReport(NamedTuple):
    """What :func:`plan_report` says about a model or a block: ``road`` of its last call (``"plan"``,
    ``"plain"``, or ``"none"`` before the first call or for a model without a plan builder) and ``reason``;
    what the plans fuse (``fused``) and the bytes they hold beyond the layers' packs; how many plans were
    built and how many block calls took each road."""

    road: str
    reason: str
    fused: tuple[str, ...]
    nbytes: int
    builds: int
    planned_calls: int
    plain_calls: int

    def __str__(self) -> str:
        lines = [
            f"road of the last call: {self.road} ({self.reason})",
            f"calls: {self.planned_calls} planned, {self.plain_calls} plain; plans built: {self.builds}; "
            f"plan holds {self.nbytes / 2**20:.2f} MiB beyond the layers' packs",
        ]
        lines += [f"  {line}" for line in self.fused]
        return "\n".join(lines)


def plan_report(model: Module) -> PlanReport:
    """Which road ``model``'s last call took and why, and what its plans fuse. Reading it changes nothing.

    A model whose blocks plan themselves (each layer asks :func:`serve` for its own plan) is reported as a
    whole: its road is ``"plain"`` when any block's last call was (the reason names the first such block),
    its fused lines say which blocks fuse what, and the bytes, builds and calls are summed over its blocks
    (so ``planned_calls`` counts block calls: a step of a 30-layer decoder is 30)."""
    if not isinstance(model, Module):
        raise TypeError(f"plan_report takes a packrt Module, got {type(model).__name__}")
    slots = [(path, m.__dict__[_SLOT]) for path, m in model.named_modules() if _SLOT in m.__dict__]
    if not slots:
        reason = "not called yet" if _has_builder(model) else f"{type(model).__name__} has no serving plan"
        return PlanReport("none", reason, (), 0, 0, 0, 0)
    if len(slots) == 1 and slots[0][0] == "":
        return _one_report(slots[0][1])
    reports = [(path, _one_report(slot)) for path, slot in slots]
    plain = next(((path, r) for path, r in reports if r.road == "plain"), None)
    if plain is not None:
        road, reason = "plain", _at(plain[0], plain[1].reason)
    elif any(r.road == "plan" for _, r in reports):
        road, reason = "plan", f"every block's last call took its plan ({len(reports)} blocks)"
    else:
        road, reason = "none", "not called yet"
    return PlanReport(
        road,
        reason,
        _fused_lines(reports),
        sum(r.nbytes for _, r in reports),
        sum(r.builds for _, r in reports),
        sum(r.planned_calls for _, r in reports),
        sum(r.plain_calls for _, r in reports),
    )


def _one_report(slot: _Slot) -> PlanReport:
    plan = slot.plan
    fused = tuple(plan.fused) if plan is not None else ()
    nbytes = int(plan.nbytes) if plan is not None else 0
    return PlanReport(slot.road, slot.reason, fused, nbytes, slot.builds, slot.planned_calls, slot.plain_calls)


def _at(path: str, reason: str) -> str:
    """``reason`` of the block at ``path`` in the model's words: a block's builder names its modules by their
    paths in the block (``mlp.act is ...`` -> ``layers.1.mlp.act is ...``); a reason about the block as a
    whole (one starting with an article or naming the plans) is prefixed with its path."""
    if not path:
        return reason
    if " registered on " in reason:
        return reason.replace(" registered on ", f" registered on {path}.", 1)
    if reason.startswith(("a ", "an ", "the ", "serving plans", "not called")):
        return f"{path}: {reason}"
    return f"{path}.{reason}"


def _fused_lines(reports: list[tuple[str, PlanReport]]) -> tuple[str, ...]:
    """One line per distinct fusion, naming the blocks that do it (first, last and how many)."""
    where: dict[str, list[str]] = {}
    for path, report in reports:
        for line in report.fused:
            where.setdefault(line, []).append(path or "the model")
    lines = []
    for line, paths in where.items():
        blocks = paths[0] if len(paths) == 1 else f"{paths[0]} .. {paths[-1]} ({len(paths)} blocks)"
        lines.append(f"{blocks}: {line}")
    return tuple(lines)


def _has_builder(model: Module) -> bool:
    return any(getattr(type(m), "serves_plans", False) for m in model.modules())


def owned_copy(param: Parameter | None) -> Any:
    """A plan's own copy of a small weight (a norm's), so a later in-place write cannot reach a call."""
    return None if param is None else param._array().copy()


def serving_pack(layer: PackedLayer) -> Pack:
    """The pack ``layer``'s forward would serve now: its resident pack under ``packed``, else a borrowed
    view of its bound weights (under ``auto``, the residency is decided as a forward would)."""
    return layer._serving_pack()


def share_pack(layer: PackedLayer, old: Pack, new: Pack) -> bool:
    """``layer`` serves ``new`` (the same values as ``old`` in another layout: a view into a plan's fused
    weight) in place of ``old``, so the plan and the layer hold one copy; False, and nothing changes, when
    ``old`` is no longer the layer's resident pack (a load or an edit replaced it)."""
    return layer._adopt(old, new)


def array_of(tensor: Tensor) -> Any:
    """``tensor``'s array on its own device, not copied (a numpy array on the CPU): for reading only,
    since a write through it bypasses the tensor's version and so every pack's staleness check."""
    return tensor._array()


def tensor_like(like: Tensor, data: Any) -> Tensor:
    """``data`` (an array of ``like``'s device) as a new tensor on ``like``'s device, with a lineage of its own."""
    return like._wrap(data)


__all__ = [
    "Guard",
    "Plan",
    "PlanReport",
    "PlanUnavailableError",
    "array_of",
    "owned_copy",
    "plan_report",
    "serve",
    "serving_pack",
    "serving_plans",
    "set_serving_plans",
    "share_pack",
    "tensor_like",
]
