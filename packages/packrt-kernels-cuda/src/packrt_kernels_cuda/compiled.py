"""The hand-written CUDA sources: where they live, and their compiled functions (once per process).

The sources are package data (``packrt_kernels_cuda/cuda_src/*.cu``, shipped in the wheel).
They include no header and declare every entry point ``extern "C"``, so cupy's NVRTC compiles
them as they are, and ``nvcc -arch=sm_90`` compiles them in the CPU-side test
(``tests/test_cuda_sources_compile.py``). cupy is imported on the first kernel launch only.
"""

from __future__ import annotations

import re
import threading
from importlib.resources import files
from typing import Any

SOURCES: tuple[str, ...] = ("fused.cu",)
THREADS = 256  # threads per block of every launch (a multiple of 32: the reductions work per warp)
MAX_BLOCKS = 1 << 16  # grid-stride launches never ask for more blocks than this

_ENTRY = re.compile(r'extern "C" __global__ void ([\w#]+)\(([^)]*)\)')
_lock = threading.Lock()
_modules: dict[str, Any] = {}
_functions: dict[tuple[int, str], Any] = {}


def source_text(name: str) -> str:
    """The text of one shipped CUDA source (``name`` from :data:`SOURCES`)."""
    return files("packrt_kernels_cuda").joinpath("cuda_src", name).read_text(encoding="utf-8")


def entry_points(text: str) -> dict[str, int]:
    """The ``extern "C" __global__`` kernels a source declares, name -> parameter count (the
    per-dtype ``##SUFFIX`` macro expanded to its _f32, _f16 and _bf16 names)."""
    out: dict[str, int] = {}
    for name, params in _ENTRY.findall(text.replace("\\\n", "\n")):
        count = len([p for p in params.split(",") if p.strip()])
        names = [name.replace("##SUFFIX", s) for s in ("f32", "f16", "bf16")] if "##SUFFIX" in name else [name]
        out.update(dict.fromkeys(names, count))
    return out


def cupy_module() -> Any:
    """cupy itself (imported lazily: the package imports without it)."""
    import cupy  # type: ignore[import-not-found]

    return cupy


def function(name: str, source: str = "fused.cu") -> Any:
    """The compiled ``extern "C"`` kernel ``name`` of ``source``, for the current device.

    NVRTC runs once per process and source (``cupy.RawModule``); the module is loaded once per
    device that launches from it.
    """
    cp = cupy_module()
    key = (int(cp.cuda.runtime.getDevice()), name)
    fn = _functions.get(key)
    if fn is not None:
        return fn
    with _lock:
        module = _modules.get(source)
        if module is None:
            module = cp.RawModule(code=source_text(source), options=("--std=c++17",))
            _modules[source] = module
        fn = module.get_function(name)
        _functions[key] = fn
    return fn


def blocks_for(n: int) -> int:
    """Blocks of :data:`THREADS` for a grid-stride loop over ``n`` elements (at least 1)."""
    return max(1, min(MAX_BLOCKS, -(-n // THREADS)))
