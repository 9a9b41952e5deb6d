"""A torch-free stand-in adapter, for testing the harness itself (not an implementation)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from packrt_conformance.adapter import ADAPTER_PROTOCOL_VERSION


class FakeAdapter:
    protocol_version = ADAPTER_PROTOCOL_VERSION
    name = "fake"
    version = "9.9"
    revision = 2
    revisions = frozenset({1, 2})
    device = "cpu"
    capabilities = frozenset({"forward-hooks"})
    nn: Any = None

    def set_revision(self, revision: int) -> None:
        self.revision = revision

    def tensor(self, data: Any, dtype: str = "float32") -> Any:
        return data

    parameter = buffer = tensor

    def to_numpy(self, tensor: Any) -> Any:
        return tensor

    def dtype(self, name: str) -> Any:
        return name

    def dtype_name(self, tensor: Any) -> str:
        return "float32"

    datatype = dtype

    def device_of(self, tensor: Any) -> str:
        return "cpu"

    def shares_storage(self, a: Any, b: Any) -> bool:
        return a is b

    def has_storage(self, tensor: Any) -> bool:
        return True

    def write_(self, tensor: Any, data: Any) -> None:
        return None

    def meta_init(self) -> Any:
        return nullcontext()

    def linear(self, in_features: int, out_features: int, bias: bool = True) -> Any:
        return None

    quantized_linear = linear

    def is_packed(self, module: Any) -> bool:
        return False

    def resident_bytes(self, module: Any) -> int:
        return 0

    def raw_bytes(self, module: Any) -> int:
        return 0


ADAPTER = FakeAdapter()


class DeviceFakeAdapter(FakeAdapter):
    """A fake that places its tensors on the device it is built for; 'cuda' only when told one answers."""

    def __init__(self, device: str = "cpu", *, gpu_answers: bool = False) -> None:
        self.device = device
        self.capabilities = FakeAdapter.capabilities | ({"cuda"} if gpu_answers else set())


def gpu_fake(device: str = "cpu") -> DeviceFakeAdapter:
    """A factory for a fake on a machine where a GPU answers."""
    return DeviceFakeAdapter(device, gpu_answers=True)
