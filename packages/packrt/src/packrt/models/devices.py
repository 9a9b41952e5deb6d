"""Where a model computes, and how host arrays reach it and come back: one rule for every model.

A model computes on its parameters' device. Its inputs are built on the host (token ids, masks,
positions) and placed there; its outputs are read back on the host for pooling or sampling. On the
CPU nothing moves: the host array is viewed as a tensor and the tensor's own storage is read.
"""

from __future__ import annotations

import numpy as np

import packrt
from packrt import nn


def model_device(model: nn.Module) -> packrt.Device:
    """Where ``model`` computes: its parameters' device (the CPU for a model without any)."""
    first = next(iter(model.parameters()), None)
    return packrt.Device("cpu") if first is None else first.device


def placed(array: np.ndarray, device: packrt.Device) -> packrt.Tensor:
    """``array`` as a tensor on ``device``: a zero-copy view on the CPU, a copy placed there elsewhere
    (``Tensor.to`` is skipped when nothing moves: it costs more than a decode step's other bookkeeping)."""
    tensor = packrt.from_numpy(array)
    return tensor if device == tensor.device else tensor.to(device)


def host(tensor: packrt.Tensor) -> np.ndarray:
    """``tensor``'s values in host memory: its own storage on the CPU, ``.cpu()``'s copy elsewhere."""
    return np.asarray((tensor if tensor.device.type == "cpu" else tensor.cpu()).numpy())


__all__ = ["host", "model_device", "placed"]
