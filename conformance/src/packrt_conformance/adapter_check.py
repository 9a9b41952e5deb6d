"""``packrt-conformance --check-adapter``: the adapter itself checked before any clause runs.

A mistake in an adapter (a member missing, a helper that defeats ``meta_init``, a capability declared
that the implementation does not have) would otherwise read as a broken clause of the implementation.
:func:`adapter_problems` finds each such mistake and names the member and the fix.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from packrt_conformance.adapter import _MEMBERS, ADAPTER_PROTOCOL_VERSION, DTYPE_NAMES, Adapter
from packrt_conformance.clauses import CAPABILITIES

__all__ = ["PROBES", "SURFACE", "AdapterProblem", "adapter_problems", "format_problems"]

_DATA = {
    "protocol_version": int,
    "name": str,
    "version": str,
    "revision": int,
    "revisions": frozenset,
    "device": str,
    "capabilities": frozenset,
}
_NN = ("Module", "Parameter", "Buffer", "Linear", "Sequential")


@dataclass(frozen=True)
class AdapterProblem:
    """One mistake in the adapter: the member, what is wrong, and the fix."""

    member: str
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"adapter problem: {self.member}: {self.problem}; fix: {self.fix}"


def _signature_problem(name: str, got: Any) -> str | None:
    """How ``got``'s signature fails to accept every call the protocol's ``name`` allows, or None."""
    want = [p for p in inspect.signature(getattr(Adapter, name)).parameters.values() if p.name != "self"]
    try:
        have = inspect.signature(got).parameters
    except (TypeError, ValueError):
        return None  # nothing to inspect (a builtin): the probes below call it anyway
    takes_var_kw = any(p.kind is p.VAR_KEYWORD for p in have.values())
    for p in want:
        mine = have.get(p.name)
        if mine is None:
            if not takes_var_kw:
                return f"takes no parameter {p.name!r}{'' if p.default is p.empty else f' (default {p.default!r})'}"
            continue
        if p.kind is p.KEYWORD_ONLY and mine.kind not in (mine.KEYWORD_ONLY, mine.POSITIONAL_OR_KEYWORD):
            return f"parameter {p.name!r} must be accepted as a keyword"
        if p.default is not p.empty and mine.default != p.default:
            return f"parameter {p.name!r} defaults to {mine.default!r}, the protocol's default is {p.default!r}"
    extra = [p.name for p in have.values() if p.name not in {w.name for w in want} and p.default is p.empty]
    extra = [n for n in extra if have[n].kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if extra:
        return f"requires parameter(s) {extra} that the suite never passes"
    return None


def _member_problems(adapter: object) -> list[AdapterProblem]:
    found: list[AdapterProblem] = []
    for name in _MEMBERS:
        proto_doc = "packrt_conformance.adapter.Adapter"
        if not hasattr(adapter, name):
            found.append(AdapterProblem(name, "missing", f"add {name!r} as {proto_doc}.{name} describes"))
            continue
        value = getattr(adapter, name)
        if name in _DATA:
            if not isinstance(value, _DATA[name]):
                kind = _DATA[name].__name__
                found.append(AdapterProblem(name, f"is a {type(value).__name__}, not a {kind}", f"make it a {kind}"))
        elif name == "nn":
            lacking = [cls for cls in _NN if not hasattr(value, cls)]
            if lacking:
                found.append(AdapterProblem("nn", f"lacks {lacking}", "hand out the implementation's classes there"))
        elif not callable(value):
            found.append(
                AdapterProblem(name, f"is a {type(value).__name__}, not a method", f"define {name}() as a method")
            )
        else:
            problem = _signature_problem(name, value)
            if problem is not None:
                sig = inspect.signature(getattr(Adapter, name))
                found.append(AdapterProblem(name, problem, f"give it the protocol's signature {name}{sig}"))
    if not found:
        checked = cast(Adapter, adapter)  # every member is present: checked above
        version = checked.protocol_version
        if version != ADAPTER_PROTOCOL_VERSION:
            found.append(AdapterProblem("protocol_version", f"is {version}", f"set it to {ADAPTER_PROTOCOL_VERSION}"))
        unknown = sorted(set(checked.capabilities) - set(CAPABILITIES))
        if unknown:
            found.append(
                AdapterProblem(
                    "capabilities", f"names unknown capabilities {unknown}", f"use only {sorted(CAPABILITIES)}"
                )
            )
    return found


def _dtype_problems(impl: Adapter) -> list[AdapterProblem]:
    found: list[AdapterProblem] = []
    for name in DTYPE_NAMES:
        if name == "bfloat16" and "bfloat16" not in impl.capabilities:
            continue
        try:
            impl.dtype(name)
            got = impl.dtype_name(impl.tensor([1, 0], name))
        except Exception as err:  # any failure is the adapter's to fix
            found.append(
                AdapterProblem("dtype / tensor", f"dtype name {name!r} fails ({type(err).__name__}: {err})", _DTYPE_FIX)
            )
            continue
        if got != name:
            found.append(AdapterProblem("dtype_name", f"a tensor made as {name!r} reads back as {got!r}", _DTYPE_FIX))
    return found


_DTYPE_FIX = f"map every canonical dtype name ({', '.join(DTYPE_NAMES)}) both ways: dtype(name) and dtype_name(t)"


def _meta_problems(impl: Adapter) -> list[AdapterProblem]:
    """The protocol's meta_init: modules built inside declare storage-free tensors."""
    found: list[AdapterProblem] = []
    helpers: list[tuple[str, Callable[[], Any]]] = [("linear", lambda: impl.linear(2, 3))]
    if "quantized-layers" in impl.capabilities:
        helpers.append(("quantized_linear", lambda: impl.quantized_linear(4, 4)))
    for name, build in helpers:
        try:
            with impl.meta_init():
                layer = build()
            stored = [n for n, t in layer.named_parameters() if impl.has_storage(t)]
        except Exception as err:
            found.append(AdapterProblem(name, f"fails inside meta_init() ({type(err).__name__}: {err})", _META_FIX))
            continue
        if stored:
            found.append(
                AdapterProblem(
                    name,
                    f"built inside meta_init(), its {stored} hold real storage (has_storage is True)",
                    "do not pass an explicit device (or any argument that overrides the region) when "
                    f"meta_init() is active; {_META_FIX}",
                )
            )
    return found


