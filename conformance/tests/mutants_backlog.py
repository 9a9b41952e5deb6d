"""Per-sentence mutants taken off the backlog (issue 45): one plain fault per sentence, same design.

Each is packrt with one sentence of revision 2 broken through the module classes its adapter hands out
(see ``mutants.py``): a keyword ignored, a return value dropped, a kind check skipped, an order turned.
``mutation/sentences_without_mutant.txt`` lost a line for each clause they break. Load one with
``--impl mutants_backlog:<Name>`` with this directory on ``PYTHONPATH``.
"""

from __future__ import annotations

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
)
"""The backlog's mutants, in the order the suite's own tests run them."""
