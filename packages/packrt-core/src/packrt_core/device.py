"""Devices: where a tensor's storage lives ("cpu", "cuda:0", ...)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from packrt_core.errors import DeviceError

_KNOWN_TYPES: Final = ("cpu", "cuda")
_SPEC: Final = re.compile(r"^(?P<type>[a-z]+)(?::(?P<index>\d+))?$")


@dataclass(frozen=True, slots=True, init=False, eq=False, repr=False)
class Device:
    """A device: ``Device("cpu")``, ``Device("cuda")`` (the first GPU), ``Device("cuda:1")``.

    ``Device("cuda")`` means ``cuda:0``: the two compare equal and print as ``cuda:0``.
    The CPU has no index. Devices are immutable, hashable and compare by value (a device
    string compares equal to the device it names).
    """

    type: str
    index: int | None

    def __init__(self, spec: str | Device, index: int | None = None) -> None:
        if isinstance(spec, Device):
            dev_type, dev_index = spec.type, spec.index
            if index is not None:
                raise DeviceError(f"Device({spec!s}, {index}) gives the index twice")
        elif isinstance(spec, str):
            dev_type, dev_index = _parse(spec, index)
        else:
            raise DeviceError(f"cannot read {spec!r} as a device: expected a Device or a string like 'cuda:0'")
        # A frozen dataclass sets its fields this way in a hand-written __init__ (it parses a spec).
        object.__setattr__(self, "type", dev_type)
        object.__setattr__(self, "index", dev_index)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = Device(other)
            except DeviceError:
                return False
        return isinstance(other, Device) and other.type == self.type and other.index == self.index

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return (
            f"device(type={self.type!r})" if self.index is None else f"device(type={self.type!r}, index={self.index})"
        )

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (Device, (str(self),))


def _parse(spec: str, index: int | None) -> tuple[str, int | None]:
    match = _SPEC.match(spec.strip())
    if match is None:
        raise DeviceError(f"malformed device string {spec!r}: expected 'cpu', 'cuda' or 'cuda:<index>'")
    dev_type = match["type"]
    if dev_type not in _KNOWN_TYPES:
        raise DeviceError(f"unknown device type {dev_type!r} in {spec!r}: expected one of {', '.join(_KNOWN_TYPES)}")
    parsed = int(match["index"]) if match["index"] is not None else None
    if parsed is not None and index is not None:
        raise DeviceError(f"Device({spec!r}, {index}) gives the index twice")
    chosen = parsed if parsed is not None else index
    if dev_type == "cpu":
        if chosen not in (None, 0):
            raise DeviceError(f"the cpu device has no index {chosen} (in {spec!r}): write 'cpu'")
        return "cpu", None
    if chosen is not None and chosen < 0:
        raise DeviceError(f"device index must be >= 0, got {chosen}")
    return dev_type, 0 if chosen is None else chosen


CPU: Final = Device("cpu")

DeviceLike = Device | str | int


def as_device(value: Any) -> Device:
    """A Device from a Device, a string, or an int (a CUDA ordinal, as PyTorch reads it)."""
    if isinstance(value, Device):
        return value
    if isinstance(value, bool):
        raise DeviceError(f"cannot read {value!r} as a device")
    if isinstance(value, int):
        return Device("cuda", value)
    return Device(value)
