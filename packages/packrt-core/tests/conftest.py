"""Shared fixtures: torch as a comparison peer, required in CI (PACKRT_REQUIRE_TORCH=1), and the shim the
tests ported from PyTorch's own suite run through."""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

import packrt_core
from packrt_core import creation, dispatch
from packrt_core import nn as packrt_nn
from packrt_core.device import Device
from packrt_core.nn import Module, Parameter
from packrt_core.tensor import Tensor
from packrt_kernels_cpu import CpuBackend


@pytest.fixture(scope="session")
def torch() -> ModuleType:
    """torch 2.13 (CPU); skips without it, or fails when PACKRT_REQUIRE_TORCH=1 says it must be there."""
    try:
        import torch as torch_module
    except ImportError as err:
        if os.environ.get("PACKRT_REQUIRE_TORCH") == "1":
            pytest.fail(f"torch is required here (PACKRT_REQUIRE_TORCH=1) but does not import: {err}")
        pytest.skip("torch is not installed (pip install torch==2.13.0)")
    return torch_module


class _Tanh(Module):
    """Stand-in for torch.nn.Tanh (packrt has no such layer; the ported tests only need a module)."""

    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class _BatchNorm(Module):
    """Stand-in for torch.nn.BatchNorm{1,2}d's state: weight, bias and the running statistics."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.weight = Parameter(creation.ones(features))
        self.bias = Parameter(creation.zeros(features))
        self.register_buffer("running_mean", creation.zeros(features))
        self.register_buffer("running_var", creation.ones(features))
        self.register_buffer("num_batches_tracked", creation.tensor(0))

    def forward(self, x: Tensor) -> Tensor:
        return (x - self.running_mean) / (self.running_var + 1e-5).sqrt() * self.weight + self.bias


class TorchShim:
    """The names PyTorch's own nn.Module tests use, answered by packrt: what an alternative
    implementation puts between those tests and itself. ``shim.nn`` is packrt_core.nn plus the
    two stand-ins above; tensors, dtypes and devices are packrt's."""

    def __init__(self) -> None:
        self.nn = SimpleNamespace(**{name: getattr(packrt_nn, name) for name in packrt_nn.__all__})
        self.nn.Tanh = _Tanh
        self.nn.BatchNorm1d = self.nn.BatchNorm2d = _BatchNorm
        for name in ("ones", "zeros", "empty", "randn", "rand", "tensor", "arange", "full", "meta_init"):
            setattr(self, name, getattr(packrt_core, name))
        self.float32, self.float64, self.half = packrt_core.float32, packrt_core.float64, packrt_core.float16
        self.long, self.int16, self.int32, self.int64 = (
            packrt_core.int64,
            packrt_core.int16,
            packrt_core.int32,
            packrt_core.int64,
        )

    @staticmethod
    def device(spec: str) -> Device:
        return Device(spec)

    @staticmethod
    def equal(a: Any, b: Any) -> bool:
        """torch.equal: same shape and the same values."""
        return bool(a.shape == b.shape and np.array_equal(np.asarray(a), np.asarray(b)))


@pytest.fixture(scope="session")
def shim() -> TorchShim:
    """PyTorch's test vocabulary over packrt, for the tests ported from PyTorch (test_torch_ported_*)."""
    return TorchShim()


@pytest.fixture
def second_device() -> Iterator[Device]:
    """A 'cuda:0' served by a numpy backend, so device rules are testable on any machine."""
    with dispatch.use_backend("cuda", CpuBackend()):
        yield Device("cuda:0")
