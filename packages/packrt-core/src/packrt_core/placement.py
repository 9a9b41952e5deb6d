"""Reading the arguments of ``to(...)``, shared by Tensor.to and Module.to."""

from __future__ import annotations

from typing import Any, NamedTuple

from packrt_core.device import Device, as_device
from packrt_core.dtypes import DataType, as_dtype, dtype
from packrt_core.errors import DTypeError, ModuleCopyError


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


def _tensor_like(value: Any) -> bool:
    """Whether ``to()`` reads ``value`` as a tensor to match (it has both a device and a dtype)."""
    return hasattr(value, "device") and hasattr(value, "dtype")


# torch's own words (its Module.to raises them), so a search for the message finds the reason
_NO_COPY = (
    "Module.to() does not accept copy argument: it moves and casts the module's own tensors in place "
    "(as torch's Module.to, which raises '.to() does not accept copy argument'); for a copy of the "
    "module, copy it first: copy.deepcopy(module).to(...)"
)


def _check_module_positionals(args: tuple[Any, ...]) -> None:
    """Refuse, as TypeError, the positional forms PyTorch's ``Module.to`` refuses: it takes
    ``(device[, dtype[, non_blocking]])``, ``(dtype[, non_blocking])`` or ``(tensor[, non_blocking])``."""
    for i, arg in enumerate(args):
        is_tensor = _tensor_like(arg)
        known = arg is None or isinstance(arg, Device | str | int) or is_tensor or _is_dtype_like(arg)
        if not known or (is_tensor and i > 0):
            raise TypeError(
                f"Module.to() cannot read argument {i}, a {type(arg).__name__}: expected to(device), to(dtype), "
                "to(device, dtype) or to(tensor), with non_blocking=True as a keyword or after a dtype or tensor"
            )
    if len(args) >= 2 and isinstance(args[1], bool) and not (_is_dtype_like(args[0]) or _tensor_like(args[0])):
        raise TypeError(
            f"Module.to({args[0]!r}, {args[1]!r}): a bool after a device stands where the dtype goes; "
            "pass non_blocking= as a keyword: to(device, non_blocking=True)"
        )


def _read_device(rest: list[Any], device: Any) -> Any:
    """Take a leading device argument off ``rest`` (a None placeholder too); return the device."""
    if rest and rest[0] is None:
        rest.pop(0)
    elif rest and not _is_dtype_like(rest[0]):
        if device is not None:
            raise TypeError("to() got the device both positionally and as device=")
        if not isinstance(rest[0], str | Device | int) or isinstance(rest[0], bool):
            raise TypeError(
                f"to() cannot read a {type(rest[0]).__name__} ({rest[0]!r}) as a device or dtype: expected a device "
                "('cpu', 'cuda:0', an index), a dtype (object, name or DataType) or a tensor"
            )
        device = rest.pop(0)
    return device


def parse_to_args(args: tuple[Any, ...], kwargs: dict[str, Any], *, module: bool = False) -> Placement:
    """Read ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)`` and the
    ``device=`` / ``dtype=`` / ``non_blocking=`` / ``copy=`` keywords, as PyTorch does: the one
    reader of ``Tensor.to`` and (``module=True``) ``Module.to``.

    A string argument is a dtype when it names one ("half"), otherwise a device ("cuda:0").
    Anything with both a ``device`` and a ``dtype`` (a tensor) stands for its placement. With
    ``module=True`` the positional forms are PyTorch's ``Module.to``'s, and ``copy`` (keyword or
    the second positional bool) is refused as it refuses it, with :class:`ModuleCopyError` (a
    RuntimeError, as torch raises, and a TypeError): a module moves in place.
    """
    unknown = set(kwargs) - {"device", "dtype", "non_blocking", "copy"}
    if unknown:
        raise TypeError(f"to() got unexpected keyword(s) {', '.join(sorted(unknown))}")
    if module:
        if "copy" in kwargs:
            raise ModuleCopyError(_NO_COPY)
        _check_module_positionals(args)
    device = kwargs.get("device")
    dtype_ = kwargs.get("dtype")
    rest = list(args)
    if rest and _tensor_like(rest[0]):
        other = rest.pop(0)
        device, dtype_ = other.device, other.dtype
    else:
        device = _read_device(rest, device)
    if rest and (rest[0] is None or _is_dtype_like(rest[0])):
        if dtype_ is not None:
            raise TypeError("to() got the dtype both positionally and as dtype=")
        dtype_ = rest.pop(0)
    non_blocking = bool(kwargs.get("non_blocking", False))
    copy = bool(kwargs.get("copy", False))
    if rest and isinstance(rest[0], bool):
        non_blocking = rest.pop(0)
        if rest and isinstance(rest[0], bool):
            if module:
                raise ModuleCopyError(_NO_COPY)
            copy = rest.pop(0)
    if rest:
        raise TypeError(
            f"to() cannot read the argument(s) {rest!r}: expected a device, a dtype (object, name or "
            "DataType), a tensor, or device=/dtype= keywords"
        )
    dev = as_device(device) if device is not None else None
    return Placement(dev, as_dtype(dtype_) if dtype_ is not None else None, non_blocking, copy)
