"""Per-sentence mutants (issue 45): packrt with one sentence of a contract page broken, at its edges.

The same design as ``mutants.py`` (whose :class:`~mutants.Mutant` and :func:`~mutants.mutant` these
reuse): each fault is mixed into the module classes packrt's adapter hands out, packrt itself is never
touched, and ``breaks`` names the clauses (the sentence's atomic rules) a run must fail. The faults here
are the ones hidden adapters got past the suite with: several hooks with prepends mixed in, a
replacement that moves a child, intermediate path segments created, a loose parameter's storage swapped
under a residency, hooks skipped on a nested call, ``register_module`` refusing ``None``, a key of a
non-persistent buffer loaded, a ``Mapping`` that is not a dict refused, a residency reaching layers the
load did not bind, ``extra_repr`` dropped beside children, ``to_empty(recurse=False)`` reaching a child's
buffers, a bias given after a run ignored, and a child shared by two parents visited twice.
Load one with ``--impl mutants_sentences:<Name>`` with this directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from mutants import Mutant, mutant

# -- hooks -----------------------------------------------------------------------------------------


@mutant(
    "prepended-hooks-in-registration-order",
    {"register_forward_hook.prepend", "register_forward_pre_hook.prepend"},
    "test_hooks",
    "test_edges",
)
class PrependedInRegistrationOrder:
    """A prepended hook goes before the plain ones but after the hooks prepended earlier (with one
    prepend no run can tell it from the rule)."""

    def register_forward_pre_hook(self, hook: Callable[..., Any], **flags: bool) -> Any:
        handle = super().register_forward_pre_hook(hook, **flags)  # type: ignore[misc]
        self._keep_prepends_in_order(self.__dict__["_forward_pre_hooks"], flags)
        return handle

    def register_forward_hook(self, hook: Callable[..., Any], **flags: bool) -> Any:
        handle = super().register_forward_hook(hook, **flags)  # type: ignore[misc]
        self._keep_prepends_in_order(self.__dict__["_forward_hooks"], flags)
        return handle

    def _keep_prepends_in_order(self, registry: Any, flags: Mapping[str, bool]) -> None:
        if not flags.get("prepend"):
            return
        prepended = self.__dict__.setdefault("_mutant_prepended", {}).setdefault(id(registry), set())
        prepended.add(registry.entries[0].key)
        front = sorted((e for e in registry.entries if e.key in prepended), key=lambda e: e.key)
        registry._entries = (*front, *(e for e in registry.entries if e.key not in prepended))  # the fault


_DEPTH = threading.local()


@mutant("nested-call-skips-hooks", {"forward.call-runs-hooks"}, "test_hooks")
class NestedCallSkipsHooks:
    """Hooks run only around the outermost call: a child called inside its parent's forward runs bare."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_DEPTH, "n", 0)
        _DEPTH.n = depth + 1
        try:
            if depth:
                return self.forward(*args, **kwargs)  # type: ignore[attr-defined]  # the fault
            return super().__call__(*args, **kwargs)  # type: ignore[misc]
        finally:
            _DEPTH.n = depth


# -- registration ----------------------------------------------------------------------------------
@mutant("set-submodule-moves-to-end", {"set_submodule.replaces"}, "test_tree_ops")
class SetSubmoduleMovesToEnd:
    """A replacement by set_submodule files the new module last among its siblings."""

    def set_submodule(self, target: str, module: Any, strict: bool = False) -> None:
        parent_path, _, name = target.rpartition(".")
        parent = self.get_submodule(parent_path)  # type: ignore[attr-defined]
        parent._modules.pop(name, None)  # the fault: the old place is given up
        super().set_submodule(target, module, strict)  # type: ignore[misc]


@mutant("set-submodule-creates-intermediates", {"set_submodule.default-creates-last"}, "test_tree_ops")
class SetSubmoduleCreatesIntermediates:
    """set_submodule creates every missing segment of the path, not only the last one."""

    def set_submodule(self, target: str, module: Any, strict: bool = False) -> None:
        owner = self
        for segment in target.split(".")[:-1]:
            if segment not in owner._modules:  # type: ignore[attr-defined]
                owner.add_module(segment, type(self)())  # type: ignore[attr-defined]  # the fault
            owner = owner._modules[segment]  # type: ignore[attr-defined]
        super().set_submodule(target, module, strict)  # type: ignore[misc]


@mutant("register-module-refuses-none", {"register_module.same-as-add-module"}, "test_registration")
class RegisterModuleRefusesNone:
    """register_module refuses the None that add_module files as an empty slot."""

    def register_module(self, name: str, module: Any) -> None:
        if module is None:
            raise TypeError(f"register_module({name!r}, None): a Module is expected")  # the fault
        super().register_module(name, module)  # type: ignore[misc]


