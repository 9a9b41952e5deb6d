"""Every operation goes through the backend registered for the tensor's device."""

from __future__ import annotations

from typing import Any

import pytest

import packrt_core as prt
from packrt_core import dispatch
from packrt_core.errors import DeviceUnavailableError


class Recording:
    """Wraps a backend and records the name of each kernel called."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if callable(attr) and name not in ("is_available", "device_count", "unavailable_reason"):

            def record(*args: Any, **kwargs: Any) -> Any:
                self.calls.append(name)
                return attr(*args, **kwargs)

            return record
        return attr


def test_each_operation_is_routed_through_the_registered_backend() -> None:
    recorder = Recording(dispatch.get_backend("cpu"))
    with dispatch.use_backend("cpu", recorder):
        a = prt.ones(2, 2)
        b = prt.randn(2, 2)
        c = (a + b) @ a
        c.sum()
        c.add_(1.0)
        c.copy_(a)
        a.to(prt.float16)
        _ = -a
    assert recorder.calls == [
        "full",
        "random",
        "binary",
        "matmul",
        "reduce",
        "inplace",
        "copy_into",
        "astype",
        "unary",
    ]


def test_the_previous_backend_returns_after_the_block() -> None:
    before = dispatch.get_backend("cpu")
    with dispatch.use_backend("cpu", Recording(before)):
        pass
    assert dispatch.get_backend("cpu") is before


def test_a_device_type_without_a_backend_says_what_to_install() -> None:
    with dispatch.use_backend("cuda", None):  # type: ignore[arg-type]
        dispatch._backends.pop("cuda", None)
        original = dispatch._discover
        dispatch._discover = lambda device_type: None  # type: ignore[assignment]
        try:
            with pytest.raises(DeviceUnavailableError, match=r"no packrt backend serves cuda:0.*packrt\[cuda\]"):
                dispatch.backend_for(prt.Device("cuda"))
        finally:
            dispatch._discover = original  # type: ignore[assignment]
