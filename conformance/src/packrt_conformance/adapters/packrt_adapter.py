"""The packrt adapter: holds the suite to packrt's own build.

packrt is imported when the adapter is built, never at import time, so the suite installs and
runs without packrt (and packrt never depends on its own test suite).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import numpy.typing as npt

from packrt_conformance.adapter import ADAPTER_PROTOCOL_VERSION

__all__ = ["PackrtAdapter"]


class PackrtAdapter:
    """Maps the contract's abstract operations onto ``packrt``."""

    protocol_version = ADAPTER_PROTOCOL_VERSION
    revisions = frozenset({1, 2})

    def __init__(self, device: str = "cpu") -> None:
        import packrt

        self._packrt = packrt
        self.name = "packrt"
        self.version = str(packrt.__version__)
        self.revision = 2
        self.device = device
        caps = {
            "packing",
            "residency",
            "dtype-names",
            "datatype-enum",
            "meta-init",
            "storage-free-to-empty",
            "bfloat16",
            "extra-state",
            "forward-hooks",
            "quantized-layers",
            "transactional-load",
            "free-memory-control",
            "threads",
        }
        if packrt.cuda.is_available():
            caps.add("cuda")
        self.capabilities = frozenset(caps)
        self.nn = packrt.nn
        self._switch: Any = None

    def short_free_memory(self) -> AbstractContextManager[Any]:
        """Capability 'free-memory-control': ``auto`` sees no free memory inside the block."""
        return self._packrt.nn.free_memory_override(0)

    def set_revision(self, revision: int) -> None:
        if revision not in self.revisions:
            raise ValueError(f"packrt adapter: revision {revision} is not one of {sorted(self.revisions)}")
        self._packrt.contract_revision(revision)
        self.revision = revision

    def dtype(self, name: str) -> Any:
        return getattr(self._packrt, name)

    def dtype_name(self, tensor: Any) -> str:
        return str(tensor.dtype.name)

    def datatype(self, name: str) -> Any:
        return self._packrt.DataType(name)

    def tensor(self, data: Any, dtype: str = "float32") -> Any:
        return self._packrt.tensor(np.asarray(data), dtype=dtype, device=self.device)

    def parameter(self, data: Any, dtype: str = "float32") -> Any:
        return self._packrt.nn.Parameter(self.tensor(data, dtype))

    def buffer(self, data: Any, dtype: str = "float32", *, persistent: bool = True) -> Any:
        return self._packrt.nn.Buffer(self.tensor(data, dtype), persistent=persistent)

    def to_numpy(self, tensor: Any) -> npt.NDArray[Any]:
        if tensor.dtype.name in ("float16", "bfloat16"):
            tensor = tensor.float()
        return np.array(tensor.cpu().numpy(), copy=True)

    def device_of(self, tensor: Any) -> str:
        return str(tensor.device)

    def shares_storage(self, a: Any, b: Any) -> bool:
        if not (a.has_storage and b.has_storage) or a.storage_nbytes == 0 or b.storage_nbytes == 0:
            return False
        if a.device != b.device:
            return False
        if str(a.device) == "cpu":
            return bool(np.shares_memory(a.numpy(), b.numpy()))
        # a device tensor: .cpu() would copy, so the check reads the device arrays through DLPack
        import cupy  # type: ignore[import-not-found]

        return bool(cupy.shares_memory(cupy.from_dlpack(a), cupy.from_dlpack(b)))

    def has_storage(self, tensor: Any) -> bool:
        return bool(tensor.has_storage)

    def write_(self, tensor: Any, data: Any) -> None:
        tensor.copy_(self.tensor(data, self.dtype_name(tensor)))

    def meta_init(self) -> AbstractContextManager[Any]:
        return self._packrt.meta_init()

    def linear(self, in_features: int, out_features: int, bias: bool = True) -> Any:
        return self._packrt.nn.Linear(in_features, out_features, bias=bias, device=self.device)

    def quantized_linear(self, in_features: int, out_features: int) -> Any:
        return self._packrt.nn.QuantizedLinear(in_features, out_features, device=self.device)

    def is_packed(self, module: Any) -> bool:
        return bool(getattr(module, "is_packed", False))

    def resident_bytes(self, module: Any) -> int:
        return int(sum(row.total for row in self._packrt.nn.memory_report(module)))

    def raw_bytes(self, module: Any) -> int:
        # memory_report splits a layer's bytes into raw, packed and borrowed; borrowed is raw storage
        # the layer serves from in place, so only the packed column is left out.
        return int(sum(row.raw + row.borrowed for row in self._packrt.nn.memory_report(module)))
