"""Per-sentence mutants taken off the backlog (issue 45): one plain fault per sentence, same design.

Each is packrt with one sentence of revision 2 broken through the module classes its adapter hands out
(see ``mutants.py``): a keyword ignored, a return value dropped, a kind check skipped, an order turned.
``mutation/sentences_without_mutant.txt`` lost a line for each clause they break. Load one with
``--impl mutants_backlog:<Name>`` with this directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from mutants import Mutant, mutant

# -- apply -----------------------------------------------------------------------------------------


@mutant("apply-returns-none", {"apply.returns-self"}, "test_tree_ops")
class ApplyReturnsNone:
    """apply visits the tree but returns None."""

    def apply(self, fn: Callable[[Any], None]) -> Any:
        super().apply(fn)  # type: ignore[misc]
        return None  # the fault


@mutant("apply-parent-first", {"apply.children-before-parent", "apply.shared-child-once"}, "test_tree_ops")
class ApplyParentFirst:
    """apply calls fn on a parent before its children (pre-order)."""

    def apply(self, fn: Callable[[Any], None]) -> Any:
        for module in self.modules():  # type: ignore[attr-defined]  # the fault: modules() is pre-order
            fn(module)
        return self


@mutant("apply-skips-root", {"apply.visits-every-module"}, "test_tree_ops")
class ApplySkipsRoot:
    """apply calls fn on every descendant but not on the module it was called on."""

    def apply(self, fn: Callable[[Any], None]) -> Any:
        root = self
        super().apply(lambda m: None if m is root else fn(m))  # type: ignore[misc]  # the fault
        return self


@mutant("eval-only-self", {"eval.same-as-train-false"}, "test_tree_ops")
class EvalOnlySelf:
    """eval() clears the training flag of the module it is called on, not of the tree."""

    def eval(self) -> Any:
        object.__setattr__(self, "training", False)  # the fault
        return self


# -- dotted paths ----------------------------------------------------------------------------------
def _owner_and_name(module: Any, target: str) -> tuple[Any, str]:
    owner_path, _, name = target.rpartition(".")
    return module.get_submodule(owner_path), name


@mutant("get-parameter-any-kind", {"get_parameter.wrong-kind-raises"}, "test_tree_ops")
class GetParameterAnyKind:
    """get_parameter hands out a buffer when the path names one."""

    def get_parameter(self, target: str) -> Any:
        owner, name = _owner_and_name(self, target)
        if owner._buffers.get(name) is not None:
            return owner._buffers[name]  # the fault
        return super().get_parameter(target)  # type: ignore[misc]


@mutant("get-buffer-any-kind", {"get_buffer.wrong-kind-raises"}, "test_tree_ops")
class GetBufferAnyKind:
    """get_buffer hands out a parameter when the path names one."""

    def get_buffer(self, target: str) -> Any:
        owner, name = _owner_and_name(self, target)
        if owner._parameters.get(name) is not None:
            return owner._parameters[name]  # the fault
        return super().get_buffer(target)  # type: ignore[misc]


@mutant("get-parameter-missing-none", {"get_parameter.missing-raises"}, "test_tree_ops")
class GetParameterMissingNone:
    """get_parameter returns None for a path that names nothing."""

    def get_parameter(self, target: str) -> Any:
        owner, name = _owner_and_name(self, target)
        if name not in owner.__dict__ and name not in owner._parameters and name not in owner._buffers:
            return None  # the fault
        return super().get_parameter(target)  # type: ignore[misc]


@mutant("get-buffer-missing-none", {"get_buffer.missing-raises"}, "test_tree_ops")
class GetBufferMissingNone:
    """get_buffer returns None for a path that names nothing."""

    def get_buffer(self, target: str) -> Any:
        owner, name = _owner_and_name(self, target)
        if name not in owner.__dict__ and name not in owner._parameters and name not in owner._buffers:
            return None  # the fault
        return super().get_buffer(target)  # type: ignore[misc]


@mutant("get-parameter-last-segment-only", {"get_parameter.dotted-path"}, "test_tree_ops")
class GetParameterLastSegmentOnly:
    """get_parameter looks the last segment up on the module itself, ignoring the path before it."""

    def get_parameter(self, target: str) -> Any:
        return super().get_parameter(target.rpartition(".")[2])  # type: ignore[misc]  # the fault


@mutant("get-buffer-last-segment-only", {"get_buffer.dotted-path"}, "test_tree_ops")
class GetBufferLastSegmentOnly:
    """get_buffer looks the last segment up on the module itself, ignoring the path before it."""

    def get_buffer(self, target: str) -> Any:
        return super().get_buffer(target.rpartition(".")[2])  # type: ignore[misc]  # the fault


@mutant("set-submodule-strict-ignored", {"set_submodule.strict-requires-existing"}, "test_tree_ops")
class SetSubmoduleStrictIgnored:
    """set_submodule(strict=True) creates a missing last segment as the default does."""

    def set_submodule(self, target: str, module: Any, strict: bool = False) -> None:
        super().set_submodule(target, module, False)  # type: ignore[misc]  # the fault


# -- registration ----------------------------------------------------------------------------------
@mutant("register-parameter-refuses-none", {"register_parameter.none-empty-slot"}, "test_registration")
class RegisterParameterRefusesNone:
    """register_parameter(name, None) raises instead of filing an empty slot."""

    def register_parameter(self, name: str, param: Any) -> None:
        if param is None and "in_features" not in self.__dict__:  # a layer's own empty bias slot still files
            raise TypeError(f"register_parameter({name!r}, None): a Parameter is expected")  # the fault
        super().register_parameter(name, param)  # type: ignore[misc]


@mutant("register-buffer-refuses-none", {"register_buffer.none-empty-slot"}, "test_registration")
class RegisterBufferRefusesNone:
    """register_buffer(name, None) raises instead of filing an empty slot."""

    def register_buffer(self, name: str, tensor: Any, persistent: bool = True) -> None:
        if tensor is None:
            raise TypeError(f"register_buffer({name!r}, None): a tensor is expected")  # the fault
        super().register_buffer(name, tensor, persistent)  # type: ignore[misc]


# -- walks -----------------------------------------------------------------------------------------
@mutant("parameters-recurse-ignored", {"parameters.recurse", "parameters.recurse-matrix"}, "test_walks", "test_edges")
class ParametersRecurseIgnored:
    """parameters(recurse=False) still yields the children's parameters."""

    def parameters(self, recurse: bool = True) -> Iterator[Any]:
        yield from super().parameters(True)  # type: ignore[misc]  # the fault


