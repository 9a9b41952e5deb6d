"""state_dict and load_state_dict, as functions of the module they act on (``Module``'s
methods of the same names delegate here).

``load_state_dict`` is transactional: every key, shape, dtype and storage is checked,
and every layer prepares its part, before anything is written. A load that raises leaves
every tensor, binding and Parameter object as it was, without snapshotting the model:
the extra memory it needs is what a layer's new pack takes, never a copy of the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from packrt_core.errors import ReadOnlyError, StateDictError, StorageFreeError
from packrt_core.nn.parameter import Buffer, Parameter
from packrt_core.nn.residency import check_residency
from packrt_core.publication import commit_joined, publishing, serialized
from packrt_core.tensor import Tensor, _Lineage

if TYPE_CHECKING:  # module.py imports this module; at run time a module is only an argument here
    from packrt_core.nn.module import Module

EXTRA_STATE_KEY = "_extra_state"


class _IncompatibleKeys(NamedTuple):
    """What a load did not match: keys the model has and the dict lacked, and the reverse."""

    missing_keys: list[str]
    unexpected_keys: list[str]

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return f"_IncompatibleKeys(missing_keys={self.missing_keys}, unexpected_keys={self.unexpected_keys})"


LoadResult = _IncompatibleKeys  # revision 1's name for the same result


@dataclass
class _Tie:
    """One tensor of the model and every place (module, registry, name) and key it sits under."""

    tensor: Tensor
    keys: list[str] = field(default_factory=list)
    places: list[tuple[Module, str, str]] = field(default_factory=list)


def state_dict(root: Module, destination: dict[str, Any] | None, prefix: str, keep_vars: bool) -> dict[str, Any]:
    """``root.state_dict(...)``: each module of the tree writes its own entries, in order."""
    if destination is None:
        destination = {}
    seen: set[int] = set()
    for path, module in root.named_modules():
        module._save_to_state_dict(destination, prefix + (path + "." if path else ""), keep_vars, seen)
    return destination


def save_own_entries(module: Module, destination: dict[str, Any], prefix: str, keep_vars: bool, seen: set[int]) -> None:
    """``module``'s own parameters (through its ``_state_value``), persistent buffers and extra state."""
    for name, param in module._parameters.items():
        if param is not None and id(param) not in seen:
            seen.add(id(param))
            value = module._state_value(name, param, keep_vars)
            if value is not None:
                destination[prefix + name] = value
    for name, buf in module._buffers.items():
        if buf is not None and name not in module._non_persistent and id(buf) not in seen:
            seen.add(id(buf))
            destination[prefix + name] = buf if keep_vars else buf.detach()
    if module._has_extra_state():
        destination[prefix + EXTRA_STATE_KEY] = module.get_extra_state()


