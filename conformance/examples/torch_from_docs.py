"""A conformance adapter for PyTorch written from docs/conformance.md alone (the generated member
list, signatures, dtype names and capability table), to prove those pages suffice.

Run it: ``packrt-conformance --check-adapter --impl torch_from_docs:Adapter
--expectations conformance/expectations/torch.txt`` from this directory.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import numpy.typing as npt
import torch


class Adapter:
    protocol_version = 2
    name = "torch-from-docs"
    version = torch.__version__
    revision = 2
    revisions = frozenset({1, 2})
    # Only what torch really has (the capability table): no packing, residency, dtype names in to(),
    # DataType enumeration, storage-free to_empty, quantized layers or transactional loads.
    capabilities = frozenset({"meta-init", "bfloat16", "extra-state", "forward-hooks"})
    nn = torch.nn

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        if torch.cuda.is_available():
            self.capabilities = self.capabilities | {"cuda"}

    def set_revision(self, revision: int) -> None:
        if revision not in self.revisions:
            raise ValueError(f"revision {revision} is not one of {sorted(self.revisions)}")
        self.revision = revision

    def _where(self) -> str | None:
        # None on the cpu, so that an enclosing meta_init() (a device context) decides.
        return None if self.device == "cpu" else self.device

    def tensor(self, data: Any, dtype: str = "float32") -> Any:
        return torch.tensor(np.asarray(data).tolist(), dtype=self.dtype(dtype), device=self._where())

    def parameter(self, data: Any, dtype: str = "float32") -> Any:
        return torch.nn.Parameter(self.tensor(data, dtype), requires_grad=False)

    def buffer(self, data: Any, dtype: str = "float32", *, persistent: bool = True) -> Any:
        return torch.nn.Buffer(self.tensor(data, dtype), persistent=persistent)

    def to_numpy(self, tensor: Any) -> npt.NDArray[Any]:
        t = tensor.detach().cpu()
        return np.array((t.float() if t.dtype in (torch.float16, torch.bfloat16) else t).numpy(), copy=True)

    def dtype(self, name: str) -> Any:
        return getattr(torch, name)

    def dtype_name(self, tensor: Any) -> str:
        return str(tensor.dtype).removeprefix("torch.")

    def datatype(self, name: str) -> Any:
        raise NotImplementedError("no DataType enumeration (capability 'datatype-enum' not declared)")

    def device_of(self, tensor: Any) -> str:
        return str(tensor.device)

    def shares_storage(self, a: Any, b: Any) -> bool:
        if "meta" in (a.device.type, b.device.type):
            return False
        return bool(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())

    def has_storage(self, tensor: Any) -> bool:
        return bool(tensor.device.type != "meta")

    def write_(self, tensor: Any, data: Any) -> None:
        with torch.no_grad():
            tensor.copy_(self.tensor(data, self.dtype_name(tensor)))

    def meta_init(self) -> AbstractContextManager[Any]:
        region: AbstractContextManager[Any] = torch.device("meta")
        return region

    def linear(self, in_features: int, out_features: int, bias: bool = True) -> Any:
        return torch.nn.Linear(in_features, out_features, bias=bias, device=self._where()).requires_grad_(False)

    def quantized_linear(self, in_features: int, out_features: int) -> Any:
        raise NotImplementedError("no quantized layers (capability 'quantized-layers' not declared)")

    def is_packed(self, module: Any) -> bool:
        return False

    def resident_bytes(self, module: Any) -> int:
        storages: dict[int, int] = {}
        for t in [*module.parameters(), *module.buffers()]:
            if t.device.type != "meta":
                storages[t.untyped_storage().data_ptr()] = int(t.untyped_storage().nbytes())
        return sum(storages.values())

    def raw_bytes(self, module: Any) -> int:
        return self.resident_bytes(module)  # torch never packs: all it holds is raw
