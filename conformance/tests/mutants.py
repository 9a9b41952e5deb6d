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
@mutant(
    "walk-order-reversed",
    {
        "module.order.walks",
        "named_parameters.order",
        "named_buffers.order",
        "named_children.order",
        "children.direct-in-order",
        "named_modules.self-first",
        "module.order.state-dict",
        "state_dict.flat-dotted-keys",
    },
    "test_walks",
    "test_state_dict",
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
        "module.dedup.walks",
        "named_parameters.shared-first-name",
        "parameters.shared-once",
        "named_buffers.remove-duplicate",
        "module.dedup.state-dict",
    },
    "test_walks",
    "test_state_dict",
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
        "named_parameters.remove-duplicate-false",
        "named_buffers.remove-duplicate",
        "named_modules.remove-duplicate-false",
    },
    "test_walks",
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
@mutant("always-call-ignored", {"register_forward_hook.always-call"}, "test_hooks")
class HooksSkippedOnRaise:
    """``always_call=True`` is dropped: no forward hook runs when forward raises."""

    def register_forward_hook(self, hook: Callable[..., Any], **flags: bool) -> Any:
        flags.pop("always_call", None)  # the fault
        return super().register_forward_hook(hook, **flags)  # type: ignore[misc]


@mutant(
    "prepend-ignored",
    {
        "register_forward_hook.prepend",
        "register_forward_hook.registration-order",
        "register_forward_pre_hook.prepend",
        "register_forward_pre_hook.registration-order",
    },
    "test_hooks",
)
class PrependIgnored:
    """``prepend=True`` is dropped: every hook joins the end of its registry."""

    def register_forward_pre_hook(self, hook: Callable[..., Any], **flags: bool) -> Any:
        flags.pop("prepend", None)  # the fault
        return super().register_forward_pre_hook(hook, **flags)  # type: ignore[misc]

    def register_forward_hook(self, hook: Callable[..., Any], **flags: bool) -> Any:
        flags.pop("prepend", None)  # the fault
        return super().register_forward_hook(hook, **flags)  # type: ignore[misc]


@mutant("pre-hook-one-tuple-missing", {"register_forward_pre_hook.single-value-wrapped"}, "test_hooks")
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
@mutant("buffer-flag-ignored", {"register_buffer.buffer-flag-wins"}, "test_registration")
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
    },
    "test_placement",
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
    "strict-ignored", {"load_state_dict.strict.raises", "load_state_dict.strict.runtime-error-lists-keys"}, "test_load"
)
class StrictIgnored:
    """``strict=True`` is treated as ``strict=False``: key mismatches come back, never raise."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, *args: Any, **kwargs: Any) -> Any:
        return super().load_state_dict(state_dict, False, *args, **kwargs)  # type: ignore[misc]  # the fault


@mutant("non-transactional-load", {"load_state_dict.failed-load-leaves-module-unchanged"}, "test_load")
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
                if target is None or not target.has_storage or tuple(target.shape) != tuple(value.shape):
                    break  # the naive loop meets the bad key here; the real load below raises for it
                target.copy_(value)
        return super().load_state_dict(state_dict, strict, assign, **options)  # type: ignore[misc]


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
)
"""Every mutant, in the order the suite's own tests run them."""
