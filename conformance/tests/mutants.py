"""Mutant adapters: packrt with ONE contract rule broken on purpose, to prove the suite notices.

Each mutant is the real packrt adapter whose ``nn`` namespace hands out subclasses of packrt's
``Module`` / ``Linear`` / ``Sequential`` with a fault mixed in (packrt itself is never touched), or
whose adapter method lies. A fault class overrides only the methods it breaks and becomes its
mutant through :func:`mutant`. ``breaks`` names the clauses a run against the mutant must fail;
``revision`` is the contract revision the fault shows under; ``suite_files`` is the part of the
suite worth running for it (the rest would only cost time). Load one with
``--impl mutants:WalkOrderReversed`` with this directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

from packrt_conformance.adapters.packrt_adapter import PackrtAdapter


class Mutant(PackrtAdapter):
    """The packrt adapter with ``fault`` mixed into every module class the suite can build."""

    fault: ClassVar[str] = "none"
    breaks: ClassVar[frozenset[str]] = frozenset()
    revision_under_test: ClassVar[int] = 2
    suite_files: ClassVar[tuple[str, ...]] = ()
    mixin: ClassVar[type | None] = None

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.name = f"packrt-mutant[{self.fault}]"
        real = self._packrt.nn
        ns = types.SimpleNamespace(**{name: getattr(real, name) for name in real.__all__})
        if self.mixin is not None:
            # Same class names as packrt's, so reprs and error messages read as they would.
            for cls_name in ("Module", "Linear", "Sequential"):
                setattr(ns, cls_name, type(cls_name, (self.mixin, getattr(real, cls_name)), {}))
        self.nn = ns

    def linear(self, in_features: int, out_features: int, bias: bool = True) -> Any:
        return self.nn.Linear(in_features, out_features, bias=bias, device=self.device)


def mutant(fault: str, breaks: Iterable[str], *suite_files: str) -> Callable[[type], type[Mutant]]:
    """Turn the decorated fault class into the Mutant (of the same name) that mixes it in."""

    def make(mixin: type) -> type[Mutant]:
        attrs = {
            "__doc__": mixin.__doc__,
            "__module__": mixin.__module__,
            "fault": fault,
            "breaks": frozenset(breaks),
            "suite_files": suite_files,
            "mixin": mixin,
        }
        return type(mixin.__name__, (Mutant,), attrs)

    return make


# -- walks -----------------------------------------------------------------------------------------
# A tensor walk's keyword matrix and its remove_duplicate=False listing both run over a child filed
# under two names: a walk that lists that child's tensors in the wrong order, or too few or too many
# times, fails all four.
SHARED_CHILD_TENSOR_WALKS = frozenset(
    {
        "named_buffers.keyword-matrix",
        "named_buffers.remove-duplicate-false-shared-child",
        "named_parameters.keyword-matrix",
        "named_parameters.remove-duplicate-false-shared-child",
    }
)


@mutant(
    "walk-order-reversed",
    {
        *SHARED_CHILD_TENSOR_WALKS,
        "buffers.recurse-matrix",
        "named_modules.keyword-matrix",
        "named_modules.recurse",
        "parameters.recurse-matrix",
        "state_dict.keyword-matrix",
        "module.order.walks",
        "named_parameters.order",
        "named_buffers.order",
        "named_children.order",
        "children.direct-in-order",
        "named_modules.self-first",
        "module.order.state-dict",
        "state_dict.flat-dotted-keys",
        # Which name is "the first" of a shared tensor or module is set by the walk order, so
        # these rules break with it:
        "module.dedup.walks",
        "module.dedup.state-dict",
        "named_parameters.shared-first-name",
        "parameters.shared-once",
        "named_buffers.remove-duplicate",
        "named_children.duplicate-once",
        "named_modules.first-path-wins",
        "named_modules.remove-duplicate-false",
        "named_modules.recurse-false-once",  # its direct children come back in order too
        "named_parameters.remove-duplicate-false",
        "named_modules.every-depth",  # it checks the depth-first order as well
    },
    "test_walks",
    "test_state_dict",
    "test_edges",
)
class WalkOrderReversed:
    """Children are visited in reverse registration order, by every walk built on the tree."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "_modules", _NewestFirst(self._modules))  # type: ignore[has-type]  # the fault


