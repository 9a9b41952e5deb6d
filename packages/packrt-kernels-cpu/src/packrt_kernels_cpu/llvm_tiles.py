"""Tile kernels written as LLVM IR and compiled by llvmlite (numba's own code generator) for this machine.

The GEMM tiles of :mod:`.vnni` (int8) and :mod:`.float_tiles` (float32) are IR, not numba loops: LLVM
forms neither ``vpdpbusd`` nor a register-blocked FMA tile from a numba loop. :func:`compile_tiles`
builds a module of such functions once per process, for the host CPU, and hands back ctypes functions;
numba's compiled loops call them through their addresses.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any


def compile_tiles(
    source: str, names: Sequence[str], features: Sequence[str], argtypes: Sequence[Any]
) -> tuple[Any, ...] | None:
    """(engine, one ctypes function per name, in order) for the IR ``source``, or None where llvmlite is
    missing or the CPU lacks one of ``features`` (LLVM's names: ``avx512f``, ``avx512vnni``...). Each
    function returns nothing and takes ``argtypes``. The engine owns the machine code: keep it as long
    as the functions."""
    try:
        import llvmlite.binding as llvm  # type: ignore[import-untyped]
    except ImportError:
        return None
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    host = llvm.get_host_cpu_features()
    if not all(host.get(name, False) for name in features):
        return None
    module = llvm.parse_assembly(source)
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=host.flatten(), opt=3
    )
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    kind = ctypes.CFUNCTYPE(None, *argtypes)
    return (engine, *(kind(engine.get_function_address(name)) for name in names))


__all__ = ["compile_tiles"]
