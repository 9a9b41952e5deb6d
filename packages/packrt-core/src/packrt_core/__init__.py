"""packrt-core: Tensor, dtypes, devices, meta init, Module and the containers (layers as they land).

Users normally ``import packrt``, which re-exports these names.
"""

from packrt_core import cuda, errors, nn
from packrt_core.creation import (
    arange,
    empty,
    empty_like,
    from_dlpack,
    from_numpy,
    full,
    full_like,
    ones,
    ones_like,
    rand,
    randn,
    tensor,
    zeros,
    zeros_like,
)
from packrt_core.device import Device
from packrt_core.dtypes import (
    DataType,
    bfloat16,
    bool_,
    dtype,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from packrt_core.dtypes import float as float
from packrt_core.meta import meta_init
from packrt_core.revision import contract_revision, current_revision
from packrt_core.runtime import get_num_threads, manual_seed, set_num_threads
from packrt_core.tensor import Tensor

bool = bool_
half, double, long = float16, float64, int64  # torch's aliases: the same objects, not new dtypes

__version__ = "0.2.0"

__all__ = [
    "DataType",
    "Device",
    "Tensor",
    "arange",
    "bfloat16",
    "bool",
    "contract_revision",
    "current_revision",
    "cuda",
    "double",
    "dtype",
    "empty",
    "empty_like",
    "errors",
    "float",
    "float16",
    "float32",
    "float64",
    "from_dlpack",
    "from_numpy",
    "full",
    "full_like",
    "get_num_threads",
    "half",
    "int8",
    "int16",
    "int32",
    "int64",
    "long",
    "manual_seed",
    "meta_init",
    "nn",
    "ones",
    "ones_like",
    "rand",
    "randn",
    "set_num_threads",
    "tensor",
    "uint8",
    "zeros",
    "zeros_like",
]