class _NewestFirst(dict[str, Any]):
    """A child registry whose ``items()`` run from the last registration to the first."""

    def items(self) -> Any:
        return reversed(list(super().items()))


@mutant(
    "dedup-off",
    {
        *SHARED_CHILD_TENSOR_WALKS,
        "buffers.recurse-matrix",
        "parameters.recurse-matrix",
        "module.dedup.walks",
        "named_parameters.shared-first-name",
        "parameters.shared-once",
        "named_buffers.remove-duplicate",
        "module.dedup.state-dict",
    },
    "test_walks",
    "test_state_dict",
    "test_edges",
)
class DedupOff:
    """A tensor reachable under several names is listed under every one of them."""

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Any]]:
        yield from super().named_parameters(prefix, recurse, remove_duplicate=False)  # type: ignore[misc]

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Any]]:
        yield from super().named_buffers(prefix, recurse, remove_duplicate=False)  # type: ignore[misc]

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool, seen: set[int]) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars, set())  # type: ignore[misc]


@mutant(
    "remove-duplicate-ignored",
    {
        *SHARED_CHILD_TENSOR_WALKS,
        "named_modules.keyword-matrix",
        "named_modules.recurse",
        "named_parameters.remove-duplicate-false",
        "named_buffers.remove-duplicate",
        "named_modules.remove-duplicate-false",
        "named_modules.recurse-false-once",
    },
    "test_walks",
    "test_edges",
)
class RemoveDuplicateIgnored:
    """``remove_duplicate=False`` is ignored: a shared tensor or module is always listed once."""

    def named_modules(
        self, memo: set[Any] | None = None, prefix: str = "", remove_duplicate: bool = True, *, recurse: bool = True
    ) -> Iterator[tuple[str, Any]]:
        yield from super().named_modules(memo, prefix, True, recurse=recurse)  # type: ignore[misc]

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Any]]:
        yield from super().named_parameters(prefix, recurse, True)  # type: ignore[misc]

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Any]]:
        yield from super().named_buffers(prefix, recurse, True)  # type: ignore[misc]


# -- hooks -----------------------------------------------------------------------------------------
def _flag_dropped(flag: str, *registrations: str) -> type:
    """A fault base whose hook ``registrations`` (method names) drop the ``flag`` keyword before
    packrt sees it; every other flag passes through."""

    class FlagDropped:
        pass

    def dropping(registration: str) -> Callable[..., Any]:
        def register(self: Any, hook: Callable[..., Any], **flags: bool) -> Any:
            flags.pop(flag, None)  # the fault
            return getattr(super(FlagDropped, self), registration)(hook, **flags)

        return register

    for registration in registrations:
        setattr(FlagDropped, registration, dropping(registration))
    return FlagDropped


@mutant(
    "always-call-ignored",
    {
        "register_forward_hook.keyword-matrix",
        "register_forward_hook.always-call",
        "register_forward_hook.always-call-order",
        "register_forward_hook.always-call-with-kwargs",
    },
    "test_hooks",
    "test_edges",
)
class HooksSkippedOnRaise(_flag_dropped("always_call", "register_forward_hook")):
    """``always_call=True`` is dropped: no forward hook runs when forward raises."""


@mutant(
    "prepend-ignored",
    {
        "register_forward_hook.keyword-matrix",
        "register_forward_pre_hook.keyword-matrix",
        "register_forward_hook.prepend",
        "register_forward_hook.registration-order",
        "register_forward_pre_hook.prepend",
        "register_forward_pre_hook.registration-order",
        "register_forward_hook.always-call-order",  # a prepended always_call hook runs first there too
    },
    "test_hooks",
    "test_edges",
)
class PrependIgnored(_flag_dropped("prepend", "register_forward_pre_hook", "register_forward_hook")):
    """``prepend=True`` is dropped: every hook joins the end of its registry."""