@mutant("buffers-recurse-ignored", {"buffers.recurse", "buffers.recurse-matrix"}, "test_walks", "test_edges")
class BuffersRecurseIgnored:
    """buffers(recurse=False) still yields the children's buffers."""

    def buffers(self, recurse: bool = True) -> Iterator[Any]:
        yield from super().buffers(True)  # type: ignore[misc]  # the fault


@mutant(
    "named-parameters-recurse-ignored",
    {
        "named_parameters.recurse-false",
        "named_parameters.keyword-matrix",
        # packrt's parameters() and to_empty walk through named_parameters, so they inherit the fault:
        "parameters.recurse",
        "parameters.recurse-matrix",
        "to_empty.keyword-matrix",
    },
    "test_walks",
    "test_edges",
)
class NamedParametersRecurseIgnored:
    """named_parameters(recurse=False) still yields the children's parameters."""

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Any]]:
        yield from super().named_parameters(prefix, True, remove_duplicate)  # type: ignore[misc]  # the fault


@mutant(
    "named-buffers-recurse-ignored",
    # packrt's buffers() walks through named_buffers, so it inherits the fault:
    {"named_buffers.recurse", "named_buffers.keyword-matrix", "buffers.recurse", "buffers.recurse-matrix"},
    "test_walks",
    "test_edges",
)
class NamedBuffersRecurseIgnored:
    """named_buffers(recurse=False) still yields the children's buffers."""

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Any]]:
        yield from super().named_buffers(prefix, True, remove_duplicate)  # type: ignore[misc]  # the fault


@mutant(
    "named-parameters-prefix-ignored",
    {"named_parameters.prefix", "named_parameters.keyword-matrix"},
    "test_walks",
    "test_edges",
)
class NamedParametersPrefixIgnored:
    """named_parameters drops the prefix it is given."""

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Any]]:
        yield from super().named_parameters("", recurse, remove_duplicate)  # type: ignore[misc]  # the fault


