"""Module: the base class of every packrt model and layer (contract revision 2).

A module files parameters, buffers and child modules under names as they are assigned
in ``__init__`` (after ``super().__init__()``). Every walk, state-dict operation,
placement change and the repr visit the tree in registration order: a module's own
parameters, then its own buffers, then each child's subtree. A module or tensor
reachable under two names appears once, under the first.

``Module`` is one class. Its state-dict and placement methods delegate to functions in
:mod:`~packrt_core.nn.state` and :mod:`~packrt_core.nn.moves` that take the module as an
argument, and layers that pack their weights plug in through a few methods a subclass may
override (``_save_to_state_dict``, ``_state_value``, ``_prepare_load``, ``_check_placement``,
``_pack_now``), as PyTorch's per-module ``_save_to_state_dict`` does; ``Module`` itself knows
no layer type.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Self, TypeVar

from packrt_core.device import Device, as_device
from packrt_core.dtypes import bfloat16, float16, float32, float64
from packrt_core.dtypes import dtype as DType  # noqa: N812 - the methods below are named after dtypes
from packrt_core.errors import ModuleInitError, ModulePathError, RegistrationError
from packrt_core.nn import moves, state
from packrt_core.nn.parameter import Buffer, Parameter
from packrt_core.nn.state import _IncompatibleKeys
from packrt_core.publication import GATE, PER_THREAD, arrive, reader, reading
from packrt_core.tensor import Tensor
from packrt_hooks import HookRegistry, RemovableHandle, call_with_hooks

_M = TypeVar("_M", bound="Module")
_REGISTRIES = ("_parameters", "_buffers", "_modules")
_HOOK_FLAG_LOCK = threading.Lock()


def _cast_to(dtype: DType) -> Callable[[_M], _M]:
    """The method ``module.<dtype>()`` (``half``, ``float``, ...): ``to(dtype)`` on the whole tree."""

    def cast(self: _M) -> _M:
        moves.place(self, None, dtype)
        return self

    cast.__doc__ = f"Cast the floating-point tensors to {dtype.name}."
    return cast


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


class Module:
    """Base class of packrt models and layers. Subclass it, call ``super().__init__()``,
    assign parameters, buffers and children as attributes, and define ``forward``.
    Call the module itself (``m(x)``) so its forward hooks run around ``forward``."""

    training: bool
    _parameters: dict[str, Parameter | None]
    _buffers: dict[str, Tensor | None]
    _non_persistent: set[str]
    _modules: dict[str, Module | None]
    _hooked: bool
    _epoch: int
    _forward_pre_hooks: HookRegistry
    _forward_hooks: HookRegistry

    def __init__(self) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "training", True)
        setattr_(self, "_parameters", {})
        setattr_(self, "_buffers", {})
        setattr_(self, "_non_persistent", set())
        setattr_(self, "_modules", {})
        setattr_(self, "_hooked", False)  # any forward (pre-)hook registered: the call path's one check
        setattr_(self, "_epoch", 0)  # bumped by every change of what is registered here (a plan's guard reads it)
        setattr_(self, "_forward_pre_hooks", HookRegistry(self._hooks_changed))
        setattr_(self, "_forward_hooks", HookRegistry(self._hooks_changed))

    # -- the call ----------------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; subclasses define it. Callers call the module, not this."""
        raise NotImplementedError(f"{type(self).__name__} defines no forward(): subclasses of Module must")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # What a call does for hot swap: it counts itself in flight on its thread's reader, so a
        # publication (a load, a residency change, a cast, a write to a bound tensor) waits for it to
        # leave; and while a publication commits, a top-level call waits for it to end
        # (packrt_core.publication).
        try:
            me = PER_THREAD.reader
        except AttributeError:
            me = reader()
        me.depth += 1
        try:
            if GATE.pending:
                arrive(me)
            if self._hooked:
                return call_with_hooks(self, self.forward, args, kwargs, self._forward_pre_hooks, self._forward_hooks)
            return self.forward(*args, **kwargs)
        finally:
            me.depth -= 1

    def _hooks_changed(self) -> None:
        # Recomputed from both registries under one lock, so two threads registering and
        # removing at once cannot leave the flag saying "no hooks" while one is registered.
        with _HOOK_FLAG_LOCK:
            self.__dict__["_hooked"] = bool(self._forward_pre_hooks) or bool(self._forward_hooks)

    def _changed(self) -> None:
        """Record that what this module registers (or how a layer serves) changed: a serving plan built
        over it no longer holds (see :mod:`packrt_core.nn.plan`)."""
        self.__dict__["_epoch"] = self.__dict__.get("_epoch", 0) + 1

    def register_forward_pre_hook(
        self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """Run ``hook(module, args)`` (or ``hook(module, args, kwargs)``) before every forward.

        None keeps the arguments; a value replaces them (a non-tuple becomes a one-tuple);
        with ``with_kwargs`` a replacement is ``(args, kwargs)``. Registration order, or
        first with ``prepend=True``. ``handle.remove()`` unregisters."""
        return self._forward_pre_hooks.add(hook, prepend=prepend, with_kwargs=with_kwargs)

    def register_forward_hook(
        self,
        hook: Callable[..., Any],
        *,
        prepend: bool = False,
        with_kwargs: bool = False,
        always_call: bool = False,
    ) -> RemovableHandle:
        """Run ``hook(module, args, output)`` (or ``(module, args, kwargs, output)``) after
        every forward; a non-None result replaces the output. ``always_call=True`` also runs
        it, with ``output=None``, when the forward raises. ``handle.remove()`` unregisters."""
        return self._forward_hooks.add(hook, prepend=prepend, with_kwargs=with_kwargs, always_call=always_call)

    # -- registration ------------------------------------------------------------------------------
    def _require_init(self, what: str, name: str) -> None:
        if "_parameters" not in self.__dict__:
            raise ModuleInitError(
                f"cannot assign {what} {name!r} to {type(self).__name__} before Module.__init__() ran: "
                f"call super().__init__() first in {type(self).__name__}.__init__"
            )

    def _check_name(self, name: Any, kind: str, registry: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{kind} name must be a str, got {type(name).__name__}")
        if not name:
            raise RegistrationError(f"{kind} name cannot be empty")
        if "." in name:
            raise RegistrationError(f"{kind} name {name!r} cannot contain '.': dots separate path segments")
        taken = name in self.__dict__ or any(name in getattr(self, r) for r in _REGISTRIES if r != registry)
        if taken:
            raise RegistrationError(
                f"cannot register {kind} {name!r} on {type(self).__name__}: the name is already taken by "
                "another attribute; delete it first"
            )

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """File ``param`` under ``name``; None files an empty slot that reads back as None,
        takes no part in walks and is absent from state_dict."""
        self._require_init("parameter", str(name))
        self._check_name(name, "parameter", "_parameters")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"cannot register a {type(param).__name__} as parameter {name!r}: a packrt.nn.Parameter or None "
                "is expected (wrap it: Parameter(t))"
            )
        if param is not None:
            param._publish_writes()
        self._parameters[name] = param
        self._changed()

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """File ``tensor`` as a buffer: state that moves with the module. Persistent buffers
        appear in state_dict; a :class:`Buffer` carries its own flag, which wins."""
        self._require_init("buffer", str(name))
        self._check_name(name, "buffer", "_buffers")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot register a {type(tensor).__name__} as buffer {name!r}: a packrt Tensor or None is expected"
            )
        if isinstance(tensor, Buffer):
            persistent = tensor.persistent
        if tensor is not None:
            tensor._publish_writes()
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)
        self._changed()

    def add_module(self, name: str, module: Module | None) -> None:
        """File ``module`` as a child under ``name``; its tensors enumerate under ``name.``."""
        self._require_init("child module", str(name))
        self._check_name(name, "module", "_modules")
        if module is not None and not isinstance(module, Module):
            raise TypeError(
                f"cannot add a {type(module).__name__} as child module {name!r}: a Module or None is expected"
            )
        self._modules[name] = module
        self._changed()

    def register_module(self, name: str, module: Module | None) -> None:
        """The same as :meth:`add_module`."""
        self.add_module(name, module)

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            self._require_init("parameter", name)
            self._forget(name, keep="_parameters")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            self._require_init("child module", name)
            self._forget(name, keep="_modules")
            self.add_module(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign a {type(value).__name__} to parameter {name!r} of {type(self).__name__}: "
                    "a packrt.nn.Parameter or None is expected"
                )
            params[name] = None
            self._changed()
        elif params is not None and name in d["_modules"]:
            if value is not None:
                raise TypeError(
                    f"cannot assign a {type(value).__name__} to child module {name!r}: a Module or None is expected"
                )
            d["_modules"][name] = None
            self._changed()
        elif params is not None and name in d["_buffers"]:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign a {type(value).__name__} to buffer {name!r}: a Tensor or None is expected"
                )
            if isinstance(value, Buffer):
                self.register_buffer(name, value)
            else:
                if value is not None:
                    value._publish_writes()
                d["_buffers"][name] = value
                self._changed()
        elif isinstance(value, Buffer):
            # Not filed anywhere yet; a plain attribute of that name stays, so registering refuses it.
            self._require_init("buffer", name)
            self.register_buffer(name, value)
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: str) -> None:
        """Unfile ``name`` from every other place (a plain attribute included), so re-assigning
        keeps its registration slot."""
        self.__dict__.pop(name, None)
        for registry in _REGISTRIES:
            if registry != keep:
                getattr(self, registry).pop(name, None)
        if keep != "_buffers":
            self._non_persistent.discard(name)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for registry in _REGISTRIES:
            table = d.get(registry)
            if table is not None and name in table:
                return table[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for registry in _REGISTRIES:
            table = self.__dict__.get(registry)
            if table is not None and name in table:
                del table[name]
                self._non_persistent.discard(name)
                self._changed()
                return
        object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        names = set(super().__dir__())
        for registry in _REGISTRIES:
            names.update(getattr(self, registry, {}))
        return sorted(names)

    # -- walks ---------------------------------------------------------------------------------------
    def named_modules(
        self,
        memo: set[Module] | None = None,
        prefix: str = "",
        remove_duplicate: bool = True,
        *,
        recurse: bool = True,
    ) -> Iterator[tuple[str, Module]]:
        """(dotted name, module) over the tree, this module first (under ``prefix``), children
        in registration order. A module reachable twice is yielded once unless
        ``remove_duplicate=False``. ``recurse=False`` stops at the direct children."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if self in memo:
                return
            memo.add(self)
        yield prefix, self
        for name, child in self._modules.items():
            if child is None:
                continue
            path = _join(prefix, name)
            if recurse:
                yield from child.named_modules(memo, path, remove_duplicate)
            elif not remove_duplicate or child not in memo:
                memo.add(child)
                yield path, child

    def modules(self) -> Iterator[Module]:
        """Every module in the tree, this one first, each once."""
        for _, module in self.named_modules():
            yield module

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, module) of the direct children in registration order; a child filed under
        two names appears once, under the first."""
        seen: set[Module] = set()
        for name, child in self._modules.items():
            if child is not None and child not in seen:
                seen.add(child)
                yield name, child

    def children(self) -> Iterator[Module]:
        """The direct children in registration order."""
        for _, child in self.named_children():
            yield child

    def _named_tensors(
        self, registry: str, prefix: str, recurse: bool, remove_duplicate: bool
    ) -> Iterator[tuple[str, Any]]:
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        seen: set[int] = set()
        for module_prefix, module in modules:
            for name, tensor in getattr(module, registry).items():
                if tensor is None:
                    continue
                if remove_duplicate:
                    if id(tensor) in seen:
                        continue
                    seen.add(id(tensor))
                yield _join(module_prefix, name), tensor

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) in registration order with ``prefix`` prepended;
        ``recurse=False`` stops at this module's own; ``remove_duplicate=False`` yields a
        shared parameter once per name."""
        yield from self._named_tensors("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter of the tree (or only this module's), a shared one once."""
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, buffer) pairs, persistent and non-persistent alike; arguments as in
        :meth:`named_parameters`."""
        yield from self._named_tensors("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer of the tree (or only this module's), a shared one once."""
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    # -- modes and sweeps --------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Self:
        """Set the training flag on every module of the tree; returns this module."""
        if not isinstance(mode, bool):
            # PyTorch raises ValueError here ("training mode is expected to be boolean"): so does packrt.
            raise ValueError(f"train(mode) expects a bool training mode, got {type(mode).__name__}: pass True or False")
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> Self:
        """Inference mode for the whole tree: the same as ``train(False)``."""
        return self.train(False)

    def apply(self, fn: Callable[[Module], None]) -> Self:
        """Call ``fn`` on every module of the tree, each once, children before their parent."""
        for module in self._post_order():
            fn(module)
        return self

    def _post_order(self) -> Iterator[Module]:
        # Post-order without recursion limits: each module after all its children, children in
        # registration order, a module held by two parents once, where the walk first meets it
        # (so before both of them).
        seen: set[Module] = {self}
        order: list[Module] = []
        stack: list[tuple[Module, Iterator[Module]]] = [(self, iter(list(self.children())))]
        while stack:
            module, pending = stack[-1]
            for child in pending:
                if child not in seen:
                    seen.add(child)
                    stack.append((child, iter(list(child.children()))))
                    break
            else:
                stack.pop()
                order.append(module)
        return iter(order)

    # -- paths -------------------------------------------------------------------------------------
    def get_submodule(self, target: str) -> Module:
        """The module at dotted path ``target`` ("" is this module); ModulePathError
        (an AttributeError) names the segment that fails."""
        if target == "":
            return self
        module: Module = self
        walked: list[str] = []
        for segment in target.split("."):
            path = ".".join(walked) or "<root>"
            if segment not in module._modules:
                kind = _kind_of(module, segment)
                what = f"is a {kind}, not a module" if kind else "names nothing"
                raise ModulePathError(
                    f"get_submodule({target!r}): segment {segment!r} {what} in {path} ({type(module).__name__})"
                )
            child = module._modules[segment]
            if child is None:
                raise ModulePathError(f"get_submodule({target!r}): segment {segment!r} in {path} is an empty slot")
            module = child
            walked.append(segment)
        return module

    def _leaf(self, target: str, registry: str, kind: str) -> Any:
        owner_path, _, name = target.rpartition(".")
        owner = self.get_submodule(owner_path)
        table = getattr(owner, registry)
        value = table.get(name)
        if value is None:
            actual = _kind_of(owner, name)
            what = f"is a {actual}, not a {kind}" if actual else "names nothing"
            raise ModulePathError(f"get_{kind}({target!r}): {name!r} {what} in {type(owner).__name__}")
        return value

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at dotted path ``target`` ("decoder.scale")."""
        param: Parameter = self._leaf(target, "_parameters", "parameter")
        return param

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path ``target``."""
        buf: Tensor = self._leaf(target, "_buffers", "buffer")
        return buf

    def set_submodule(self, target: str, module: Module, strict: bool = False) -> None:
        """Put ``module`` at dotted path ``target``. With ``strict=True`` a module must already
        be there; by default a missing last segment is created."""
        if not isinstance(module, Module):
            # PyTorch raises ValueError for a module that is not a Module: so does packrt.
            raise ValueError(f"set_submodule({target!r}) expects a Module, got {type(module).__name__}")
        if target == "":
            raise ValueError("set_submodule('') would replace the module itself: name a child path")
        parent_path, _, name = target.rpartition(".")
        parent = self.get_submodule(parent_path)
        if name not in parent._modules:
            kind = _kind_of(parent, name)
            if kind:
                raise ModulePathError(f"set_submodule({target!r}): {name!r} is a {kind}, not a module")
            if strict:
                raise ModulePathError(
                    f"set_submodule({target!r}, strict=True): {type(parent).__name__} has no submodule {name!r}"
                )
        parent.add_module(name, module)

    # -- extra state -------------------------------------------------------------------------------
    def get_extra_state(self) -> Any:
        """Extra state for :meth:`state_dict` (key ``<prefix>_extra_state``). Override together
        with :meth:`set_extra_state`; the base class has none and raises RuntimeError."""
        raise RuntimeError(
            f"{type(self).__name__} has no extra state: override get_extra_state and set_extra_state to add some"
        )

    def set_extra_state(self, state: Any) -> None:
        """Restore what :meth:`get_extra_state` produced (load_state_dict calls it)."""
        raise RuntimeError(
            f"{type(self).__name__} has no extra state to restore: override set_extra_state with get_extra_state"
        )

    def _has_extra_state(self) -> bool:
        return type(self).get_extra_state is not Module.get_extra_state

    def _restores_extra_state(self) -> bool:
        return type(self).set_extra_state is not Module.set_extra_state

    # -- state dicts (the work is in state.py) -----------------------------------------------------
    def state_dict(
        self, *, destination: dict[str, Any] | None = None, prefix: str = "", keep_vars: bool = False
    ) -> dict[str, Any]:
        """The tree's parameters and persistent buffers as one flat dict with dotted keys in
        registration order, ``prefix`` prepended to each key. Values share storage with the
        module (``keep_vars=True`` hands out the Parameter/Buffer objects themselves); a
        tied tensor appears once, under its first name. ``destination`` is filled in place.
        A layer holding its weights in a pack still contributes every weight it declares,
        so a dict taken after a forward is complete (revision 2)."""
        return state.state_dict(self, destination, prefix, keep_vars)

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool, seen: set[int]) -> None:
        """Write this module's own entries (not its children's). Layers override
        :meth:`_state_value` rather than this."""
        state.save_own_entries(self, destination, prefix, keep_vars, seen)

    def _state_value(self, name: str, param: Parameter, keep_vars: bool) -> Tensor | None:
        """The state_dict value of one parameter; a packed layer rebuilds it from its pack
        (revision 2) or leaves it out (revision 1, see :func:`packrt.contract_revision`)."""
        del name
        return param if keep_vars else param.detach()

    def load_state_dict(
        self,
        state_dict: Mapping[str, Any],
        strict: bool = True,
        assign: bool = False,
        *,
        pack: bool = False,
        weight_residency: str | None = None,
    ) -> _IncompatibleKeys:
        """Bind a flat checkpoint onto the tree by dotted names.

        Copy mode (default) writes each value into the existing tensor, converting its
        dtype; shapes must match and the tensor must have storage. ``assign=True`` binds
        the incoming tensors themselves (their dtype; shapes must match), which is how a
        meta-init model receives its weights; one tensor object under several keys
        becomes one shared Parameter. ``strict=True`` raises StateDictError (a
        RuntimeError) listing missing and unexpected keys; otherwise they are returned. A
        failed copy raises regardless. ``pack`` and ``weight_residency`` go to the
        layers this load binds. Nothing is written unless everything checks out.
        """
        return state.load_state_dict(self, state_dict, strict, assign, pack, weight_residency)

    # -- placement (the work is in moves.py) -------------------------------------------------------
    def to(self, *args: Any, **kwargs: Any) -> Self:
        """Move the tree to a device, cast its floating-point tensors to a dtype, or both, in
        place; returns the module. Takes ``to(device)``, ``to(dtype)`` (object, name or
        DataType), ``to(device, dtype)``, ``to(tensor)`` and ``device=`` / ``dtype=`` /
        ``non_blocking=``. Integer and bool tensors keep their dtype. A layer that cannot
        serve the request raises before anything changes. An argument of a kind ``to`` cannot
        take, or in a place its kind cannot take (``to([])``, ``to("cpu", True)``), is a
        TypeError, as in PyTorch. ``copy=`` (or a second bool) raises
        :class:`~packrt_core.errors.ModuleCopyError`, a RuntimeError as in PyTorch (and a TypeError,
        what packrt 0.2 raised): the module moves in place, so ``copy.deepcopy(module).to(...)`` is
        how to get a moved copy."""
        moves.to(self, args, kwargs)
        return self

    def cpu(self) -> Self:
        """Move the tree to the CPU: ``to("cpu")``."""
        moves.place(self, Device("cpu"), None)
        return self

    def cuda(self, device: int | Device | str | None = None) -> Self:
        """Move the tree to a CUDA device: the first by default, or the given index or device."""
        moves.place(self, Device("cuda") if device is None else as_device(device), None)
        return self

    half = _cast_to(float16)
    float = _cast_to(float32)
    double = _cast_to(float64)
    bfloat16 = _cast_to(bfloat16)

    def to_empty(self, *, device: Any, recurse: bool = True) -> Self:
        """Give every parameter and buffer fresh, uninitialized storage of its shape and dtype
        on ``device`` (None keeps each tensor's device), copying no values. A storage-free
        tensor from meta init re-declares there and stays storage-free until
        ``load_state_dict(..., assign=True)`` binds it. ``recurse=False`` stops at this
        module's own tensors."""
        moves.to_empty(self, device, recurse)
        return self

    # -- repr --------------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        """One line of per-class detail for the repr (a layer prints its geometry)."""
        return ""

    def __repr__(self) -> str:
        return self._repr(set())

    def _repr(self, seen: set[Module]) -> str:
        seen.add(self)
        lines = [line for line in self.extra_repr().split("\n") if line]
        for name, child in self._modules.items():
            if child is None or child in seen:
                continue
            body = child._repr(seen).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        head = type(self).__name__ + "("
        if not lines:
            return head + ")"
        if len(lines) == 1 and not self._modules:
            return head + lines[0] + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"

    # -- hooks for layers with a bound serving form (overridden by layers) -------------------------
    def _check_placement(self, path: str, device: Any, dtype: Any) -> None:
        """Raise if this module cannot serve ``to(device, dtype)``; called before anything moves."""

    def _prepare_load(
        self, path: str, incoming: Mapping[str, Tensor], assign: bool, pack: bool, residency: str | None
    ) -> Callable[[], None] | None:
        """Validate and prepare this module's part of a load (``incoming`` maps its own tensor
        names to the checkpoint's values) without changing anything; return a commit step
        that cannot fail, or None. Raising here aborts the load with nothing written."""
        return None

    def _transaction_state(self) -> Any:
        """What a failed load must put back on this module beyond its registries and values
        (layers with packs override; a plain module has nothing more)."""
        return None

    def _restore_transaction_state(self, state: Any) -> None:
        """Put back what :meth:`_transaction_state` captured."""

    def _pack_now(self) -> None:
        """Pack this module's bound weights now (layers override; plain modules have none)."""

    def initialize(self) -> Self:
        """Revision 1's eager warm-up: pack every bound weight of the tree now. Returns the module.
        It reads the weights as a call does, so a publication on another thread lands before or after."""
        with reading():
            for module in self.modules():
                module._pack_now()
        return self


def _kind_of(module: Module, name: str) -> str:
    """What ``name`` is on ``module`` if not a child module: 'parameter', 'buffer', 'attribute' or ''."""
    if name in module._parameters:
        return "parameter"
    if name in module._buffers:
        return "buffer"
    if name in module.__dict__ or hasattr(type(module), name):
        return "attribute"
    return ""


__all__ = ["Module"]