@mutant(
    "pre-hook-one-tuple-missing",
    {"register_forward_pre_hook.falsy-value-replaces-args", "register_forward_pre_hook.single-value-wrapped"},
    "test_hooks",
    "test_edges",
)
class PreHookResultNotWrapped:
    """A pre-hook's non-tuple result is used as the argument tuple itself (``forward(*result)``)."""

    def register_forward_pre_hook(
        self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False
    ) -> Any:
        if with_kwargs:
            return super().register_forward_pre_hook(hook, prepend=prepend, with_kwargs=True)  # type: ignore[misc]

        def unwrapped(module: Any, args: tuple[Any, ...]) -> Any:
            result = hook(module, args)
            # The faulty runtime star-unpacks whatever came back: a scalar raises, a list spreads.
            return result if result is None or isinstance(result, tuple) else tuple(result)

        return super().register_forward_pre_hook(unwrapped, prepend=prepend)  # type: ignore[misc]


# -- registration and placement --------------------------------------------------------------------
@mutant("buffer-flag-ignored", {"register_buffer.buffer-flag-wins"}, "test_registration", "test_edges")
class BufferFlagIgnored:
    """register_buffer's ``persistent`` argument decides even when handed a Buffer with its own flag."""

    _non_persistent: set[str]

    def register_buffer(self, name: str, tensor: Any, persistent: bool = True) -> None:
        super().register_buffer(name, tensor, persistent)  # type: ignore[misc]
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)


@mutant(
    "to-casts-integer-buffers",
    {
        "to.only-floating",
        "to.dtype-name",
        "to.keywords",
        "half.casts-floating",
        "float.casts-floating",
        "double.casts-floating",
        "bfloat16.casts-floating",
        # Every form of to() is checked for the whole cast rule (floating tensors cast, integer ones kept):
        "to.dtype-object",
        "to.datatype-value",
        "to.device-and-dtype",
        "to.tensor-form",
        "to.returns-self",
    },
    "test_placement",
    "test_edges",
)
class IntegerBuffersCast:
    """A dtype cast reaches integer and bool tensors too, not only floating-point ones."""

    def _check_placement(self, path: str, device: Any, dtype: Any) -> None:
        # The per-module hook every placement calls before it casts the floating-point tensors.
        super()._check_placement(path, device, dtype)  # type: ignore[misc]
        if dtype is not None:
            own = [*self.named_parameters(recurse=False), *self.named_buffers(recurse=False)]  # type: ignore[attr-defined]
            for _, t in own:
                if not t.dtype.is_floating_point and t.has_storage:
                    t._rebind(t._placed(t.device, dtype), t.device)  # the fault


# -- loading ---------------------------------------------------------------------------------------
@mutant(
    "strict-ignored",
    {
        "load_state_dict.keyword-matrix",
        "load_state_dict.strict.raises",
        "load_state_dict.strict.runtime-error-lists-keys",
        "load_state_dict.missing-extra-state",  # strict=True must refuse missing extra state too
    },
    "test_load",
    "test_edges",
)
class StrictIgnored:
    """``strict=True`` is treated as ``strict=False``: key mismatches come back, never raise."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, *args: Any, **kwargs: Any) -> Any:
        return super().load_state_dict(state_dict, False, *args, **kwargs)  # type: ignore[misc]  # the fault


@mutant(
    "non-transactional-load",
    {"load_state_dict.keyword-matrix", "load_state_dict.failed-load-leaves-module-unchanged"},
    "test_load",
    "test_edges",
)
class NonTransactionalLoad:
    """A copy load writes each key in turn before the whole checkpoint is checked, so a load that
    fails on a later key has already changed the tensors of the earlier ones."""

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False, **options: Any
    ) -> Any:
        if not assign:
            slots = dict(self.named_parameters(remove_duplicate=False))  # type: ignore[attr-defined]
            slots.update(self.named_buffers(remove_duplicate=False))  # type: ignore[attr-defined]
            for key, value in state_dict.items():
                target = slots.get(key)
                fits = target is not None and target.has_storage and value.has_storage
                if not fits or tuple(target.shape) != tuple(value.shape):
                    break  # the naive loop meets the bad key here; the real load below raises for it
                target.copy_(value)
        return super().load_state_dict(state_dict, strict, assign, **options)  # type: ignore[misc]


# -- several items of one kind: orders -----------------------------------------------------------
@mutant("own-buffers-reversed", {"state_dict.own-buffers-order"}, "test_state_dict", "test_load")
class OwnBuffersReversed:
    """state_dict lists a module's own persistent buffers from the last registered to the first."""

    _parameters: dict[str, Any]
    _buffers: dict[str, Any]

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool, seen: set[int]) -> None:
        own: dict[str, Any] = {}
        super()._save_to_state_dict(own, prefix, keep_vars, seen)  # type: ignore[misc]
        params = [k for k in own if k[len(prefix) :] in self._parameters]
        buffers = [k for k in own if k[len(prefix) :] in self._buffers]
        rest = [k for k in own if k not in params and k not in buffers]
        for key in [*params, *reversed(buffers), *rest]:  # the fault: buffers newest first
            destination[key] = own[key]


