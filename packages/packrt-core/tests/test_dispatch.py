"""Every operation goes through the backend registered for the tensor's device: one road."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

import packrt_core as prt
from packrt_base.kernels import Kernels
from packrt_core import dispatch, nn
from packrt_core.errors import DeviceUnavailableError
from packrt_core.nn import functional as F  # noqa: N812
from packrt_kernels_cpu import CpuBackend


class Recording:
    """Wraps a module-like object and records the name of each function called through it."""

    def __init__(self, inner: Any, calls: list[str]) -> None:
        self._inner = inner
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or isinstance(attr, type):
            return attr

        def record(*args: Any, **kwargs: Any) -> Any:
            self._calls.append(name)
            return attr(*args, **kwargs)

        return record


class RecordingBackend(CpuBackend):
    """The CPU backend with its namespace and kernels wrapped by recorders."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.xp = Recording(self.xp, self.calls)  # type: ignore[assignment]
        self.kernels = Recording(self.kernels, self.calls)  # type: ignore[assignment]


def test_tensor_arithmetic_calls_the_backends_array_namespace() -> None:
    recorder = RecordingBackend()
    with dispatch.use_backend("cpu", recorder):
        a = prt.ones(2, 2)
        b = prt.randn(2, 2)
        c = (a + b) @ a
        c.sum()
        c.add_(1.0)
        c.copy_(a)
        _ = -a
    # randn draws on the host and arrives through from_host (asarray)
    assert recorder.calls == ["full", "asarray", "add", "matmul", "sum", "add", "copyto", "negative"]


def test_functional_and_every_layer_reach_kernels_through_the_backend() -> None:
    recorder = RecordingBackend()
    with dispatch.use_backend("cpu", recorder):
        x = prt.randn(2, 4)
        F.gelu(x)
        nn.Linear(4, 3)(x)
        nn.Linear(4, 3, weight_residency="borrowed")(x)
        nn.Embedding(5, 4)(prt.tensor([[1, 2]]))
        nn.LayerNorm(4)(x)
    kernels = [name for name in recorder.calls if name in {f.name for f in fields(Kernels)}]
    assert kernels == ["gelu", "pack_linear", "borrow_linear", "pack_embedding", "layer_norm"]


def test_the_previous_backend_returns_after_the_block() -> None:
    before = dispatch.get_backend("cpu")
    with dispatch.use_backend("cpu", RecordingBackend()):
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
