"""``to``, ``to_empty`` and the casts, as functions of the module they move (``Module``'s
methods of the same names delegate here).

Placement validates first (the device answers, the dtype is floating point, every layer
can serve the request) and only then moves tensors, so a refusal leaves the tree as it
was. Parameter and Buffer objects keep their identity: each is re-pointed at its new
storage, in a new lineage, so a layer notices and repacks on its next forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from packrt_core import dispatch
from packrt_core.device import Device, as_device
from packrt_core.dtypes import dtype
from packrt_core.errors import DTypeError
from packrt_core.placement import parse_to_args
from packrt_core.publication import publishing
from packrt_core.tensor import Tensor

if TYPE_CHECKING:  # module.py imports this module; at run time a module is only an argument here
    from packrt_core.nn.module import Module


def tensors_of(module: Module, recurse: bool = True) -> list[Tensor]:
    """Every parameter and buffer of the tree (or of ``module`` alone), each once."""
    seen: set[int] = set()
    out: list[Tensor] = []
    for _, t in [*module.named_parameters(recurse=recurse), *module.named_buffers(recurse=recurse)]:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def to(module: Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """``module.to(...)``: read the arguments with Tensor.to's reader in its Module form (which
    refuses ``copy``), refuse a non-float dtype."""
    target = parse_to_args(args, kwargs, module=True)
    if target.dtype is not None and not target.dtype.is_floating_point:
        raise DTypeError(
            f"Module.to casts floating-point tensors only, so the target dtype must be floating point; "
            f"got {target.dtype.name}"
        )
    place(module, target.device, target.dtype)


def place(module: Module, device: Device | None, dtype_: dtype | None) -> None:
    """Move the tree to ``device`` and cast its floating-point tensors to ``dtype_`` (None keeps)."""
    if device is not None:
        dispatch.backend_for(device)  # an unreachable device fails before anything moves
    for path, sub in module.named_modules():
        sub._check_placement(path, device, dtype_)
    with publishing():  # a forward on another thread runs wholly before the move or wholly after
        for t in tensors_of(module):
            dev = device if device is not None else t.device
            dt = dtype_ if dtype_ is not None and t.dtype.is_floating_point else t.dtype
            if dev == t.device and dt is t.dtype:
                continue
            if t.has_storage:
                t._rebind(t._placed(dev, dt), dev)
            else:
                t._declare(t.shape, dt, dev)


def to_empty(module: Module, device: Any, recurse: bool) -> None:
    """``module.to_empty(...)``: fresh uninitialized storage of each tensor's shape and dtype."""
    target = as_device(device) if device is not None else None
    if target is not None:
        dispatch.backend_for(target)
    with publishing():
        for t in tensors_of(module, recurse):
            dev = target if target is not None else t.device
            if t.has_storage:
                empty = dispatch.backend_for(dev).empty(t.shape, t.dtype.numpy, dev.index or 0)
                t._rebind(empty, dev)
            else:
                t._declare(t.shape, t.dtype, dev)