def _incompatible(result: Any, missing: list[str], unexpected: list[str]) -> Any:
    return type(result)(missing, unexpected)


@mutant("missing-keys-buffers-first", {"load_state_dict.missing-keys-order"}, "test_load")
class MissingKeysBuffersFirst:
    """missing_keys names the missing buffers before the missing parameters."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, *args: Any, **kwargs: Any) -> Any:
        result = super().load_state_dict(state_dict, strict, *args, **kwargs)  # type: ignore[misc]
        buffers = {n for n, _ in self.named_buffers()}  # type: ignore[attr-defined]
        first = [k for k in result.missing_keys if k in buffers] + [k for k in result.missing_keys if k not in buffers]
        return _incompatible(result, first, list(result.unexpected_keys))


@mutant(
    "missing-extra-state-unreported",
    {"load_state_dict.missing-extra-state"},
    "test_load",
    "test_state_dict",
)
class MissingExtraStateUnreported:
    """A missing extra-state key is neither reported nor refused: only tensor keys count."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, *args: Any, **kwargs: Any) -> Any:
        result = super().load_state_dict(state_dict, False, *args, **kwargs)  # type: ignore[misc]
        missing = [k for k in result.missing_keys if not k.endswith("_extra_state")]  # the fault
        if strict and (missing or result.unexpected_keys):
            raise RuntimeError(f"Missing key(s) in state_dict: {missing}; unexpected: {result.unexpected_keys}")
        return _incompatible(result, missing, list(result.unexpected_keys))


@mutant("always-call-reversed", {"register_forward_hook.always-call-order"}, "test_hooks")
class AlwaysCallReversed:
    """When forward raises, the always_call hooks run from the last to the first."""

    _forward_pre_hooks: Any
    _forward_hooks: Any

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return super().forward(*args, **kwargs)  # type: ignore[misc]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        pre, post = self._forward_pre_hooks.entries, self._forward_hooks.entries
        if not (pre or post):
            return self.forward(*args, **kwargs)
        try:
            for e in pre:
                got = e.hook(self, args, kwargs) if e.with_kwargs else e.hook(self, args)
                if got is not None and e.with_kwargs:
                    args, kwargs = got
                elif got is not None:
                    args = got if isinstance(got, tuple) else (got,)
            out = self.forward(*args, **kwargs)
            for e in post:
                got = e.hook(self, args, kwargs, out) if e.with_kwargs else e.hook(self, args, out)
                out = out if got is None else got
            return out
        except Exception:
            for e in reversed([e for e in post if e.always_call]):  # the fault: reversed
                _ = e.hook(self, args, kwargs, None) if e.with_kwargs else e.hook(self, args, None)
            raise


class _Handle:
    """A handle whose ``remove`` runs ``action`` (a faulty removal)."""

    def __init__(self, action: Callable[[], None]) -> None:
        self._action = action

    def remove(self) -> None:
        self._action()

    def __enter__(self) -> _Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


