"""packrt.nn: Module, Parameter, Buffer, the containers (module and parameter), the layers and residency."""

from packrt_core.nn import functional
from packrt_core.nn.activation import GELU, Dropout, ReLU, Sigmoid, SiLU, Softmax
from packrt_core.nn.blocks import BlockQuantizedEmbedding, BlockQuantizedLinear
from packrt_core.nn.containers import Identity, ModuleDict, ModuleList, Sequential
from packrt_core.nn.conv import Conv2d
from packrt_core.nn.embedding import Embedding
from packrt_core.nn.linear import Linear
from packrt_core.nn.memory import MemoryReport, MemoryRow, memory_report
from packrt_core.nn.module import Module
from packrt_core.nn.normalization import LayerNorm, RMSNorm
from packrt_core.nn.packed import PackedLayer
from packrt_core.nn.parameter import Buffer, Parameter
from packrt_core.nn.parameter_containers import ParameterDict, ParameterList
from packrt_core.nn.plan import PlanReport, plan_report, serving_plans, set_serving_plans
from packrt_core.nn.quantized import QuantizedLinear
from packrt_core.nn.residency import WEIGHT_RESIDENCIES, free_memory_override
from packrt_core.nn.state import LoadResult, _IncompatibleKeys

__all__ = [
    "BlockQuantizedEmbedding",
    "BlockQuantizedLinear",
    "Conv2d",
    "Embedding",
    "QuantizedLinear",
    "GELU",
    "Dropout",
    "LayerNorm",
    "RMSNorm",
    "ReLU",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "functional",
    "WEIGHT_RESIDENCIES",
    "Buffer",
    "Identity",
    "Linear",
    "MemoryReport",
    "MemoryRow",
    "PackedLayer",
    "LoadResult",
    "Module",
    "ModuleDict",
    "ModuleList",
    "Parameter",
    "ParameterDict",
    "ParameterList",
    "PlanReport",
    "Sequential",
    "_IncompatibleKeys",
    "free_memory_override",
    "memory_report",
    "plan_report",
    "serving_plans",
    "set_serving_plans",
]
