"""Finding an adapter: ``module:object`` or the name of a ``packrt_conformance.adapters`` entry point.

The object may be an adapter instance, or a class / factory returning one. A factory is called with
no arguments, or with ``device=`` when the run asks for a device and the factory takes that keyword;
either way the adapter that comes back must report the device the run asked for.
"""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import entry_points
from typing import Any

from packrt_conformance.adapter import Adapter, AdapterError, check_adapter

__all__ = ["ENTRY_POINT_GROUP", "available_adapters", "build_adapter", "load_adapter"]

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


def _takes_device(factory: Any) -> bool:
    """Whether ``factory`` accepts a ``device`` keyword (named, or through ``**kwargs``)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        (p.name == "device" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)) or p.kind is p.VAR_KEYWORD
        for p in params
    )


def build_adapter(spec: str, device: str | None = None) -> object:
    """The object ``spec`` names, instantiated when it is a class or factory, not yet validated."""
    obj = _resolve(spec)
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Adapter)):
        kwargs = {"device": device} if device is not None and _takes_device(obj) else {}
        try:
            obj = obj(**kwargs)
        except ImportError as err:
            raise AdapterError(f"--impl {spec}: the adapter cannot start, a dependency is missing ({err})") from err
    return obj


def load_adapter(spec: str, device: str | None = None) -> Adapter:
    """Load, instantiate if needed, and validate the adapter named by ``spec``.

    ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...) is handed to the adapter's factory when it
    takes a ``device`` keyword; None keeps the adapter's own default. An adapter that ends up on
    another device than the one asked for is refused, so a report never names the wrong device.
    """
    adapter = check_adapter(build_adapter(spec, device))
    if device is not None and adapter.device != device:
        raise AdapterError(
            f"--impl {spec} --device {device}: adapter {adapter.name!r} runs on {adapter.device!r} and takes no "
            "device argument; give its class or factory a 'device' keyword, or drop --device"
        )
    return adapter
