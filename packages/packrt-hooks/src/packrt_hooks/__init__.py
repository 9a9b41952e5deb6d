"""Forward-hook machinery for packrt modules, with no dependency on packrt-core.

- :class:`HookRegistry`, :class:`RemovableHandle` and :func:`call_with_hooks` are what
  ``Module`` builds ``register_forward_pre_hook`` / ``register_forward_hook`` and
  ``__call__`` on.
- :func:`profile`, :func:`capture`, :func:`check_finite` and :func:`trace_shapes` install
  hooks on a whole module tree with one call and return one handle that removes them all.
"""

from packrt_hooks.call import call_with_hooks, unwinding_exception
from packrt_hooks.capture import Capture, capture
from packrt_hooks.errors import HookError, HookResultError, NonFiniteError, PackrtError, UnknownModuleError
from packrt_hooks.finite import FiniteCheck, check_finite, count_nonfinite
from packrt_hooks.handle import RemovableHandle, SupportsRemove
from packrt_hooks.profile import ModuleTiming, Profile, profile
from packrt_hooks.registry import Hook, HookEntry, HookRegistry, describe_hook
from packrt_hooks.trace import (
    TRACE_LOGGER_NAME,
    ShapeRecord,
    ShapeTrace,
    TensorSpec,
    describe,
    format_spec,
    trace_shapes,
)

__all__ = [
    "TRACE_LOGGER_NAME",
    "Capture",
    "FiniteCheck",
    "Hook",
    "HookEntry",
    "HookError",
    "HookRegistry",
    "HookResultError",
    "ModuleTiming",
    "NonFiniteError",
    "PackrtError",
    "Profile",
    "RemovableHandle",
    "ShapeRecord",
    "ShapeTrace",
    "SupportsRemove",
    "TensorSpec",
    "UnknownModuleError",
    "call_with_hooks",
    "capture",
    "check_finite",
    "count_nonfinite",
    "describe",
    "describe_hook",
    "format_spec",
    "profile",
    "trace_shapes",
    "unwinding_exception",
]