def load_state_dict(
    root: Module,
    state_dict: Mapping[str, Any],
    strict: bool,
    assign: bool,
    pack: bool,
    weight_residency: str | None,
) -> _IncompatibleKeys:
    """``root.load_state_dict(...)``: validate everything, prepare every layer, then write, as one
    publication: a forward on another thread runs wholly before the writes or wholly after."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"load_state_dict expects a Mapping[str, Tensor], got {type(state_dict).__name__}")
    check_residency(weight_residency, "load_state_dict")
    with serialized():  # no other change lands between the checks and the writes; forwards go on
        ties, extra = _layout(root)
        match = _match(state_dict, ties, extra, assign)
        if strict and (match.missing or match.unexpected):
            match.problems[:0] = _key_lines(match.missing, match.unexpected)
        if match.problems:
            raise StateDictError(_failure(root, match.problems))
        restored = [(key, module) for key, module in extra.items() if key in state_dict]
        _apply(root, state_dict, match.chosen, restored, assign, pack, weight_residency)
        return _IncompatibleKeys(match.missing, match.unexpected)


@dataclass
class _Match:
    """What a checkpoint gives each tensor of the model, before anything is written: the value
    chosen per tie, the keys missing and unexpected, and every problem found (all of them, so one
    error lists everything to fix)."""

    chosen: list[tuple[_Tie, Tensor]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _match(state_dict: Mapping[str, Any], ties: list[_Tie], extra: dict[str, Module], assign: bool) -> _Match:
    expected = {key for tie in ties for key in tie.keys} | set(extra)
    match = _Match(unexpected=[key for key in state_dict if key not in expected])
    for tie in ties:
        present = [key for key in tie.keys if key in state_dict]
        if not present:
            match.missing.append(tie.keys[0])
            continue
        value = _as_tensor(state_dict[present[0]], present[0], match.problems)
        for other in present[1:]:
            if not _same_values(state_dict[present[0]], state_dict[other]):
                match.problems.append(
                    f"{present[0]} and {other} name one tied tensor of the model, but the checkpoint gives "
                    "them different values"
                )
        if value is not None and _check_value(tie, present[0], value, assign, match.problems):
            match.chosen.append((tie, value))
    match.missing.extend(key for key in extra if key not in state_dict)
    return match


def _apply(
    root: Module,
    state_dict: Mapping[str, Any],
    chosen: list[tuple[_Tie, Tensor]],
    extra: list[tuple[str, Module]],
    assign: bool,
    pack: bool,
    residency: str | None,
) -> None:
    """Prepare every layer, then write; a failure at any point (KeyboardInterrupt and MemoryError
    included) puts the model back as it was."""
    commits = _prepare(root, chosen, assign, pack, residency)
    bindings = _bindings(chosen) if assign else {}  # every new Parameter/Buffer object, made before any write
    undo = _Undo(root, chosen, assign, extra)
    with publishing():  # the commit: forwards in flight have finished, new ones wait for its end
        try:
            for key, module in extra:
                module.set_extra_state(state_dict[key])
            _write(chosen, assign, bindings)
            for commit in commits:
                commit()
            if pack:  # the layers this load did not bind pack too: pack=True readies the whole tree
                bound = {module for tie, _ in chosen for module, _, _ in tie.places}
                for module in root.modules():
                    if module not in bound:
                        module._pack_now()
            commit_joined()  # a caller's step that lands with this load (load_checkpoint's file guard)
        except BaseException:  # KeyboardInterrupt and MemoryError included: the model goes back as it was
            undo.restore()
            raise


class _Undo:
    """Everything a load may change, captured before its first write, and put back by :meth:`restore`:
    each layer's pack and residency state, the objects in every slot an assign-load rebinds, the
    values and versions of every tensor a copy-load overwrites (a copy of those tensors: the one
    cost of a transactional copy-load; assign-loads keep references only), and extra state."""

    def __init__(
        self, root: Module, chosen: list[tuple[_Tie, Tensor]], assign: bool, extra: list[tuple[str, Module]]
    ) -> None:
        self.extra = extra
        self.layers = [(m, m._transaction_state()) for m in root.modules()]
        self.slots = (  # only an assign-load rebinds slots; a copy-load writes in place
            [
                (module, registry, name, getattr(module, registry)[name])
                for tie, _ in chosen
                for module, registry, name in tie.places
            ]
            if assign
            else []
        )
        self.values: list[tuple[Tensor, Any, int]] = []
        if not assign:
            for tie, _ in chosen:
                t = tie.tensor
                # a parameter whose pack holds its values gets them back with its layer: no copy needed
                self.values.append((t, None if t._data is None else t._data.copy(), t._lineage.version))
        self.extra_before = [(m, m.get_extra_state() if m._has_extra_state() else None) for _, m in extra]

    def restore(self) -> None:
        for module, state in self.layers:
            module._restore_transaction_state(state)
        for module, registry, name, old in self.slots:
            getattr(module, registry)[name] = old
        for t, old, version in self.values:
            if old is not None:
                with t._lineage:
                    t._data[...] = old
            t._lineage.version = version  # the values are the ones the layer's pack was stamped with
        for module, before in reversed(self.extra_before):
            module.set_extra_state(before)


def _layout(root: Module) -> tuple[list[_Tie], dict[str, Module]]:
    """Every tensor the load may bind, with all its keys (first name first), and the
    extra-state keys of modules that restore extra state."""
    ties: dict[int, _Tie] = {}
    extra: dict[str, Module] = {}
    for path, module in root.named_modules(remove_duplicate=False):
        prefix = path + "." if path else ""
        for registry in ("_parameters", "_buffers"):
            for name, tensor in getattr(module, registry).items():
                if tensor is None or (registry == "_buffers" and name in module._non_persistent):
                    continue
                tie = ties.setdefault(id(tensor), _Tie(tensor))
                tie.keys.append(prefix + name)
                place = (module, registry, name)
                if place not in tie.places:
                    tie.places.append(place)
        if module._restores_extra_state() and module not in extra.values():
            extra[prefix + EXTRA_STATE_KEY] = module
    return list(ties.values()), extra


def _as_tensor(value: Any, key: str, problems: list[str]) -> Tensor | None:
    """``value`` when it is a packrt Tensor; otherwise None, with the refusal (the key, the type, how
    to convert) added to ``problems``. Every load road (copy and assign, strict or not) comes here,
    so none converts silently: a numpy array's dtype, memory sharing and device would be guessed."""
    if isinstance(value, Tensor):
        return value
    kind = type(value)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    if isinstance(value, np.ndarray):
        fix = "convert it with packrt.from_numpy(value) (zero-copy)"
    elif hasattr(value, "__dlpack__"):
        fix = "convert it with packrt.from_dlpack(value) (zero-copy; a torch tensor is one)"
    else:
        fix = "convert it with packrt.tensor(value)"
    problems.append(f"{key}: the checkpoint value is a {name}; a packrt Tensor is expected: {fix}")
    return None


