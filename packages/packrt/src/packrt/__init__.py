"""packrt: a small inference runtime with a documented Module contract.

This meta-package re-exports the public API of the packrt distributions under one name:
tensors and dtypes from packrt-core at the top level, and every public submodule, bound on
``import packrt``: ``packrt.nn``, ``packrt.hooks``, ``packrt.errors`` and ``packrt.cuda`` at once,
``packrt.io`` (checkpoints) and ``packrt.models`` (the reference models) on first use (PEP 562),
so ``import packrt`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from packrt import cuda, errors, hooks, nn
from packrt_core import (
    DataType,
    Device,
    Tensor,
    arange,
    bfloat16,
    contract_revision,
    current_revision,
    double,
    dtype,
    empty,
    empty_like,
    float16,
    float32,
    float64,
    from_dlpack,
    from_numpy,
    full,
    full_like,
    get_num_threads,
    half,
    int8,
    int16,
    int32,
    int64,
    long,
    manual_seed,
    meta_init,
    ones,
    ones_like,
    rand,
    randn,
    set_num_threads,
    tensor,
    uint8,
    zeros,
    zeros_like,
)
from packrt_core import (
    bool as bool,
)
from packrt_core import (
    float as float,
)

if TYPE_CHECKING:  # bound on first use by __getattr__ below; named here for the type checker
    from packrt import io, models

# Submodule -> its module, imported on first attribute access: their import costs what
# `import packrt` need not pay (safetensors I/O, the model zoo).
_LAZY_SUBMODULES = {"io": "packrt.io", "models": "packrt.models"}

__version__ = "0.2.0"
__all__ = [
    # the submodules
    "cuda",
    "errors",
    "hooks",
    "io",
    "models",
    "nn",
    # tensors and the functions that make them
    "Tensor",
    "tensor",
    "from_numpy",
    "from_dlpack",
    "arange",
    "empty",
    "full",
    "ones",
    "zeros",
    "empty_like",
    "full_like",
    "ones_like",
    "zeros_like",
    "rand",
    "randn",
    "manual_seed",
    # dtypes and their aliases
    "DataType",
    "dtype",
    "bfloat16",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
    "float",
    "half",
    "double",
    "long",
    # devices, meta init, the contract revision, threads
    "Device",
    "meta_init",
    "contract_revision",
    "current_revision",
    "get_num_threads",
    "set_num_threads",
]


def __getattr__(name: str) -> Any:
    """Bind ``packrt.io`` / ``packrt.models`` on first use (PEP 562)."""
    target = _LAZY_SUBMODULES.get(name)
    if target is None:
        raise AttributeError(f"module 'packrt' has no attribute {name!r}")
    module = importlib.import_module(target)
    globals()[name] = module
    return module


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))
