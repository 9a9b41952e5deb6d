"""Reading the arguments of ``to(...)``, shared by Tensor.to and Module.to."""

from __future__ import annotations

from typing import Any, NamedTuple

from packrt_core.device import Device, as_device
from packrt_core.dtypes import DataType, as_dtype, dtype
from packrt_core.errors import DTypeError


class Placement(NamedTuple):
    """Where and in what dtype: either may be None, meaning "keep"."""

    device: Device | None
    dtype: dtype | None
    non_blocking: bool
    copy: bool


def _is_dtype_like(value: Any) -> bool:
    if isinstance(value, dtype | DataType):
        return True
    if isinstance(value, str):
        try:
            as_dtype(value)
        except DTypeError:
            return False
        return True
    return False


def parse_to_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Placement:
    """Read ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)`` and the
    ``device=`` / ``dtype=`` / ``non_blocking=`` / ``copy=`` keywords, as PyTorch does.

    A string argument is a dtype when it names one ("half"), otherwise a device ("cuda:0").
    Anything with both a ``device`` and a ``dtype`` (a tensor) stands for its placement.
    """
    unknown = set(kwargs) - {"device", "dtype", "non_blocking", "copy"}
    if unknown:
        raise TypeError(f"to() got unexpected keyword(s) {', '.join(sorted(unknown))}")
    device = kwargs.get("device")
    dtype_ = kwargs.get("dtype")
    rest = list(args)
    if rest and hasattr(rest[0], "device") and hasattr(rest[0], "dtype"):
        other = rest.pop(0)
        device, dtype_ = other.device, other.dtype
    elif rest and rest[0] is not None and not _is_dtype_like(rest[0]):
        if device is not None:
            raise TypeError("to() got the device both positionally and as device=")
        if not isinstance(rest[0], str | Device | int) or isinstance(rest[0], bool):
            raise TypeError(
                f"to() cannot read a {type(rest[0]).__name__} ({rest[0]!r}) as a device or dtype: expected a device "
                "('cpu', 'cuda:0', an index), a dtype (object, name or DataType) or a tensor"
            )
        device = rest.pop(0)
    elif rest and rest[0] is None:
        rest.pop(0)
    if rest and (rest[0] is None or _is_dtype_like(rest[0])):
        if dtype_ is not None:
            raise TypeError("to() got the dtype both positionally and as dtype=")
        dtype_ = rest.pop(0)
    non_blocking = bool(kwargs.get("non_blocking", False))
    copy = bool(kwargs.get("copy", False))
    if rest and isinstance(rest[0], bool):
        non_blocking = rest.pop(0)
        if rest and isinstance(rest[0], bool):
            copy = rest.pop(0)
    if rest:
        raise TypeError(
            f"to() cannot read the argument(s) {rest!r}: expected a device, a dtype (object, name or "
            "DataType), a tensor, or device=/dtype= keywords"
        )
    dev = as_device(device) if device is not None else None
    return Placement(dev, as_dtype(dtype_) if dtype_ is not None else None, non_blocking, copy)