class _FaultyRemoval:
    """Both registries hand out handles whose removal goes through :meth:`_faulty_remove`."""

    def _faulty_remove(self, registry: Any, handle: Any) -> None:
        raise NotImplementedError

    def register_forward_pre_hook(self, hook: Callable[..., Any], **flags: bool) -> Any:
        handle = super().register_forward_pre_hook(hook, **flags)  # type: ignore[misc]
        registry = self._forward_pre_hooks  # type: ignore[attr-defined]
        return _Handle(lambda: self._faulty_remove(registry, handle))

    def register_forward_hook(self, hook: Callable[..., Any], **flags: bool) -> Any:
        handle = super().register_forward_hook(hook, **flags)  # type: ignore[misc]
        registry = self._forward_hooks  # type: ignore[attr-defined]
        return _Handle(lambda: self._faulty_remove(registry, handle))


@mutant(
    "remove-clears-registry",
    {
        "register_forward_hook.same-function-twice",
        "register_forward_hook.remove-own-only",
        "register_forward_hook.remove-keeps-the-rest",
        "register_forward_pre_hook.remove-own-only",
        "register_forward_pre_hook.remove-keeps-the-rest",
    },
    "test_hooks",
)
class RemoveClearsRegistry(_FaultyRemoval):
    """handle.remove() takes out every hook of its registry, not only its own."""

    def _faulty_remove(self, registry: Any, handle: Any) -> None:
        handle.remove()
        registry.clear()  # the fault


@mutant(
    "removal-reorders-rest",
    {"register_forward_hook.remove-keeps-the-rest", "register_forward_pre_hook.remove-keeps-the-rest"},
    "test_hooks",
)
class RemovalReordersRest(_FaultyRemoval):
    """handle.remove() takes out its own hook but leaves the others in reverse order."""

    def _faulty_remove(self, registry: Any, handle: Any) -> None:
        handle.remove()
        registry._entries = tuple(reversed(registry._entries))  # the fault


@mutant("kwargs-dropped-on-raise", {"register_forward_hook.always-call-with-kwargs"}, "test_hooks")
class KwargsDroppedOnRaise:
    """A with_kwargs always_call hook gets an empty keyword dict when forward raises."""

    def register_forward_hook(self, hook: Callable[..., Any], **flags: bool) -> Any:
        if flags.get("with_kwargs") and flags.get("always_call"):
            inner = hook

            def hook(module: Any, args: Any, kwargs: Any, out: Any) -> Any:
                return inner(module, args, kwargs if out is not None else {}, out)  # the fault

        return super().register_forward_hook(hook, **flags)  # type: ignore[misc]


# -- re-registration ---------------------------------------------------------------------------
@mutant("none-attribute-hides-child", {"module.register.child-over-none-attribute"}, "test_registration")
class NoneAttributeHidesChild:
    """A Module assigned over a plain attribute is filed as a child, but the plain attribute stays."""

    _modules: dict[str, Any]

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__ and hasattr(value, "named_modules") and not name.startswith("_"):
            self._modules[name] = value  # the fault: the instance attribute still wins on reads
            return
        super().__setattr__(name, value)


@mutant(
    "buffer-under-plain-attribute",
    {"register_buffer.over-plain-attribute", "module.register.buffer-over-plain-attribute"},
    "test_registration",
)
class BufferUnderPlainAttribute:
    """register_buffer files a buffer under a name a plain attribute holds, which then hides it."""

    _buffers: dict[str, Any]

    def register_buffer(self, name: str, tensor: Any, persistent: bool = True) -> None:
        if name in self.__dict__ and not name.startswith("_"):
            self._buffers[name] = tensor  # the fault: no refusal, and m.<name> still reads the attribute
            return
        super().register_buffer(name, tensor, persistent)  # type: ignore[misc]