# -- loading ---------------------------------------------------------------------------------------
@mutant(
    "non-persistent-key-loaded",
    {"register_buffer.non-persistent-key-unexpected"},
    "test_registration",
    "test_load",
)
class NonPersistentKeyLoaded:
    """A checkpoint key naming a non-persistent buffer is copied into it instead of being unexpected."""

    def load_state_dict(self, state_dict: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        hidden = {}
        for path, module in self.named_modules():  # type: ignore[attr-defined]
            for name in module._non_persistent:
                hidden[f"{path}.{name}" if path else name] = module._buffers[name]
        rest = {k: v for k, v in state_dict.items() if k not in hidden}
        for key in state_dict.keys() & hidden.keys():
            hidden[key].copy_(state_dict[key])  # the fault
        return super().load_state_dict(rest, *args, **kwargs)  # type: ignore[misc]


@mutant("load-refuses-non-dict", {"load_state_dict.any-mapping"}, "test_load")
class LoadRefusesNonDict:
    """load_state_dict refuses a Mapping that is not a dict."""

    def load_state_dict(self, state_dict: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        if not isinstance(state_dict, dict):
            raise TypeError(f"load_state_dict expects a dict, got {type(state_dict).__name__}")  # the fault
        return super().load_state_dict(state_dict, *args, **kwargs)  # type: ignore[misc]


def _is_layer(module: Any) -> bool:
    return hasattr(module, "set_weight_residency")


@mutant(
    "loose-parameter-restored-under-residency",
    {"load_state_dict.residency.plain-parameters-ignore"},
    "test_packing",
)
class LooseParameterRestored:
    """A copy load under a weight_residency gives each loose parameter new storage holding the values,
    instead of copying into the storage it has."""

    def load_state_dict(self, state_dict: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        result = super().load_state_dict(state_dict, *args, **kwargs)  # type: ignore[misc]
        if kwargs.get("weight_residency") is not None and not kwargs.get("assign"):
            for module in self.modules():  # type: ignore[attr-defined]
                if not _is_layer(module):
                    for p in module._parameters.values():
                        if p is not None and p.has_storage:
                            p._rebind(p._array().copy(), p.device)  # the fault
        return result


@mutant(
    "residency-reaches-unbound-layers",
    {"load_state_dict.residency.only-bound-layers"},
    "test_packing",
)
class ResidencyReachesUnboundLayers:
    """weight_residency is set on every layer of the tree, those this load bound nothing of included."""

    def load_state_dict(self, state_dict: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        result = super().load_state_dict(state_dict, *args, **kwargs)  # type: ignore[misc]
        residency = kwargs.get("weight_residency")
        if residency is not None:
            for module in self.modules():  # type: ignore[attr-defined]
                if _is_layer(module):
                    module.set_weight_residency(residency)  # the fault
        return result


# -- repr, placement, layers -----------------------------------------------------------------------
@mutant("extra-repr-dropped-beside-children", {"extra_repr.in-repr"}, "test_tree_ops")
class ExtraReprDroppedBesideChildren:
    """The repr of a module that has children leaves out its extra_repr line."""

    def _repr(self, seen: set[Any]) -> str:
        text: str = super()._repr(seen)  # type: ignore[misc]
        extra = self.extra_repr()  # type: ignore[attr-defined]
        if self._modules and extra:  # type: ignore[attr-defined]
            text = text.replace("\n  " + extra.split("\n")[0], "", 1)  # the fault
        return text


@mutant("to-empty-flat-reaches-child-buffers", {"to_empty.recurse-false"}, "test_placement")
class ToEmptyFlatReachesChildBuffers:
    """to_empty(recurse=False) re-stores the children's buffers as well as the module's own tensors."""

    def to_empty(self, *, device: Any, recurse: bool = True) -> Any:
        out = super().to_empty(device=device, recurse=recurse)  # type: ignore[misc]
        if not recurse:
            for child in self.children():  # type: ignore[attr-defined]
                for b in child.buffers():
                    if b.has_storage:
                        b._rebind(b._array().copy(), b.device)  # the fault
        return out


@mutant("bias-given-after-a-run-ignored", {"module.register.parameter-after-forward"}, "test_registration")
class BiasGivenAfterRunIgnored:
    """A Linear built without a bias and run once keeps serving without one after a bias is assigned."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = super().forward(*args, **kwargs)  # type: ignore[misc]
        if "in_features" in self.__dict__:
            ran_bare = self.__dict__.setdefault("_mutant_ran_bare", self._parameters.get("bias") is None)  # type: ignore[attr-defined]
            bias = self._parameters.get("bias")  # type: ignore[attr-defined]
            if ran_bare and bias is not None:
                out = out - bias  # the fault: the stale serving form had no bias
        return out


# -- a child shared by two parents -----------------------------------------------------------------
@mutant("apply-per-parent", {"apply.shared-child-once"}, "test_tree_ops")
class ApplyPerParent:
    """apply recurses through each parent's children, so a child two parents hold is visited twice."""

    def apply(self, fn: Callable[[Any], None]) -> Any:
        for child in self.children():  # type: ignore[attr-defined]
            child.apply(fn)  # the fault: no memory across parents
        fn(self)
        return self


@mutant("repr-per-parent", {"module.dedup.repr"}, "test_tree_ops")
class ReprPerParent:
    """The repr forgets what it printed when it enters a child: a shared child prints under every name."""

    def _repr(self, seen: set[Any]) -> str:
        text: str = super()._repr(set())  # type: ignore[misc]  # the fault
        return text


@mutant("modules-per-parent", {"modules.self-first-each-once"}, "test_walks")
class ModulesPerParent:
    """modules() recurses through each parent's children: a child two parents hold comes back twice."""

    def modules(self) -> Iterator[Any]:
        yield self
        for child in self.children():  # type: ignore[attr-defined]
            yield from child.modules()  # the fault


MUTANTS: tuple[type[Mutant], ...] = (
    PrependedInRegistrationOrder,
    NestedCallSkipsHooks,
    SetSubmoduleMovesToEnd,
    SetSubmoduleCreatesIntermediates,
    RegisterModuleRefusesNone,
    NonPersistentKeyLoaded,
    LoadRefusesNonDict,
    LooseParameterRestored,
    ResidencyReachesUnboundLayers,
    ExtraReprDroppedBesideChildren,
    ToEmptyFlatReachesChildBuffers,
    BiasGivenAfterRunIgnored,
    ApplyPerParent,
    ReprPerParent,
    ModulesPerParent,
)
"""The per-sentence mutants, in the order the suite's own tests run them."""
