"""packrt: a small inference runtime with a documented Module contract.

This meta-package re-exports the public API of the packrt distributions under one name:
tensors and dtypes from packrt-core at the top level, and the submodules ``packrt.nn``,
``packrt.hooks``, ``packrt.errors`` and ``packrt.cuda``.
"""

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
    float16,
    float32,
    float64,
    from_dlpack,
    from_numpy,
    full,
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
    rand,
    randn,
    set_num_threads,
    tensor,
    uint8,
    zeros,
)
from packrt_core import (
    bool as bool,
)
from packrt_core import (
    float as float,
)

__version__ = "0.2.0.dev0"
__all__ = [
    # the submodules
    "cuda",
    "errors",
    "hooks",
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