# -- a shared child ------------------------------------------------------------------------------
@mutant(
    "shared-child-second-name-ignored",
    {"load_state_dict.shared-child-second-name"},
    "test_load",
)
class SharedChildSecondNameIgnored:
    """A child held under two names is loaded under its first name only: keys under the second are unexpected."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, *args: Any, **kwargs: Any) -> Any:
        first = {m for _, m in self.named_modules()}  # type: ignore[attr-defined]
        seen: set[int] = set()
        second: list[str] = []
        for path, module in self.named_modules(remove_duplicate=False):  # type: ignore[attr-defined]
            if id(module) in seen and module in first and path:
                second.append(path + ".")
            seen.add(id(module))
        dropped = [k for k in state_dict if any(k.startswith(p) for p in second)]
        kept = {k: v for k, v in state_dict.items() if k not in dropped}
        result = super().load_state_dict(kept, False, *args, **kwargs)  # type: ignore[misc]
        unexpected = [*result.unexpected_keys, *dropped]
        if strict and (result.missing_keys or unexpected):
            raise RuntimeError(f"Missing key(s): {result.missing_keys}; unexpected key(s): {unexpected}")
        return _incompatible(result, list(result.missing_keys), unexpected)


# -- pack=True -----------------------------------------------------------------------------------
def _own_keys(module: Any, path: str, keys: Iterable[str]) -> bool:
    prefix = path + "." if path else ""
    return any(k.startswith(prefix) and "." not in k[len(prefix) :] for k in keys)


@mutant("pack-only-named-layers", {"load_state_dict.pack.whole-tree-strict-false"}, "test_packing")
class PackOnlyNamedLayers:
    """pack=True packs only the layers whose keys the checkpoint carries."""

    def load_state_dict(self, state_dict: Mapping[str, Any], *args: Any, pack: bool = False, **kwargs: Any) -> Any:
        result = super().load_state_dict(state_dict, *args, pack=False, **kwargs)  # type: ignore[misc]
        if pack:
            for path, module in self.named_modules():  # type: ignore[attr-defined]
                if _own_keys(module, path, state_dict):
                    module._pack_now()  # the fault: the other layers are left unpacked
        return result


@mutant(
    "pack-skipped-on-dtype-change",
    {"load_state_dict.pack.copy-converts-dtype", "load_state_dict.pack.assign-half"},
    "test_packing",
)
class PackSkippedOnDtypeChange:
    """pack=True is dropped when a checkpoint value's dtype differs from its slot's."""

    def load_state_dict(self, state_dict: Mapping[str, Any], *args: Any, pack: bool = False, **kwargs: Any) -> Any:
        slots = dict(self.named_parameters())  # type: ignore[attr-defined]
        changes = any(k in slots and v.dtype != slots[k].dtype for k, v in state_dict.items())
        return super().load_state_dict(state_dict, *args, pack=pack and not changes, **kwargs)  # type: ignore[misc]


# -- residency across loads ----------------------------------------------------------------------
def _served(module: Any) -> Any:
    return module.__dict__.get("_served")


@mutant(
    "stale-pack-survives-reload",
    {"load_state_dict.residency.reload-drops-pack", "load_state_dict.residency.partial-reload-restores-raw"},
    "test_packing",
)
class StalePackSurvivesReload:
    """A reload under borrowed or per_call leaves the pack an earlier forward built in place."""

    def load_state_dict(self, state_dict: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        before = {m: _served(m) for m in self.modules()}  # type: ignore[attr-defined]
        result = super().load_state_dict(state_dict, *args, **kwargs)  # type: ignore[misc]
        if kwargs.get("weight_residency") in ("borrowed", "per_call"):
            for module, served in before.items():
                if served is not None:
                    module.__dict__["_served"] = served  # the fault
        return result


@mutant(
    "pack-true-ignores-borrowed",
    {
        "load_state_dict.pack.borrowed-live-handle",
        "load_state_dict.pack.nothing-to-pack-refuses-nothing",
        "load_state_dict.residency.auto-no-room-borrows",  # auto without room is borrowed too
    },
    "test_packing",
)
class PackTrueIgnoresBorrowed:
    """pack=True builds a pack (and drops the raw weights) whatever the residency says."""

    def load_state_dict(self, state_dict: Mapping[str, Any], *args: Any, pack: bool = False, **kwargs: Any) -> Any:
        result = super().load_state_dict(state_dict, *args, pack=pack, **kwargs)  # type: ignore[misc]
        if pack:
            for module in self.modules():  # type: ignore[attr-defined]
                if hasattr(module, "_current_pack"):
                    module._current_pack()  # the fault
        return result


@mutant(
    "packed-keeps-raw",
    {"load_state_dict.residency.packed-drops-raw", "load_state_dict.residency.packed-single-copy"},
    "test_packing",
)
class PackedKeepsRaw:
    """A pack is installed but the raw weight storage is never released."""

    def _install(self, pack: Any, stamp: Any = None) -> Any:
        self.__dict__["_served"] = (pack, stamp if stamp is not None else self._stamp())  # type: ignore[attr-defined]
        self.__dict__["pack_count"] = self.__dict__.get("pack_count", 0) + 1
        return pack  # the fault: no parameter drops its raw storage


@mutant("packed-never-packs", {"load_state_dict.residency.packed-drops-raw"}, "test_packing")
class PackedNeverPacks:
    """weight_residency='packed' serves every call from the raw weights and never packs."""

    def load_state_dict(self, state_dict: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("weight_residency") == "packed":
            kwargs["weight_residency"] = "per_call"  # the fault
        return super().load_state_dict(state_dict, *args, **kwargs)  # type: ignore[misc]


@mutant("layer-device-from-bias", {"load_state_dict.residency.layer-with-empty-slot"}, "test_packing")
class LayerDeviceFromBias:
    """A layer reads its device off its last declared slot (the bias), so one built without a bias
    cannot serve under any residency."""

    def _device(self) -> Any:
        return self._parameters[self.declared[-1]].device  # type: ignore[attr-defined]  # the fault


# -- extra_repr ------------------------------------------------------------------------------------
@mutant("linear-repr-needs-bias", {"extra_repr.linear-geometry-no-bias"}, "test_tree_ops")
class LinearReprNeedsBias:
    """Linear's extra_repr reads its geometry off the bias, so a layer without one cannot print it."""

    def extra_repr(self) -> str:
        if "in_features" in self.__dict__:
            weight, bias = self.weight, self.bias  # type: ignore[attr-defined]
            return f"in_features={weight.shape[1]}, out_features={bias.shape[0]}, bias=True"  # the fault
        text: str = super().extra_repr()  # type: ignore[misc]
        return text


