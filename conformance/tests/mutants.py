"""Mutant adapters: packrt with ONE contract rule broken on purpose, to prove the suite notices.

Each mutant is the real packrt adapter whose ``nn`` namespace hands out subclasses of packrt's
``Module`` / ``Linear`` / ``Sequential`` with a fault mixed in (packrt itself is never touched), or
whose adapter method lies. ``breaks`` names the clauses a run against the mutant must fail;
``revision`` is the contract revision the fault shows under; ``suite_files`` is the part of the
suite worth running for it (the rest would only cost time). Load one with
``--impl mutants:WalkOrderReversed`` with this directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator, Mapping
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


# -- walks -----------------------------------------------------------------------------------------
class _ReversedChildren:
    """Children are visited in reverse registration order, by every walk built on the tree."""

    _modules: dict[str, Any]

    def named_modules(
        self, memo: set[Any] | None = None, prefix: str = "", remove_duplicate: bool = True, *, recurse: bool = True
    ) -> Iterator[tuple[str, Any]]:
        if memo is None:
            memo = set()
        if remove_duplicate:
            if self in memo:
                return
            memo.add(self)
        yield prefix, self
        for name, child in reversed(list(self._modules.items())):  # the fault
            if child is None:
                continue
            path = f"{prefix}.{name}" if prefix else name
            if recurse:
                yield from child.named_modules(memo, path, remove_duplicate)
            elif not remove_duplicate or child not in memo:
                memo.add(child)
                yield path, child

    def named_children(self) -> Iterator[tuple[str, Any]]:
        seen: set[Any] = set()
        for name, child in reversed(list(self._modules.items())):  # the fault
            if child is not None and child not in seen:
                seen.add(child)
                yield name, child


class WalkOrderReversed(Mutant):
    fault = "walk-order-reversed"
    mixin = _ReversedChildren
    breaks = frozenset(
        {
            "module.order.walks",
            "named_parameters.order",
            "named_buffers.order",
            "named_children.order",
            "children.direct-in-order",
            "named_modules.self-first",
            "module.order.state-dict",
            "state_dict.flat-dotted-keys",
        }
    )
    suite_files = ("test_walks", "test_state_dict")


class _NoDedup:
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


class DedupOff(Mutant):
    fault = "dedup-off"
    mixin = _NoDedup
    breaks = frozenset(
        {
            "module.dedup.walks",
            "named_parameters.shared-first-name",
            "parameters.shared-once",
            "named_buffers.remove-duplicate",
            "module.dedup.state-dict",
        }
    )
    suite_files = ("test_walks", "test_state_dict")


class _AlwaysDedup:
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


class RemoveDuplicateIgnored(Mutant):
    fault = "remove-duplicate-ignored"
    mixin = _AlwaysDedup
    breaks = frozenset(
        {
            "named_parameters.remove-duplicate-false",
            "named_buffers.remove-duplicate",
            "named_modules.remove-duplicate-false",
        }
    )
    suite_files = ("test_walks",)


# -- hooks -----------------------------------------------------------------------------------------
class _NoAlwaysCall:
    """``always_call=True`` is dropped: no forward hook runs when forward raises."""

    def register_forward_hook(
        self,
        hook: Callable[..., Any],
        *,
        prepend: bool = False,
        with_kwargs: bool = False,
        always_call: bool = False,
    ) -> Any:
        return super().register_forward_hook(hook, prepend=prepend, with_kwargs=with_kwargs)  # type: ignore[misc]


class HooksSkippedOnRaise(Mutant):
    fault = "always-call-ignored"
    mixin = _NoAlwaysCall
    breaks = frozenset({"register_forward_hook.always-call"})
    suite_files = ("test_hooks",)


class _NoPrepend:
    """``prepend=True`` is dropped: every hook joins the end of its registry."""

    def register_forward_pre_hook(
        self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False
    ) -> Any:
        return super().register_forward_pre_hook(hook, with_kwargs=with_kwargs)  # type: ignore[misc]

    def register_forward_hook(
        self,
        hook: Callable[..., Any],
        *,
        prepend: bool = False,
        with_kwargs: bool = False,
        always_call: bool = False,
    ) -> Any:
        return super().register_forward_hook(  # type: ignore[misc]
            hook, with_kwargs=with_kwargs, always_call=always_call
        )


class PrependIgnored(Mutant):
    fault = "prepend-ignored"
    mixin = _NoPrepend
    breaks = frozenset(
        {
            "register_forward_hook.prepend",
            "register_forward_hook.registration-order",
            "register_forward_pre_hook.prepend",
            "register_forward_pre_hook.registration-order",
        }
    )
    suite_files = ("test_hooks",)


class _UnwrappedPreHookResult:
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


class PreHookResultNotWrapped(Mutant):
    fault = "pre-hook-one-tuple-missing"
    mixin = _UnwrappedPreHookResult
    breaks = frozenset({"register_forward_pre_hook.single-value-wrapped"})
    suite_files = ("test_hooks",)


# -- registration and placement --------------------------------------------------------------------
class _BufferFlagIgnored:
    """register_buffer's ``persistent`` argument decides even when handed a Buffer with its own flag."""

    _non_persistent: set[str]

    def register_buffer(self, name: str, tensor: Any, persistent: bool = True) -> None:
        super().register_buffer(name, tensor, persistent)  # type: ignore[misc]
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)


