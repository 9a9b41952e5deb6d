"""packrt.nn: Module, Parameter, Buffer and the containers (layers land with the layers issue)."""

from packrt_core.nn.containers import Identity, ModuleDict, ModuleList, Sequential
from packrt_core.nn.module import Module
from packrt_core.nn.parameter import Buffer, Parameter
from packrt_core.nn.state import WEIGHT_RESIDENCIES, LoadResult, _IncompatibleKeys

__all__ = [
    "WEIGHT_RESIDENCIES",
    "Buffer",
    "Identity",
    "LoadResult",
    "Module",
    "ModuleDict",
    "ModuleList",
    "Parameter",
    "Sequential",
    "_IncompatibleKeys",
]