# -- revisions -------------------------------------------------------------------------------------
class RevisionSwitchIgnored(Mutant):
    """The adapter claims the revision but never switches packrt: revision 2 rules stay in force."""

    fault = "revision-switch-ignored"
    breaks = frozenset({"state_dict.drops-packed-entries"})
    revision_under_test = 1
    suite_files = ("test_packing",)

    def set_revision(self, revision: int) -> None:
        if revision not in self.revisions:
            raise ValueError(f"mutant adapter: revision {revision} is not one of {sorted(self.revisions)}")
        self.revision = revision  # the fault: packrt.contract_revision(revision) is never called


# -- the edges a fresh mutation campaign found unguarded (issue 27) ----------------------------------
@mutant(
    "register-parameter-name-unchecked",
    {"register_parameter.existing-name-refused"},
    "test_registration",
)
class RegisterParameterNameUnchecked:
    """register_parameter files over a plain attribute, a buffer or a child instead of refusing."""

    def register_parameter(self, name: str, param: Any) -> None:
        self._parameters[name] = param  # type: ignore[attr-defined]


@mutant(
    "add-module-name-unchecked",
    {"add_module.existing-name-refused", "add_module.name-is-one-segment"},
    "test_registration",
)
class AddModuleNameUnchecked:
    """add_module files a child under any name: over a plain attribute, a parameter or a buffer, and
    under an empty or dotted name."""

    def add_module(self, name: str, module: Any) -> None:
        self._modules[name] = module  # type: ignore[attr-defined]


@mutant("buffer-persistence-sticks", {"register_buffer.re-registration-sets-persistence"}, "test_registration")
class BufferPersistenceSticks:
    """Registering a buffer again never changes whether it is persistent: the first call's flag stays."""

    def register_buffer(self, name: str, tensor: Any, persistent: bool = True) -> None:
        first = name not in self._buffers  # type: ignore[attr-defined]
        hidden = name in self._non_persistent  # type: ignore[attr-defined]
        super().register_buffer(name, tensor, persistent)  # type: ignore[misc]
        if not first:
            (self._non_persistent.add if hidden else self._non_persistent.discard)(name)  # type: ignore[attr-defined]


