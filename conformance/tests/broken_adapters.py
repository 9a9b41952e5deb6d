"""Adapters with a mistake in the adapter itself (not in the implementation), derived from the torch one."""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from packrt_conformance.adapters.torch_adapter import TorchAdapter


class DevicePinned(TorchAdapter):
    """Helpers that pass device='cpu' explicitly, which defeats the meta-init region (a device context)."""

    def tensor(self, data: Any, dtype: str = "float32") -> Any:
        return self._torch.tensor(np.asarray(data).tolist(), dtype=self.dtype(dtype), device="cpu")

    def linear(self, in_features: int, out_features: int, bias: bool = True) -> Any:
        layer = self._torch.nn.Linear(in_features, out_features, bias=bias, device="cpu")
        layer.requires_grad_(False)
        return layer


def _without(member: str) -> type:
    """The torch adapter's class with ``member`` taken out (the class body, not an override)."""
    body = {k: v for k, v in vars(TorchAdapter).items() if k not in (member, "__dict__", "__weakref__")}
    return type(f"TorchWithout_{member}", (), body)


NoRawBytes = _without("raw_bytes")


class TensorWithoutDtype(TorchAdapter):
    """tensor() that cannot take the dtype the suite passes."""

    def tensor(self, data: Any) -> Any:  # type: ignore[override]
        return super().tensor(data)


class ClaimsPacking(TorchAdapter):
    """Declares packing (and dtype names in to()), which torch does not have."""

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.capabilities = self.capabilities | {"packing", "dtype-names"}


class SequentialWithoutIndexing(TorchAdapter):
    """An nn namespace whose Sequential builds and runs but cannot be indexed (seq[i])."""

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        real = self._torch.nn

        class Sequential(real.Sequential):  # type: ignore[misc]
            def __getitem__(self, idx: Any) -> Any:
                raise TypeError("'Sequential' object is not subscriptable")

        names = ("Module", "Parameter", "Buffer", "Linear")
        self.nn = types.SimpleNamespace(**{n: getattr(real, n) for n in names}, Sequential=Sequential)