_META_FIX = "build layers so an enclosing meta_init() applies, or drop the 'meta-init' capability"


# -- the nn surface and tensor operations every run relies on, whatever the capabilities ---------------
def _surface_module(impl: Adapter) -> None:
    """nn.Module() with no argument; a subclass calling super().__init__() files a Parameter
    assigned as an attribute, and named_parameters lists it."""

    class Holder(impl.nn.Module):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            super().__init__()
            self.w = impl.parameter([1.0])

    impl.nn.Module()
    listed = [name for name, _ in Holder().named_parameters()]
    if listed != ["w"]:
        raise AssertionError(f"a Parameter assigned in a subclass's __init__ is listed as {listed}, not ['w']")


def _surface_sequential(impl: Adapter) -> None:
    """nn.Sequential(a, b) from modules given positionally; its children are named '0', '1' and
    seq[0] / seq[1] return them (the suite indexes it and walks 'layers.3' paths)."""
    a, b = impl.nn.Module(), impl.nn.Module()
    seq = impl.nn.Sequential(a, b)
    names = [name for name, _ in seq.named_children()]
    if names != ["0", "1"]:
        raise AssertionError(f"nn.Sequential(a, b) names its children {names}, not ['0', '1']")
    try:
        first, second = seq[0], seq[1]
    except Exception as err:
        raise AssertionError(f"nn.Sequential cannot be indexed: seq[0] raised {type(err).__name__}: {err}") from err
    if first is not a or second is not b:
        raise AssertionError("nn.Sequential(a, b)[0] / [1] are not a and b themselves")


