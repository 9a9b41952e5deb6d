"""Finding an adapter: ``module:object`` or the name of a ``packrt_conformance.adapters`` entry point.

The object may be an adapter instance, or a class / zero-argument factory returning one.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from packrt_conformance.adapter import Adapter, AdapterError, check_adapter

__all__ = ["ENTRY_POINT_GROUP", "available_adapters", "load_adapter"]

ENTRY_POINT_GROUP = "packrt_conformance.adapters"


def available_adapters() -> dict[str, str]:
    """Entry-point name -> ``module:object`` for every registered adapter."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _resolve(spec: str) -> Any:
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise AdapterError(f"--impl {spec}: cannot import module {module_name!r} ({err})") from err
        obj: Any = module
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError as err:
                raise AdapterError(f"--impl {spec}: module {module_name!r} has no {attr!r}") from err
        return obj
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == spec]
    if not matches:
        known = ", ".join(sorted(available_adapters())) or "none"
        raise AdapterError(
            f"--impl {spec}: no adapter entry point of that name (registered: {known}); "
            "pass module:object or register one in the 'packrt_conformance.adapters' group"
        )
    try:
        return matches[0].load()
    except ImportError as err:
        raise AdapterError(f"--impl {spec}: loading {matches[0].value} failed ({err})") from err


def load_adapter(spec: str) -> Adapter:
    """Load, instantiate if needed, and validate the adapter named by ``spec``."""
    obj = _resolve(spec)
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Adapter)):
        try:
            obj = obj()
        except ImportError as err:
            raise AdapterError(f"--impl {spec}: the adapter cannot start, a dependency is missing ({err})") from err
    return check_adapter(obj)
