"""to, to_empty and the casts (mixed into :class:`packrt_core.nn.Module`).

Placement validates first (the device answers, the dtype is floating point, every layer
can serve the request) and only then moves tensors, so a refusal leaves the tree as it
was. Parameter and Buffer objects keep their identity: each is re-pointed at its new
storage, in a new lineage, so a layer notices and repacks on its next forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Self

from packrt_core import dispatch
from packrt_core.device import Device, as_device
from packrt_core.dtypes import bfloat16, dtype, float16, float32, float64
from packrt_core.errors import DTypeError
from packrt_core.placement import parse_to_args
from packrt_core.tensor import Tensor

if TYPE_CHECKING:
    from packrt_core.nn.module import Module
    from packrt_core.nn.parameter import Parameter


class PlacementMethods:
    """The placement half of Module."""

    if TYPE_CHECKING:

        def named_modules(
            self, memo: set[Module] | None = None, prefix: str = "", remove_duplicate: bool = True
        ) -> Iterator[tuple[str, Module]]: ...
        def named_parameters(
            self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
        ) -> Iterator[tuple[str, Parameter]]: ...
        def named_buffers(
            self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
        ) -> Iterator[tuple[str, Tensor]]: ...

    def _tensors(self, recurse: bool = True) -> list[Tensor]:
        """Every parameter and buffer of the tree (or of this module), each once."""
        seen: set[int] = set()
        out: list[Tensor] = []
        for _, t in [*self.named_parameters(recurse=recurse), *self.named_buffers(recurse=recurse)]:
            if id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        return out

    def to(self, *args: Any, **kwargs: Any) -> Self:
        """Move the tree to a device, cast its floating-point tensors to a dtype, or both, in
        place; returns the module. Takes ``to(device)``, ``to(dtype)`` (object, name or
        DataType), ``to(device, dtype)``, ``to(tensor)`` and ``device=`` / ``dtype=`` /
        ``non_blocking=``. Integer and bool tensors keep their dtype. A layer that cannot
        serve the request raises before anything changes."""
        target = parse_to_args(args, kwargs)
        if target.dtype is not None and not target.dtype.is_floating_point:
            raise DTypeError(
                f"Module.to casts floating-point tensors only, so the target dtype must be floating point; "
                f"got {target.dtype.name}"
            )
        return self._place(target.device, target.dtype)

    def _place(self, device: Device | None, dtype_: dtype | None) -> Self:
        if device is not None:
            dispatch.backend_for(device)  # an unreachable device fails before anything moves
        for path, module in self.named_modules():
            module._check_placement(path, device, dtype_)
        for t in self._tensors():
            dev = device if device is not None else t.device
            dt = dtype_ if dtype_ is not None and t.dtype.is_floating_point else t.dtype
            if dev == t.device and dt is t.dtype:
                continue
            if t.has_storage:
                t._rebind(t._placed(dev, dt), dev)
            else:
                t._declare(t.shape, dt, dev)
        return self

    def cpu(self) -> Self:
        """Move the tree to the CPU: ``to("cpu")``."""
        return self._place(Device("cpu"), None)

    def cuda(self, device: int | Device | str | None = None) -> Self:
        """Move the tree to a CUDA device: the first by default, or the given index or device."""
        return self._place(Device("cuda") if device is None else as_device(device), None)

    def half(self) -> Self:
        """Cast the floating-point tensors to float16."""
        return self._place(None, float16)

    def float(self) -> Self:
        """Cast the floating-point tensors to float32."""
        return self._place(None, float32)

    def double(self) -> Self:
        """Cast the floating-point tensors to float64."""
        return self._place(None, float64)

    def bfloat16(self) -> Self:
        """Cast the floating-point tensors to bfloat16."""
        return self._place(None, bfloat16)

    def to_empty(self, *, device: Any, recurse: bool = True) -> Self:
        """Give every parameter and buffer fresh, uninitialized storage of its shape and dtype
        on ``device`` (None keeps each tensor's device), copying no values. A storage-free
        tensor from meta init re-declares there and stays storage-free until
        ``load_state_dict(..., assign=True)`` binds it. ``recurse=False`` stops at this
        module's own tensors."""
        target = as_device(device) if device is not None else None
        if target is not None:
            dispatch.backend_for(target)
        for t in self._tensors(recurse):
            dev = target if target is not None else t.device
            if t.has_storage:
                empty = dispatch.backend_for(dev).empty(t.shape, t.dtype.numpy, dev.index or 0)
                t._rebind(empty, dev)
            else:
                t._declare(t.shape, t.dtype, dev)
        return self