def _same_values(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)) or a.shape != b.shape:
        return False
    if not (a.has_storage and b.has_storage):
        return False
    return bool(np.array_equal(np.asarray(a.cpu()), np.asarray(b.cpu())))  # mixed dtypes compare by value


def _check_value(tie: _Tie, key: str, value: Tensor, assign: bool, problems: list[str]) -> bool:
    target = tie.tensor
    ok = True
    if value.shape != target.shape:
        problems.append(
            f"size mismatch for {key}: copying a param with shape {value.shape} from checkpoint, the shape in "
            f"current model is {target.shape}; build the model with the configuration the checkpoint was saved from"
        )
        ok = False
    if not value.has_storage:
        problems.append(f"{key}: the checkpoint value is storage-free; a value with storage is expected")
        ok = False
    if not assign and not target.has_storage:
        problems.append(
            f"{key}: the model's tensor is storage-free (declared under meta_init), so there is nothing to copy "
            "into: load with assign=True"
        )
        ok = False
    elif not assign:
        try:
            target._check_writable(f"{key}:")
        except (ReadOnlyError, StorageFreeError) as err:
            problems.append(f"{err} (copy mode writes into the model's tensor; load with assign=True to rebind it)")
            ok = False
    return ok


def _key_lines(missing: list[str], unexpected: list[str]) -> list[str]:
    """PyTorch's phrases ("Missing key(s) in state_dict", "Unexpected key(s) in state_dict"), which
    users and their tools search for, followed by what each means and the fix."""
    lines = []
    if missing:
        lines.append(
            "Missing key(s) in state_dict: "
            + ", ".join(f'"{k}"' for k in missing)
            + " (the model has them, the checkpoint does not; load with strict=False to leave them as they are)"
        )
    if unexpected:
        lines.append(
            "Unexpected key(s) in state_dict: "
            + ", ".join(f'"{k}"' for k in unexpected)
            + " (the checkpoint has them, the model does not; load with strict=False to ignore them)"
        )
    return lines


def _failure(root: Module, problems: list[str]) -> str:
    head = f"Error(s) in loading state_dict for {type(root).__name__} (load_state_dict failed; nothing was changed):"
    return head + "\n  " + "\n  ".join(problems)


def _prepare(
    root: Module, chosen: list[tuple[_Tie, Tensor]], assign: bool, pack: bool, residency: str | None
) -> list[Callable[[], None]]:
    """Ask each layer taking part to check and prepare its part; nothing is written yet."""
    incoming: dict[Module, dict[str, Tensor]] = {}
    for tie, value in chosen:
        for module, _, name in tie.places:
            incoming.setdefault(module, {})[name] = value
    commits = []
    problems = []
    paths = {module: path for path, module in root.named_modules()}
    for module, values in incoming.items():
        try:
            commit = module._prepare_load(paths.get(module, ""), values, assign, pack, residency)
        except StateDictError as err:
            problems.append(str(err))
            continue
        if commit is not None:
            commits.append(commit)
    if problems:
        raise StateDictError(_failure(root, problems))
    return commits


def _bindings(chosen: list[tuple[_Tie, Tensor]]) -> dict[tuple[int, str, str], Tensor]:
    """The object each slot an assign-load rebinds receives: one new object per incoming tensor
    and kind (a Parameter, a Buffer keeping its flag, a plain tensor), so a tie stays one object."""
    made: dict[tuple[int, str], Tensor] = {}
    out: dict[tuple[int, str, str], Tensor] = {}
    for tie, value in chosen:
        for module, registry, name in tie.places:
            old = getattr(module, registry)[name]
            kind = "parameter" if registry == "_parameters" else type(old).__name__
            new = made.get((id(value), kind))
            if new is None:
                new = made[(id(value), kind)] = _bind(value, old)
            out[(id(module), registry, name)] = new
    return out


def _write(chosen: list[tuple[_Tie, Tensor]], assign: bool, bindings: dict[tuple[int, str, str], Tensor]) -> None:
    if not assign:
        for tie, value in chosen:
            tie.tensor.copy_(value)
        return
    for tie, _ in chosen:
        for module, registry, name in tie.places:
            getattr(module, registry)[name] = bindings[(id(module), registry, name)]


def _bind(value: Tensor, old: Tensor) -> Tensor:
    """A new Parameter / Buffer / Tensor over ``value``'s storage, in a lineage of its own: an
    edit through the module is seen by its layer; a write through the checkpoint's handle
    reaches the storage but not a pack made from it."""
    cls: type[Tensor] = Parameter if isinstance(old, Parameter) else Buffer if isinstance(old, Buffer) else Tensor
    value._publish_writes()  # its storage is the model's now: a write through the caller's handle publishes too
    new = cls._make(value._data, value._device, value._dtype, _Lineage(published=True), value._shape)
    if isinstance(old, Buffer):
        new.persistent = old.persistent  # type: ignore[attr-defined]
    return new
