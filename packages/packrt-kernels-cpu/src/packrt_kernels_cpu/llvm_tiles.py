"""Tile kernels written as LLVM IR and compiled by llvmlite (numba's own code generator) for this machine.

The GEMM tiles of :mod:`.vnni` (int8) and :mod:`.float_tiles` (float32) are IR, not numba loops: LLVM
forms neither ``vpdpbusd`` nor a register-blocked FMA tile from a numba loop. :func:`compile_tiles`
builds a module of such functions once per process, for the host CPU, and hands back ctypes functions;
numba's compiled loops call them through their addresses. The helpers below write the IR both tile
kinds share: each row's address, two accumulators per row, a row's element broadcast to every lane,
and the stores of the result.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
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


class OnFirstUse:
    """A tile library built by ``build`` at the first :meth:`get`, once per process (threads that ask
    at once wait for the one build); ``get()`` is its result: (engine, functions...) or None."""

    def __init__(self, build: Callable[[], tuple[Any, ...] | None]) -> None:
        self._build, self._lock = build, threading.Lock()
        self._built: list[tuple[Any, ...] | None] = []

    def get(self) -> tuple[Any, ...] | None:
        if not self._built:
            with self._lock:
                if not self._built:
                    self._built.append(self._build())
        return self._built[0]


def row_pointers(rows: int, element_bytes: int) -> list[str]:
    """``%arow{r}``: the address of row ``r`` of ``%a``, whose rows are ``%lda`` elements apart."""
    lines = []
    for r in range(rows):
        lines += [
            f"  %aoff{r} = mul i64 %lda, {element_bytes * r}",
            f"  %arow{r} = getelementptr i8, ptr %a, i64 %aoff{r}",
        ]
    return lines


def accumulators(rows: int, vector: str, updated: str) -> list[str]:
    """``%acc{r}_{c}``: two registers per row, zero on entry, ``%{updated}{r}_{c}`` after each step."""
    return [
        f"  %acc{r}_{c} = phi {vector} [zeroinitializer, %entry], [%{updated}{r}_{c}, %loop]"
        for r in range(rows)
        for c in range(2)
    ]


def broadcasts(rows: int, scalar: str, vector: str, offset: str) -> list[str]:
    """``%av{r}``: the ``scalar`` at byte ``offset`` of each row, in every lane of a ``vector``."""
    lines = []
    for r in range(rows):
        lines += [
            f"  %ap{r} = getelementptr i8, ptr %arow{r}, i64 {offset}",
            f"  %as{r} = load {scalar}, ptr %ap{r}, align 1",
            f"  %ai{r} = insertelement {vector} poison, {scalar} %as{r}, i32 0",
            f"  %av{r} = shufflevector {vector} %ai{r}, {vector} poison, <16 x i32> zeroinitializer",
        ]
    return lines


def stores(rows: int, vector: str, result: str) -> list[str]:
    """The exit: ``%{result}{r}_0`` and ``_1`` stored as row ``r`` of ``%out`` (rows ``%ldo`` 4-byte elements apart)."""
    lines = ["exit:"]
    for r in range(rows):
        lines += [
            f"  %ooff{r} = mul i64 %ldo, {4 * r}",
            f"  %op{r}_0 = getelementptr i8, ptr %out, i64 %ooff{r}",
            f"  %op{r}_1 = getelementptr i8, ptr %op{r}_0, i64 64",
            f"  store {vector} %{result}{r}_0, ptr %op{r}_0, align 4",
            f"  store {vector} %{result}{r}_1, ptr %op{r}_1, align 4",
        ]
    return [*lines, "  ret void", "}"]


__all__ = ["OnFirstUse", "accumulators", "broadcasts", "compile_tiles", "row_pointers", "stores"]