def _surface_tensor_classes(impl: Adapter) -> None:
    """nn.Parameter and nn.Buffer are classes: parameter() returns an nn.Parameter instance and
    buffer() an object that register_buffer files (the suite tests isinstance against both)."""
    if not isinstance(impl.nn.Parameter, type) or not isinstance(impl.parameter([1.0]), impl.nn.Parameter):
        raise AssertionError("parameter() does not return an instance of the class nn.Parameter")
    if not isinstance(impl.nn.Buffer, type):
        raise AssertionError("nn.Buffer is not a class")
    m = impl.nn.Module()
    m.register_buffer("b", impl.buffer([1.0]))
    if [name for name, _ in m.named_buffers()] != ["b"]:
        raise AssertionError("a buffer() object given to register_buffer is not listed by named_buffers")


def _surface_linear(impl: Adapter) -> None:
    """linear(2, 3) holds weight (shape (3, 2)) and bias (shape (3,)), bias=False leaves bias None,
    tuple(t.shape) reads a shape, and calling the layer on tensor([[1.0, 2.0]]) returns a tensor
    to_numpy reads with shape (1, 3)."""
    layer = impl.linear(2, 3)
    shapes = (tuple(layer.weight.shape), tuple(layer.bias.shape))
    if shapes != ((3, 2), (3,)):
        raise AssertionError(f"linear(2, 3) holds weight and bias of shapes {shapes}, not ((3, 2), (3,))")
    if impl.linear(2, 3, bias=False).bias is not None:
        raise AssertionError("linear(2, 3, bias=False).bias is not None")
    out = impl.to_numpy(layer(impl.tensor([[1.0, 2.0]])))
    if tuple(out.shape) != (1, 3):
        raise AssertionError(f"a linear(2, 3) called on a (1, 2) tensor returns shape {tuple(out.shape)}, not (1, 3)")


#: What every run builds and reads, whatever the capabilities: name -> the check (raises when it fails).
SURFACE: dict[str, Callable[[Adapter], None]] = {
    "nn.Module": _surface_module,
    "nn.Sequential": _surface_sequential,
    "nn.Parameter / nn.Buffer": _surface_tensor_classes,
    "linear": _surface_linear,
}

_SURFACE_FIX = {
    "nn.Module": "hand out the implementation's Module class as nn.Module",
    "nn.Sequential": "hand out a Sequential that takes modules positionally, names them '0', '1', ... and "
    "returns the i-th one for seq[i]",
    "nn.Parameter / nn.Buffer": "hand out the Parameter and Buffer classes, and build parameter() / buffer() from them",
    "linear": "build a layer with weight (out, in) and bias (out,) whose call takes a 2-d tensor",
}


def _surface_problems(impl: Adapter) -> list[AdapterProblem]:
    found: list[AdapterProblem] = []
    for name, check in SURFACE.items():
        try:
            check(impl)
        except Exception as err:
            text = str(err) if isinstance(err, AssertionError) else f"fails ({type(err).__name__}: {err})"
            found.append(AdapterProblem(name, text, _SURFACE_FIX[name]))
    return found


# -- capability probes: each calls what the capability promises ------------------------------------
def _probe_packing(impl: Adapter) -> None:
    """A Linear's first forward; then is_packed(layer) must be True."""
    layer = impl.linear(2, 3)
    layer(impl.tensor([[1.0, 2.0]]))
    if not impl.is_packed(layer):
        raise AssertionError("a Linear's first forward did not pack it (is_packed is False)")


def _probe_residency(impl: Adapter) -> None:
    """load_state_dict(..., weight_residency='packed') on a Linear."""
    layer = impl.linear(2, 3)
    layer.load_state_dict(
        {"weight": impl.tensor([[1.0, 2.0]] * 3), "bias": impl.tensor([0.0] * 3)}, weight_residency="packed"
    )


def _probe_dtype_names(impl: Adapter) -> None:
    """linear(...).to('half'); the weight must read back float16."""
    layer = impl.linear(2, 3).to("half")
    if impl.dtype_name(layer.weight) != "float16":
        raise AssertionError(f"to('half') left the weight {impl.dtype_name(layer.weight)}")


