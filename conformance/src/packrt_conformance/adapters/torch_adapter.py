"""The reference adapter: PyTorch 2.13 on the CPU.

torch is imported when the adapter is built, never at import time, so the suite installs and
collects without it. Capabilities list only what torch really has: no packing, no residency, no
dtype names in ``to()``, no storage-free ``to_empty``, and no 'threads' (its load copies tensor by tensor
while calls on other threads go on, so such a call can compute from two versions of the weights).
"""

from __future__ import annotations

import importlib
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import numpy.typing as npt

from packrt_conformance.adapter import ADAPTER_PROTOCOL_VERSION

__all__ = ["TorchAdapter"]

_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "bool", "uint8")


class TorchAdapter:
    """Holds the suite to PyTorch's ``torch.nn.Module`` (the contract's model)."""

    protocol_version = ADAPTER_PROTOCOL_VERSION
    revisions = frozenset({1, 2})

    def __init__(self, device: str = "cpu") -> None:
        # The adapter is the one place torch is imported; through importlib so that the suite
        # type-checks without torch installed (torch is an optional extra).
        torch: Any = importlib.import_module("torch")
        self._torch = torch
        self.name = "torch"
        self.version = str(torch.__version__)
        self.revision = 2
        self.device = device
        caps = {"meta-init", "bfloat16", "extra-state", "forward-hooks"}
        if torch.cuda.is_available():
            caps.add("cuda")
        self.capabilities = frozenset(caps)
        self.nn = torch.nn

    def set_revision(self, revision: int) -> None:
        # torch has one behaviour; the only rule that differs between revisions needs packing.
        if revision not in self.revisions:
            raise ValueError(f"torch adapter: revision {revision} is not one of {sorted(self.revisions)}")
        self.revision = revision

    def dtype(self, name: str) -> Any:
        if name not in _DTYPES:
            raise KeyError(f"torch adapter: unknown dtype name {name!r}; known: {', '.join(_DTYPES)}")
        return getattr(self._torch, name)

    def dtype_name(self, tensor: Any) -> str:
        return str(tensor.dtype).removeprefix("torch.")

    def datatype(self, name: str) -> Any:
        raise NotImplementedError("torch has no DataType enumeration (capability 'datatype-enum')")

    def tensor(self, data: Any, dtype: str = "float32") -> Any:
        # No explicit device on the cpu: an enclosing meta-init region (a device context) must apply.
        device = None if self.device == "cpu" else self.device
        return self._torch.tensor(np.asarray(data).tolist(), dtype=self.dtype(dtype), device=device)

    def parameter(self, data: Any, dtype: str = "float32") -> Any:
        return self._torch.nn.Parameter(self.tensor(data, dtype), requires_grad=False)

    def buffer(self, data: Any, dtype: str = "float32", *, persistent: bool = True) -> Any:
        return self._torch.nn.Buffer(self.tensor(data, dtype), persistent=persistent)

    def to_numpy(self, tensor: Any) -> npt.NDArray[Any]:
        t = tensor.detach()
        if t.dtype in (self._torch.float16, self._torch.bfloat16):
            t = t.float()
        return np.array(t.cpu().numpy(), copy=True)

    def device_of(self, tensor: Any) -> str:
        return str(tensor.device)

    def shares_storage(self, a: Any, b: Any) -> bool:
        if a.device.type == "meta" or b.device.type == "meta":
            return False
        return bool(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())

    def has_storage(self, tensor: Any) -> bool:
        return bool(tensor.device.type != "meta")

    def write_(self, tensor: Any, data: Any) -> None:
        with self._torch.no_grad():
            tensor.copy_(self.tensor(data, self.dtype_name(tensor)))

    def meta_init(self) -> AbstractContextManager[Any]:
        region: AbstractContextManager[Any] = self._torch.device("meta")
        return region

    def linear(self, in_features: int, out_features: int, bias: bool = True) -> Any:
        device = None if self.device == "cpu" else self.device
        layer = self._torch.nn.Linear(in_features, out_features, bias=bias, device=device)
        layer.requires_grad_(False)
        return layer

    def quantized_linear(self, in_features: int, out_features: int) -> Any:
        raise NotImplementedError("torch adapter declares no 'quantized-layers' capability")

    def is_packed(self, module: Any) -> bool:
        return False  # torch layers never pack

    def raw_bytes(self, module: Any) -> int:
        return self.resident_bytes(module)  # torch never packs: every byte it holds is raw

    def resident_bytes(self, module: Any) -> int:
        seen: set[int] = set()
        total = 0
        for t in [*module.parameters(), *module.buffers()]:
            if t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += int(storage.nbytes())
        return total