@mutant(
    "named-buffers-prefix-ignored", {"named_buffers.prefix", "named_buffers.keyword-matrix"}, "test_walks", "test_edges"
)
class NamedBuffersPrefixIgnored:
    """named_buffers drops the prefix it is given."""

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Any]]:
        yield from super().named_buffers("", recurse, remove_duplicate)  # type: ignore[misc]  # the fault


# -- state_dict ------------------------------------------------------------------------------------
@mutant("state-dict-destination-ignored", {"state_dict.destination"}, "test_state_dict", "test_edges")
class StateDictDestinationIgnored:
    """state_dict(destination=d) returns a new dict and leaves d empty."""

    def state_dict(self, *, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        return super().state_dict(prefix=prefix, keep_vars=keep_vars)  # type: ignore[misc]  # the fault


@mutant(
    "state-dict-keep-vars-ignored",
    {"state_dict.keep-vars", "state_dict.keyword-matrix", "load_state_dict.keyword-matrix"},
    "test_state_dict",
    "test_edges",
)
class StateDictKeepVarsIgnored:
    """state_dict(keep_vars=True) hands out plain tensors, not the registered objects."""

    def state_dict(self, *, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        return super().state_dict(destination=destination, prefix=prefix)  # type: ignore[misc]  # the fault


@mutant(
    "state-dict-prefix-ignored", {"state_dict.prefix", "state_dict.keyword-matrix"}, "test_state_dict", "test_edges"
)
class StateDictPrefixIgnored:
    """state_dict drops the prefix it is given."""

    def state_dict(self, *, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        return super().state_dict(destination=destination, keep_vars=keep_vars)  # type: ignore[misc]  # the fault


# -- repr, placement -------------------------------------------------------------------------------
@mutant(
    "linear-extra-repr-empty", {"extra_repr.linear-geometry", "extra_repr.linear-geometry-no-bias"}, "test_tree_ops"
)
class LinearExtraReprEmpty:
    """A layer's extra_repr says nothing (its geometry is missing from the repr)."""

    def extra_repr(self) -> str:
        return ""  # the fault


@mutant(
    "to-none-refused", {"to.none-changes-nothing", "to.already-there-keeps-storage"}, "test_placement", "test_edges"
)
class ToNoneRefused:
    """to(None) raises instead of leaving the tree as it is."""

    def to(self, *args: Any, **kwargs: Any) -> Any:
        if args and args[0] is None:
            raise TypeError("to(None): name a device or a dtype")  # the fault
        return super().to(*args, **kwargs)  # type: ignore[misc]


# -- more registration, walks, hooks, repr, placement ----------------------------------------------
@mutant("add-module-refuses-none", {"add_module.none-slot", "register_module.same-as-add-module"}, "test_registration")
class AddModuleRefusesNone:
    """add_module(name, None) raises instead of filing an empty slot (register_module, which is
    add_module, refuses it with it)."""

    def add_module(self, name: str, module: Any) -> None:
        if module is None:
            raise TypeError(f"add_module({name!r}, None): a Module is expected")  # the fault
        super().add_module(name, module)  # type: ignore[misc]


def _wrapping(registration: str, wrap: Callable[[Callable[..., Any], dict[str, bool]], Callable[..., Any]]) -> type:
    """A fault base whose ``registration`` method registers ``wrap(hook, flags)`` instead of the hook."""

    class Wrapping:
        pass

    def register(self: Any, hook: Callable[..., Any], **flags: bool) -> Any:
        return getattr(super(Wrapping, self), registration)(wrap(hook, flags), **flags)

    setattr(Wrapping, registration, register)
    return Wrapping


def _tuple_result_dropped(hook: Callable[..., Any], flags: dict[str, bool]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        result = hook(*args)
        return None if isinstance(result, tuple) and not flags.get("with_kwargs") else result  # the fault

    return run


@mutant("pre-hook-tuple-ignored", {"register_forward_pre_hook.value-replaces-args"}, "test_hooks")
class PreHookTupleIgnored(_wrapping("register_forward_pre_hook", _tuple_result_dropped)):
    """A pre-hook's tuple of new arguments is dropped: forward gets the old ones."""


def _truthy_result_dropped(hook: Callable[..., Any], flags: dict[str, bool]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        result = hook(*args)
        return None if result else result  # the fault

    return run


@mutant("hook-truthy-value-ignored", {"register_forward_hook.value-replaces-output"}, "test_hooks")
class HookTruthyValueIgnored(_wrapping("register_forward_hook", _truthy_result_dropped)):
    """A forward hook's non-empty return value is dropped: the output stays forward's."""


def _kwargs_hidden(hook: Callable[..., Any], flags: dict[str, bool]) -> Callable[..., Any]:
    if not flags.get("with_kwargs") or flags.get("always_call"):
        return hook

    def run(module: Any, args: Any, kwargs: Any, out: Any) -> Any:
        return hook(module, args, {}, out)  # the fault

    return run


@mutant("hook-kwargs-hidden", {"register_forward_hook.with-kwargs"}, "test_hooks")
class HookKwargsHidden(_wrapping("register_forward_hook", _kwargs_hidden)):
    """A with_kwargs forward hook receives an empty keyword dict."""


def _new_kwargs_dropped(hook: Callable[..., Any], flags: dict[str, bool]) -> Callable[..., Any]:
    if not flags.get("with_kwargs"):
        return hook

    def run(module: Any, args: Any, kwargs: Any) -> Any:
        result = hook(module, args, kwargs)
        return None if result is None else (result[0], kwargs)  # the fault: the new keywords are dropped

    return run


@mutant("pre-hook-new-kwargs-dropped", {"register_forward_pre_hook.with-kwargs"}, "test_hooks")
class PreHookNewKwargsDropped(_wrapping("register_forward_pre_hook", _new_kwargs_dropped)):
    """A with_kwargs pre-hook's replacement keywords are dropped (its new arguments are kept)."""


@mutant("repr-children-reversed", {"module.order.repr", "module.dedup.repr"}, "test_tree_ops")
class ReprChildrenReversed:
    """The repr lists the children from the last registered to the first (a shared child then prints
    under its last name)."""

    def _repr(self, seen: set[Any]) -> str:
        held = self._modules  # type: ignore[has-type]
        object.__setattr__(self, "_modules", dict(reversed(list(held.items()))))  # the fault
        try:
            text: str = super()._repr(seen)  # type: ignore[misc]
        finally:
            object.__setattr__(self, "_modules", held)
        return text


class _SwallowRefusal:
    def to(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().to(*args, **kwargs)  # type: ignore[misc]
        except Exception as err:
            if "quantiz" not in str(err).lower():
                raise
            return self  # the fault: a quantized layer's refusal is swallowed


@mutant("to-refusal-swallowed", {"to.refusal-raises"}, "test_placement")
class ToRefusalSwallowed(_SwallowRefusal):
    """A layer's refusal of a placement is swallowed: to() returns the module unchanged."""


def _swallowing_quantized_linear(self: Any, in_features: int, out_features: int) -> Any:
    cls = type("QuantizedLinear", (_SwallowRefusal, self._packrt.nn.QuantizedLinear), {})
    return cls(in_features, out_features, device=self.device)


ToRefusalSwallowed.quantized_linear = _swallowing_quantized_linear  # type: ignore[attr-defined]  # its layer too


# -- modes, paths, state, walks, placement and load results (2026-12-07) ------------------------------


@mutant("train-returns-none", {"train.sets-flag-tree", "train.returns-self"}, "test_tree_ops")
class TrainReturnsNone:
    """train sets the flag on the whole tree but returns None (eval still returns the module)."""

    def train(self, mode: bool = True) -> Any:
        super().train(mode)  # type: ignore[misc]
        return None  # the fault

    def eval(self) -> Any:
        super().train(False)  # type: ignore[misc]
        return self


@mutant("training-unset-until-train", {"train.flag-readable-from-construction"}, "test_tree_ops")
class TrainingUnsetUntilTrain:
    """A new module's training flag reads None until train() or eval() first sets it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "training", None)  # the fault


@mutant("get-submodule-empty-is-none", {"get_submodule.empty-is-self", "set_submodule.replaces"}, "test_tree_ops")
class GetSubmoduleEmptyIsNone:
    """get_submodule('') gives None instead of the module itself (packrt's set_submodule finds a top-level
    name's parent through it, so replacing a top-level child breaks with it)."""

    def get_submodule(self, target: str) -> Any:
        if target == "":
            return None  # the fault
        return super().get_submodule(target)  # type: ignore[misc]


@mutant(
    "get-submodule-missing-none",
    {"get_submodule.missing-raises", "set_submodule.default-creates-last"},
    "test_tree_ops",
)
class GetSubmoduleMissingNone:
    """get_submodule gives None for a last segment that names nothing, instead of raising (packrt's
    set_submodule reads that raise as the sign to create a missing last segment, so it breaks with it)."""

    def get_submodule(self, target: str) -> Any:
        if target:
            owner, name = _owner_and_name(self, target)
            tables = (owner.__dict__[t] for t in ("_modules", "_parameters", "_buffers"))
            if not any(name in table for table in tables) and name not in owner.__dict__:
                return None  # the fault
        return super().get_submodule(target)  # type: ignore[misc]


@mutant("get-submodule-any-kind", {"get_submodule.wrong-kind-raises"}, "test_tree_ops")
class GetSubmoduleAnyKind:
    """get_submodule hands out a parameter or a buffer when the path names one."""

    def get_submodule(self, target: str) -> Any:
        if target:
            owner, name = _owner_and_name(self, target)
            for table in ("_parameters", "_buffers"):
                if owner.__dict__[table].get(name) is not None:
                    return owner.__dict__[table][name]  # the fault
        return super().get_submodule(target)  # type: ignore[misc]


@mutant("state-dict-copies-values", {"state_dict.values-share-storage"}, "test_state_dict")
class StateDictCopiesValues:
    """state_dict hands out copies of the values instead of tensors sharing the module's storage."""

    def state_dict(self, **kwargs: Any) -> Any:
        sd = super().state_dict(**kwargs)  # type: ignore[misc]
        if not kwargs.get("keep_vars"):
            for key, value in list(sd.items()):
                if getattr(value, "has_storage", False):
                    sd[key] = value.clone()  # the fault
        return sd


@mutant(
    "to-device-string-refused",
    {
        "to.device-string",
        "cpu.same-as-to-cpu",
        # these call to() with the run's device string alone too:
        "module.order.placement",
        "to.already-there-keeps-storage",
    },
    "test_placement",
)
class ToDeviceStringRefused:
    """to('cpu'), a device string as the only argument, is refused; a device with a dtype or by keyword still works."""

    def to(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], str) and args[0].split(":")[0] in ("cpu", "cuda"):
            raise TypeError("to(): pass the device as a Device object")  # the fault
        return super().to(*args, **kwargs)  # type: ignore[misc]


@mutant(
    "named-buffers-persistent-only",
    {
        "named_buffers.non-persistent-included",
        # the sample tree's one non-persistent buffer is in every full listing these compare:
        "buffers.recurse",
        "module.order.walks",
        "named_buffers.order",
        "named_buffers.prefix",
        "named_parameters.order",
    },
    "test_walks",
)
class NamedBuffersPersistentOnly:
    """named_buffers (and buffers, built on it) leave the non-persistent buffers out, as state_dict does."""

    def named_buffers(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, Any]]:
        modules = self.modules()  # type: ignore[attr-defined]
        transient = {id(m._buffers[n]) for m in modules for n in m._non_persistent if m._buffers.get(n) is not None}
        for name, buf in super().named_buffers(*args, **kwargs):  # type: ignore[misc]
            if id(buf) not in transient:  # the fault
                yield name, buf


@mutant(
    "named-modules-prefix-ignored",
    {"named_modules.prefix", "named_parameters.prefix", "named_buffers.prefix"},
    "test_walks",
)
class NamedModulesPrefixIgnored:
    """named_modules(prefix=...) names the tree as if no prefix was given (packrt's named_parameters and
    named_buffers pass their prefix through it, so theirs go too)."""

    def named_modules(self, memo: Any = None, prefix: str = "", *args: Any, **kwargs: Any) -> Any:
        if memo is None:  # the outermost call: the fault drops its prefix
            prefix = ""
        return super().named_modules(memo, prefix, *args, **kwargs)  # type: ignore[misc]


@mutant(
    "exact-load-returns-none",
    {
        "load_state_dict.returns-accounting",
        # their loads match every key too and read the (empty) accounting:
        "load_state_dict.any-mapping",
        "load_state_dict.shared-child-second-name",
        "load_state_dict.tie.second-name-accepted",
    },
    "test_load",
)
class ExactLoadReturnsNone:
    """A load that matches every key returns None instead of empty missing and unexpected lists."""

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        result = super().load_state_dict(*args, **kwargs)  # type: ignore[misc]
        if not result.missing_keys and not result.unexpected_keys:
            return None  # the fault
        return result


@mutant("non-strict-load-hides-unexpected", {"load_state_dict.strict-false.reports"}, "test_load")
class NonStrictLoadHidesUnexpected:
    """load_state_dict(strict=False) reports the missing keys but not the unexpected ones."""

    def load_state_dict(self, state_dict: Any, strict: bool = True, *args: Any, **kwargs: Any) -> Any:
        result = super().load_state_dict(state_dict, strict, *args, **kwargs)  # type: ignore[misc]
        return result if strict else result._replace(unexpected_keys=[])  # the fault


@mutant("load-skips-set-extra-state", {"set_extra_state.called-by-load"}, "test_state_dict")
class LoadSkipsSetExtraState:
    """load_state_dict binds the tensors but never hands a module its extra state back."""

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        tree = list(self.modules())  # type: ignore[attr-defined]
        for module in tree:
            object.__setattr__(module, "set_extra_state", lambda state: None)  # the fault
        try:
            return super().load_state_dict(*args, **kwargs)  # type: ignore[misc]
        finally:
            for module in tree:
                module.__dict__.pop("set_extra_state", None)


@mutant("half-replaces-parameters", {"to.identity-kept"}, "test_placement")
class HalfReplacesParameters:
    """half() casts the tree but files a new Parameter object in each slot instead of keeping the old one."""

    def half(self) -> Any:
        super().half()  # type: ignore[misc]
        for module in self.modules():  # type: ignore[attr-defined]
            table = module.__dict__["_parameters"]
            for name, param in list(table.items()):
                if param is not None:
                    table[name] = type(param)(param.detach())  # the fault
        return self


class AutoPacksWithoutRoom(Mutant):
    """weight_residency='auto' packs whatever the free memory: the room the load sees never runs short."""

    fault = "auto-packs-without-room"
    breaks = frozenset({"load_state_dict.residency.auto-no-room-borrows"})
    suite_files = ("test_packing",)

    def short_free_memory(self) -> Any:
        return contextlib.nullcontext()  # the fault: auto finds room for every pack


# -- handles, pack=True, per_call, to_empty (issue 45, after the concurrency clauses) ---------------------


class _SpentHandle:
    """A handle whose remove() does nothing."""

    def remove(self) -> None:
        return None  # the fault: the hook stays registered


@mutant(
    "hook-handle-remove-noop",
    {
        "register_forward_hook.handle-remove",
        "register_forward_hook.remove-keeps-the-rest",
        "register_forward_hook.remove-own-only",
        "register_forward_hook.same-function-twice",
    },
    "test_hooks",
)
class HookHandleRemoveNoop:
    """register_forward_hook registers the hook but hands back a handle whose remove() does nothing."""

    def register_forward_hook(self, hook: Any, **kwargs: Any) -> Any:
        super().register_forward_hook(hook, **kwargs)  # type: ignore[misc]
        return _SpentHandle()


@mutant(
    "pre-hook-handle-remove-noop",
    {
        "register_forward_pre_hook.handle-remove",
        "register_forward_pre_hook.remove-keeps-the-rest",
        "register_forward_pre_hook.remove-own-only",
    },
    "test_hooks",
)
class PreHookHandleRemoveNoop:
    """register_forward_pre_hook registers the hook but hands back a handle whose remove() does nothing."""

    def register_forward_pre_hook(self, hook: Any, **kwargs: Any) -> Any:
        super().register_forward_pre_hook(hook, **kwargs)  # type: ignore[misc]
        return _SpentHandle()


@mutant(
    "pack-true-ignored",
    {
        "load_state_dict.pack.eager",
        "load_state_dict.pack.assign-half",
        "load_state_dict.pack.copy-converts-dtype",
        "load_state_dict.pack.whole-tree-strict-false",
    },
    "test_packing",
    "test_load",
)
class PackTrueIgnored:
    """load_state_dict drops pack=True: the layers pack on their first forward, as without it."""

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False, **kwargs: Any) -> Any:
        kwargs.pop("pack", None)  # the fault
        return super().load_state_dict(state_dict, strict, assign, **kwargs)  # type: ignore[misc]


@mutant(
    "per-call-packs",
    {
        "load_state_dict.residency.per-call",
        "load_state_dict.pack.nothing-to-pack-refuses-nothing",
        "load_state_dict.residency.only-bound-layers",
        "load_state_dict.residency.partial-reload-restores-raw",
        "load_state_dict.residency.reload-drops-pack",
    },
    "test_packing",
    "test_load",
)
class PerCallPacks:
    """weight_residency='per_call' loads as 'packed': the layer keeps a serving form between calls."""

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False, **kwargs: Any) -> Any:
        if kwargs.get("weight_residency") == "per_call":
            kwargs["weight_residency"] = "packed"  # the fault
        return super().load_state_dict(state_dict, strict, assign, **kwargs)  # type: ignore[misc]


@mutant(
    "to-empty-none-keeps-storage",
    {"to_empty.fresh-storage", "to_empty.device-none-keeps", "to_empty.keyword-matrix"},
    "test_placement",
    "test_edges",
)
class ToEmptyNoneKeepsStorage:
    """to_empty(device=None) does nothing: every tensor keeps its old storage (and values)."""

    def to_empty(self, *, device: Any, recurse: bool = True) -> Any:
        if device is None:
            return self  # the fault
        return super().to_empty(device=device, recurse=recurse)  # type: ignore[misc]


@mutant(
    "to-empty-none-to-meta",
    {"to_empty.fresh-storage", "to_empty.device-none-keeps", "to_empty.keyword-matrix", "to_empty.recurse-false"},
    "test_placement",
    "test_edges",
)
class ToEmptyNoneToMeta:
    """to_empty(device=None) moves every tensor to the storage-free meta device instead of keeping its own."""

    def to_empty(self, *, device: Any, recurse: bool = True) -> Any:
        return super().to_empty(device="meta" if device is None else device, recurse=recurse)  # type: ignore[misc]


MUTANTS: tuple[type[Mutant], ...] = (
    ApplyReturnsNone,
    ApplyParentFirst,
    ApplySkipsRoot,
    EvalOnlySelf,
    GetParameterAnyKind,
    GetBufferAnyKind,
    GetParameterMissingNone,
    GetBufferMissingNone,
    GetParameterLastSegmentOnly,
    GetBufferLastSegmentOnly,
    SetSubmoduleStrictIgnored,
    RegisterParameterRefusesNone,
    RegisterBufferRefusesNone,
    ParametersRecurseIgnored,
    BuffersRecurseIgnored,
    NamedParametersRecurseIgnored,
    NamedBuffersRecurseIgnored,
    NamedParametersPrefixIgnored,
    NamedBuffersPrefixIgnored,
    StateDictDestinationIgnored,
    StateDictKeepVarsIgnored,
    StateDictPrefixIgnored,
    LinearExtraReprEmpty,
    ToNoneRefused,
    AddModuleRefusesNone,
    PreHookTupleIgnored,
    HookTruthyValueIgnored,
    HookKwargsHidden,
    PreHookNewKwargsDropped,
    ReprChildrenReversed,
    ToRefusalSwallowed,
    AutoPacksWithoutRoom,
    TrainReturnsNone,
    TrainingUnsetUntilTrain,
    GetSubmoduleEmptyIsNone,
    GetSubmoduleMissingNone,
    GetSubmoduleAnyKind,
    StateDictCopiesValues,
    ToDeviceStringRefused,
    NamedBuffersPersistentOnly,
    NamedModulesPrefixIgnored,
    ExactLoadReturnsNone,
    NonStrictLoadHidesUnexpected,
    LoadSkipsSetExtraState,
    HalfReplacesParameters,
    HookHandleRemoveNoop,
    PreHookHandleRemoveNoop,
    PackTrueIgnored,
    PerCallPacks,
    ToEmptyNoneKeepsStorage,
    ToEmptyNoneToMeta,
)
"""The backlog's mutants, in the order the suite's own tests run them."""