def _probe_datatype_enum(impl: Adapter) -> None:
    """linear(...).to(datatype('float16')); the weight must read back float16."""
    layer = impl.linear(2, 3).to(impl.datatype("float16"))
    if impl.dtype_name(layer.weight) != "float16":
        raise AssertionError(f"to(DataType float16) left the weight {impl.dtype_name(layer.weight)}")


def _meta_layer(impl: Adapter) -> Any:
    with impl.meta_init():
        return impl.linear(2, 3)


def _probe_meta_init(impl: Adapter) -> None:
    """linear() inside meta_init(); has_storage(weight) must be False."""
    if impl.has_storage(_meta_layer(impl).weight):
        raise AssertionError("a layer built inside meta_init() holds real storage")


def _probe_storage_free_to_empty(impl: Adapter) -> None:
    """A meta-init Linear's to_empty(device=adapter.device); the weight must stay storage-free."""
    layer = _meta_layer(impl)
    layer.to_empty(device=impl.device)
    if impl.has_storage(layer.weight):
        raise AssertionError("to_empty gave a meta-init weight real storage")


def _probe_cuda(impl: Adapter) -> None:
    """linear(...).cuda(); the weight's device must start with 'cuda'."""
    layer = impl.linear(2, 3).cuda()
    if not impl.device_of(layer.weight).startswith("cuda"):
        raise AssertionError(f"cuda() left the weight on {impl.device_of(layer.weight)}")


def _probe_bfloat16(impl: Adapter) -> None:
    """tensor([1.0], 'bfloat16'); dtype_name must read 'bfloat16'."""
    if impl.dtype_name(impl.tensor([1.0], "bfloat16")) != "bfloat16":
        raise AssertionError("a bfloat16 tensor reads back under another dtype")


def _probe_extra_state(impl: Adapter) -> None:
    """A Module subclass defining get_extra_state; state_dict must hold '_extra_state'."""

    class WithState(impl.nn.Module):  # type: ignore[name-defined,misc]
        def get_extra_state(self) -> Any:
            return {"seen": 1}

        def set_extra_state(self, state: Any) -> None:
            self.seen = state["seen"]

    if "_extra_state" not in WithState().state_dict():
        raise AssertionError("state_dict holds no '_extra_state' entry for a module that defines get_extra_state")


def _probe_forward_hooks(impl: Adapter) -> None:
    """A pre-hook and a forward hook on a Linear; a call must run both, in that order."""
    layer = impl.linear(2, 3)
    seen: list[str] = []
    layer.register_forward_pre_hook(lambda mod, args: seen.append("pre"))
    layer.register_forward_hook(lambda mod, args, out: seen.append("post"))
    layer(impl.tensor([[1.0, 2.0]]))
    if seen != ["pre", "post"]:
        raise AssertionError(f"the hooks ran as {seen}, not ['pre', 'post']")


def _probe_quantized_layers(impl: Adapter) -> None:
    """quantized_linear(4, 4) must build."""
    impl.quantized_linear(4, 4)


def _probe_transactional_load(impl: Adapter) -> None:
    """A load with a wrongly shaped bias must raise and leave the weight as it was."""
    layer = impl.linear(2, 3)
    before = impl.to_numpy(layer.weight).tolist()
    try:
        layer.load_state_dict({"weight": impl.tensor([[9.0, 9.0]] * 3), "bias": impl.tensor([1.0])})
    except Exception:  # the refusal is expected: the probe is about what it left behind
        pass
    else:
        raise AssertionError("a load with a wrongly shaped bias did not raise")
    if impl.to_numpy(layer.weight).tolist() != before:
        raise AssertionError("a load that raised had already changed the weight")


