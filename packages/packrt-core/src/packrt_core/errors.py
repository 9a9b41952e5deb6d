"""One exception hierarchy for packrt.

Every error packrt raises on purpose derives from :class:`PackrtError` *and* from the
builtin exception a Python user would already catch for that kind of failure, so
``except ValueError`` keeps working and ``except packrt.errors.PackrtError`` catches
everything packrt meant to raise. The root class comes from packrt-base, the bottom of the
stack, and the hook errors from packrt-hooks.
"""

from __future__ import annotations

from packrt_base.errors import PackrtError
from packrt_hooks.errors import HookError, HookResultError, NonFiniteError, UnknownModuleError


class DTypeError(PackrtError, TypeError):
    """A dtype is unknown, or an operation cannot produce or accept the dtype involved."""


class DeviceError(PackrtError, ValueError):
    """A device string is malformed, or tensors on different devices met in one operation."""


class DeviceUnavailableError(PackrtError, RuntimeError):
    """A device was asked for that this process cannot reach (no backend, no GPU)."""


class ShapeError(PackrtError, ValueError):
    """Shapes do not fit: broadcasting, matmul, reshape, an in-place write, a load."""


class IndexingError(PackrtError, IndexError):
    """An index or a dimension is out of range for a tensor's shape."""


class StorageFreeError(PackrtError, RuntimeError):
    """A storage-free tensor (declared under meta init) was read or written as if it had values."""


class DLPackError(PackrtError, TypeError):
    """A DLPack exchange was asked for that the two sides cannot make."""


class RegistrationError(PackrtError, KeyError):
    """A parameter, buffer or child name is malformed or taken by another kind of attribute."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


class ModuleInitError(PackrtError, AttributeError):
    """A module was used before ``super().__init__()`` ran in its ``__init__``."""


class ModulePathError(PackrtError, AttributeError):
    """A dotted path (``get_submodule("encoder.layers.3")``) names nothing, or the wrong kind of thing."""


class StateDictError(PackrtError, RuntimeError):
    """``load_state_dict`` refused a checkpoint (keys, shapes, dtypes, storage)."""


class ResidencyError(PackrtError, ValueError):
    """An unknown weight residency, or a layer that cannot serve the one asked for."""


class ReadOnlyError(PackrtError, RuntimeError):
    """An in-place write reached a read-only tensor (an ``expand()`` view, a read-only array)."""


class RevisionError(PackrtError, ValueError):
    """A contract revision packrt does not implement was asked for."""


class ModuleCopyError(PackrtError, RuntimeError, TypeError):
    """``Module.to`` was asked for a copy (``copy=`` or a second bool): a module moves in place. A
    RuntimeError, as torch's ``Module.to`` raises; also a TypeError, what packrt 0.2 raised."""


class CheckpointError(PackrtError, ValueError):
    """A checkpoint file or index is malformed, missing, or does not match the model."""


__all__ = [
    "CheckpointError",
    "DLPackError",
    "DTypeError",
    "DeviceError",
    "DeviceUnavailableError",
    "IndexingError",
    "HookError",
    "HookResultError",
    "ModuleCopyError",
    "ModuleInitError",
    "ModulePathError",
    "RegistrationError",
    "NonFiniteError",
    "PackrtError",
    "ReadOnlyError",
    "ResidencyError",
    "RevisionError",
    "ShapeError",
    "StateDictError",
    "StorageFreeError",
    "UnknownModuleError",
]