class BufferFlagIgnored(Mutant):
    fault = "buffer-flag-ignored"
    mixin = _BufferFlagIgnored
    breaks = frozenset({"register_buffer.buffer-flag-wins"})
    suite_files = ("test_registration",)


class _CastsIntegers:
    """A dtype cast reaches integer and bool tensors too, not only floating-point ones."""

    def _place(self, device: Any, dtype_: Any) -> Any:
        out = super()._place(device, dtype_)  # type: ignore[misc]
        if dtype_ is not None:
            for t in self._tensors():  # type: ignore[attr-defined]
                if not t.dtype.is_floating_point and t.has_storage:
                    t._rebind(t._placed(t.device, dtype_), t.device)
        return out


class IntegerBuffersCast(Mutant):
    fault = "to-casts-integer-buffers"
    mixin = _CastsIntegers
    breaks = frozenset(
        {
            "to.only-floating",
            "to.dtype-name",
            "to.keywords",
            "half.casts-floating",
            "float.casts-floating",
            "double.casts-floating",
            "bfloat16.casts-floating",
        }
    )
    suite_files = ("test_placement",)


# -- loading ---------------------------------------------------------------------------------------
class _StrictIgnored:
    """``strict=True`` is treated as ``strict=False``: key mismatches come back, never raise."""

    def load_state_dict(
        self,
        state_dict: Mapping[str, Any],
        strict: bool = True,
        assign: bool = False,
        *,
        pack: bool = False,
        weight_residency: str | None = None,
    ) -> Any:
        return super().load_state_dict(  # type: ignore[misc]
            state_dict, False, assign, pack=pack, weight_residency=weight_residency
        )


class StrictIgnored(Mutant):
    fault = "strict-ignored"
    mixin = _StrictIgnored
    breaks = frozenset({"load_state_dict.strict.raises", "load_state_dict.strict.runtime-error-lists-keys"})
    suite_files = ("test_load",)


class _WritesAsItGoes:
    """A copy load writes each key in turn before the whole checkpoint is checked, so a load that
    fails on a later key has already changed the tensors of the earlier ones."""

    def load_state_dict(
        self,
        state_dict: Mapping[str, Any],
        strict: bool = True,
        assign: bool = False,
        *,
        pack: bool = False,
        weight_residency: str | None = None,
    ) -> Any:
        if not assign:
            slots = dict(self.named_parameters(remove_duplicate=False))  # type: ignore[attr-defined]
            slots.update(self.named_buffers(remove_duplicate=False))  # type: ignore[attr-defined]
            for key, value in state_dict.items():
                target = slots.get(key)
                if target is None or not target.has_storage or tuple(target.shape) != tuple(value.shape):
                    break  # the naive loop meets the bad key here; the real load below raises for it
                target.copy_(value)
        return super().load_state_dict(  # type: ignore[misc]
            state_dict, strict, assign, pack=pack, weight_residency=weight_residency
        )


class NonTransactionalLoad(Mutant):
    fault = "non-transactional-load"
    mixin = _WritesAsItGoes
    breaks = frozenset({"load_state_dict.failed-load-leaves-module-unchanged"})
    suite_files = ("test_load",)


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