@mutant(
    "tensor-walks-dedup-shared-children",
    SHARED_CHILD_TENSOR_WALKS,
    "test_walks",
    "test_edges",
)
class TensorWalksDedupSharedChildren:
    """With remove_duplicate=False the tensor walks still visit a child filed twice only once
    (its tensors appear under the first path alone)."""

    def _named_tensors(self, registry: str, prefix: str, recurse: bool, remove_duplicate: bool) -> Any:
        if not (recurse and not remove_duplicate):
            yield from super()._named_tensors(registry, prefix, recurse, remove_duplicate)  # type: ignore[misc]
            return
        for module_prefix, module in self.named_modules(prefix=prefix):  # type: ignore[attr-defined]
            for name, tensor in getattr(module, registry).items():
                if tensor is not None:
                    yield (f"{module_prefix}.{name}" if module_prefix else name), tensor


@mutant(
    "copy-load-skips-integers",
    {"load_state_dict.residency-matrix", "load_state_dict.copy.integer-into-float", "load_state_dict.keyword-matrix"},
    "test_load",
    "test_edges",
)
class CopyLoadSkipsIntegers:
    """A copy load leaves a floating-point weight as it was when the checkpoint's value is an integer."""

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False, **options: Any
    ) -> Any:
        if assign:
            return super().load_state_dict(state_dict, strict, assign, **options)  # type: ignore[misc]
        held = self.state_dict()  # type: ignore[attr-defined]
        kept = {k: held[k] if k in held and "int" in str(getattr(v, "dtype", "")) else v for k, v in state_dict.items()}
        return super().load_state_dict(kept, strict, assign, **options)  # type: ignore[misc]


@mutant(
    "prefix-dropped-without-recursion",
    {"named_parameters.keyword-matrix", "named_buffers.keyword-matrix"},
    "test_edges",
)
class PrefixDroppedWithoutRecursion:
    """named_parameters / named_buffers forget the prefix when recurse=False."""

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Any]]:
        yield from super().named_parameters(prefix if recurse else "", recurse, remove_duplicate)  # type: ignore[misc]

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Any]]:
        yield from super().named_buffers(prefix if recurse else "", recurse, remove_duplicate)  # type: ignore[misc]


@mutant(
    "falsy-hook-value-ignored",
    {"register_forward_hook.falsy-value-replaces-output"},
    "test_hooks",
)
class FalsyHookValueIgnored:
    """A forward hook's return value replaces the output only when it is truthy."""

    def register_forward_hook(self, hook: Callable[..., Any], **flags: bool) -> Any:
        def truthy_only(*args: Any) -> Any:
            result = hook(*args)
            return result if result else None

        return super().register_forward_hook(truthy_only, **flags)  # type: ignore[misc]


MUTANTS: tuple[type[Mutant], ...] = (
    WalkOrderReversed,
    DedupOff,
    RemoveDuplicateIgnored,
    HooksSkippedOnRaise,
    PrependIgnored,
    PreHookResultNotWrapped,
    BufferFlagIgnored,
    IntegerBuffersCast,
    StrictIgnored,
    NonTransactionalLoad,
    RevisionSwitchIgnored,
    OwnBuffersReversed,
    MissingKeysBuffersFirst,
    MissingExtraStateUnreported,
    AlwaysCallReversed,
    RemoveClearsRegistry,
    RemovalReordersRest,
    KwargsDroppedOnRaise,
    NoneAttributeHidesChild,
    BufferUnderPlainAttribute,
    SharedChildSecondNameIgnored,
    PackOnlyNamedLayers,
    PackSkippedOnDtypeChange,
    StalePackSurvivesReload,
    PackTrueIgnoresBorrowed,
    PackedKeepsRaw,
    PackedNeverPacks,
    LayerDeviceFromBias,
    LinearReprNeedsBias,
    RegisterParameterNameUnchecked,
    AddModuleNameUnchecked,
    BufferPersistenceSticks,
    TensorWalksDedupSharedChildren,
    CopyLoadSkipsIntegers,
    PrefixDroppedWithoutRecursion,
    FalsyHookValueIgnored,
)
"""Every mutant, in the order the suite's own tests run them."""
