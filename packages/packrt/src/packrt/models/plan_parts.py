"""What the serving plans (:mod:`packrt.models.encoder_plan`, :mod:`packrt.models.decoder_plan`) ask of the
modules they read: each of exactly a class the plan reproduces, its parameters holding storage, and
its arrays in float32. A module that fails is a :class:`~packrt_core.nn.plan.PlanUnavailableError`
naming it, so the model keeps its plain road."""

from __future__ import annotations

from typing import Any

import numpy as np

from packrt import nn
from packrt_core.nn.plan import PlanUnavailableError


def exact(module: Any, kind: type | tuple[type, ...], path: str, plan: str) -> Any:
    """``module`` when its class is exactly one of ``kind``, which ``plan``'s plan reproduces (a subclass
    may compute anything)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if type(module) not in kinds:
        names = " or ".join(k.__name__ for k in kinds)
        raise PlanUnavailableError(f"{path} is a {type(module).__name__}, where the {plan}'s plan serves a {names}")
    return module


def require_storage(module: nn.Module, path: str) -> None:
    """Refuse ``module`` (at ``path``) while a parameter of it has no storage (meta init, not loaded yet)."""
    for name, param in module.named_parameters():
        if not param.has_storage:
            raise PlanUnavailableError(f"{path}.{name} is storage-free (meta init, not loaded yet)")


SERVED_DTYPES = ("float32", "bfloat16", "float16")  # weights a fused form computes in float32 (float64: module road)


def require_served_dtypes(module: nn.Module) -> None:
    """Refuse ``module`` while a floating parameter of it has a dtype the fused forms do not compute in."""
    for name, param in module.named_parameters():
        if param.dtype.is_floating_point and param.dtype.name not in SERVED_DTYPES:
            raise PlanUnavailableError(f"{name} is {param.dtype.name}: the plan serves float32, bfloat16, float16")


def as_float32(a: Any) -> Any:
    """``a`` as a float32 array (itself when it is one already); None stays None."""
    return None if a is None else a.astype(np.float32) if a.dtype != np.float32 else a


__all__ = ["SERVED_DTYPES", "as_float32", "exact", "require_served_dtypes", "require_storage"]
