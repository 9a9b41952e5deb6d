"""Adapters with a mistake in the adapter itself (not in the implementation), derived from the torch one."""

from __future__ import annotations

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