def _probe_free_memory_control(impl: Adapter) -> None:
    """short_free_memory() must be a block in which an auto-residency layer stays unpacked after a forward."""
    with impl.short_free_memory():  # type: ignore[attr-defined]
        layer = impl.linear(2, 3)
        layer.load_state_dict(
            {"weight": impl.tensor([[1.0, 2.0]] * 3), "bias": impl.tensor([0.0] * 3)},
            assign=True,
            weight_residency="auto",
        )
        layer(impl.tensor([[1.0, 2.0]]))
        if impl.is_packed(layer):
            raise AssertionError("inside short_free_memory() a weight_residency='auto' layer still packed")


def _probe_threads(impl: Adapter) -> None:
    """A Linear loaded on one worker thread and called on another must serve the loaded values there."""
    import threading

    import numpy as np

    layer = impl.linear(2, 1)
    out: list[Any] = []
    errors: list[BaseException] = []

    def run(step: Callable[[], Any]) -> None:
        def body() -> None:
            try:
                out.append(step())
            except BaseException as err:  # handed back to the probe's thread
                errors.append(err)

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        thread.join(10.0)
        if thread.is_alive():
            raise AssertionError("a load or a call on a worker thread did not finish within 10 s")
        if errors:
            raise errors[0]

    run(lambda: layer.load_state_dict({"weight": impl.tensor([[2.0, 3.0]]), "bias": impl.tensor([1.0])}))
    run(lambda: impl.to_numpy(layer(impl.tensor([[1.0, 1.0]]))))
    if not np.allclose(out[-1], [[6.0]]):
        raise AssertionError(f"a call on a worker thread returned {out[-1].tolist()}, not the loaded layer's [[6.0]]")


#: capability -> the probe that calls what it promises (raises when the promise is not kept).
PROBES: dict[str, Callable[[Adapter], None]] = {
    "packing": _probe_packing,
    "residency": _probe_residency,
    "dtype-names": _probe_dtype_names,
    "datatype-enum": _probe_datatype_enum,
    "storage-free-to-empty": _probe_storage_free_to_empty,
    "meta-init": _probe_meta_init,
    "cuda": _probe_cuda,
    "bfloat16": _probe_bfloat16,
    "extra-state": _probe_extra_state,
    "forward-hooks": _probe_forward_hooks,
    "quantized-layers": _probe_quantized_layers,
    "transactional-load": _probe_transactional_load,
    "free-memory-control": _probe_free_memory_control,
    "threads": _probe_threads,
}


def _capability_problems(impl: Adapter) -> list[AdapterProblem]:
    found: list[AdapterProblem] = []
    for cap in sorted(impl.capabilities):
        probe = PROBES.get(cap)
        if probe is None:
            continue  # an unknown name is reported with the members
        try:
            probe(impl)
        except Exception as err:
            found.append(
                AdapterProblem(
                    "capabilities",
                    f"declares {cap!r} ({CAPABILITIES[cap]}) but the probe failed: {type(err).__name__}: {err}",
                    f"drop {cap!r} from capabilities, or fix the adapter helper the probe calls",
                )
            )
    return found


def adapter_problems(adapter: object) -> list[AdapterProblem]:
    """Every adapter mistake found: members and signatures first; when those hold, the nn surface and
    tensor operations every run relies on (:data:`SURFACE`), the dtype names, meta_init (when
    declared) and one probe per declared capability."""
    found = _member_problems(adapter)
    if found:
        return found  # the behavioural checks would only trip over the same gaps
    impl: Adapter = adapter  # type: ignore[assignment]
    found += _surface_problems(impl)
    found += _dtype_problems(impl)
    if "meta-init" in impl.capabilities:
        found += _meta_problems(impl)
    found += _capability_problems(impl)
    return found


def format_problems(spec: str, problems: list[AdapterProblem]) -> str:
    """The report ``--check-adapter`` prints."""
    if not problems:
        return (
            f"packrt-conformance: adapter {spec} checked: every member, the nn surface, dtype name and capability holds"
        )
    lines = [f"packrt-conformance: adapter {spec} has {len(problems)} problem(s) (no clause was run):"]
    return "\n".join([*lines, *(f"  {p}" for p in problems)])
