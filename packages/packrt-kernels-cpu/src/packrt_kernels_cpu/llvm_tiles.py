"""Tile kernels written as LLVM IR and compiled by llvmlite (numba's own code generator) for this machine.

The GEMM tiles of :mod:`.vnni` (int8) and :mod:`.float_tiles` (float32) are IR, not numba loops: LLVM
forms neither ``vpdpbusd`` nor a register-blocked FMA tile from a numba loop. :func:`compile_tiles`
builds a module of such functions once per process, for the host CPU, and hands back their addresses;
numba's compiled loops call them there (:func:`._numba_tiles.call_tile`). The helpers below write the
IR both tile kinds share: each row's address, the accumulators of each row, the loads of a panel's
vectors, a row's element broadcast to every lane, and the stores of the result.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packrt_kernels_cpu import compiler_pages

PANEL = 32  # output columns of a tile: two 16-lane registers per row (the helpers' two vectors, 64 bytes each)


@dataclass(frozen=True)
class Tiles:
    """Compiled tiles: ``addresses`` (int64, one per name, in order) for the compiled loops to call;
    ``engine`` owns the machine code behind them, so the addresses hold as long as this object."""

    engine: Any
    addresses: Any


def compile_tiles(source: str, names: Sequence[str], features: Sequence[str]) -> Tiles | None:
    """The functions ``names`` of the IR ``source`` compiled for this CPU, or None where llvmlite is
    missing or the CPU lacks one of ``features`` (LLVM's names: ``avx512f``, ``avx512vnni``...). Each
    is a tile: ``(ptr out, i64 ldo, ptr a, i64 lda, ptr b, i64 count) -> void``, the signature
    :func:`._numba_tiles.call_tile` calls.

    The machine code is kept on disk (:func:`tile_cache_dir`), keyed by the IR, the CPU, its features and
    the LLVM version, and a later process loads it instead of compiling again: compiling pulls LLVM's
    optimiser and code generator into the process (~18 MiB of RSS and ~0.2 s of CPU that loading skips)."""
    try:
        import llvmlite.binding as llvm  # type: ignore[import-untyped]
    except ImportError:
        return None
    compiler_pages.compiler_ran()  # LLVM's pages are read in from here on (handed back once it is idle)
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    host = llvm.get_host_cpu_features()
    if not all(host.get(name, False) for name in features):
        return None
    cpu, flags = llvm.get_host_cpu_name(), host.flatten()
    machine = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=flags, opt=3)
    key = "\0".join([source, *names, cpu, flags, ".".join(map(str, llvm.llvm_version_info))])
    path = tile_cache_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.o"
    code = _read_object(path)
    if code is None:
        module = llvm.parse_assembly(source)
        module.verify()
        code = machine.emit_object(module)
        _write_object(path, code)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
    engine.add_object_file(llvm.ObjectFileRef.from_data(code))
    engine.finalize_object()
    compiler_pages.compiler_ran()
    return Tiles(engine, np.array([engine.get_function_address(name) for name in names], np.int64))


def tile_cache_dir() -> Path:
    """Where compiled tiles are kept between processes: ``tiles/`` under packrt's cache root
    (:func:`.kernel_cache.cache_root`: ``PACKRT_CACHE_DIR``, else the user's cache directory)."""
    from packrt_kernels_cpu.kernel_cache import cache_root

    return cache_root() / "tiles"


_DIGEST = 32  # a cached object starts with the sha256 of the machine code after it


def _read_object(path: Path) -> bytes | None:
    """The machine code cached at ``path``, or None where there is none or it is not whole (a file cut short
    or overwritten would otherwise be linked and run)."""
    try:
        stored = path.read_bytes()
    except OSError:
        return None
    code = stored[_DIGEST:]
    return code if code and hashlib.sha256(code).digest() == stored[:_DIGEST] else None


def _write_object(path: Path, code: bytes) -> None:
    """Keep ``code`` at ``path`` for later processes, whole or not at all (written beside it, then renamed); a
    directory that cannot be written leaves the tiles compiled in memory only."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.part")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(hashlib.sha256(code).digest() + code)
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):  # under a path that is not a directory, there is nothing to remove
            partial.unlink()


class OnFirstUse:
    """A tile library built by ``build`` at the first :meth:`get`, once per process (threads that ask
    at once wait for the one build); ``get()`` is its result: :class:`Tiles` or None."""

    def __init__(self, build: Callable[[], Tiles | None]) -> None:
        self._build, self._lock = build, threading.Lock()
        self._built: list[Tiles | None] = []

    def get(self) -> Tiles | None:
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


def accumulators(rows: int, vector: str, updated: str, vectors: int = 2) -> list[str]:
    """``%acc{r}_{c}``: ``vectors`` registers per row, zero on entry, ``%{updated}{r}_{c}`` after each step."""
    return [
        f"  %acc{r}_{c} = phi {vector} [zeroinitializer, %entry], [%{updated}{r}_{c}, %loop]"
        for r in range(rows)
        for c in range(vectors)
    ]


def panel_loads(vector: str, base: str, panels: int = 1) -> list[str]:
    """``%b0`` to ``%b{2 * panels - 1}``: the two 64-byte vectors at ``base`` and those of the next
    ``panels - 1`` panels, each ``%pstride`` bytes after the last (the tile defines ``%pstride``)."""
    lines = []
    for w in range(panels):
        start = base if w == 0 else f"%pp{w}"
        if w:
            lines += [f"  %poff{w} = mul i64 %pstride, {w}", f"  %pp{w} = getelementptr i8, ptr {base}, i64 %poff{w}"]
        lines += [
            f"  %bq{w} = getelementptr i8, ptr {start}, i64 64",
            f"  %b{2 * w} = load {vector}, ptr {start}, align 1",
            f"  %b{2 * w + 1} = load {vector}, ptr %bq{w}, align 1",
        ]
    return lines


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


def stores(rows: int, vector: str, result: str, vectors: int = 2) -> list[str]:
    """The exit: ``%{result}{r}_0`` to ``_{vectors - 1}`` stored side by side as row ``r`` of ``%out``
    (64 bytes each; rows ``%ldo`` 4-byte elements apart)."""
    lines = ["exit:"]
    for r in range(rows):
        lines += [f"  %ooff{r} = mul i64 %ldo, {4 * r}", f"  %op{r}_0 = getelementptr i8, ptr %out, i64 %ooff{r}"]
        for c in range(1, vectors):
            lines.append(f"  %op{r}_{c} = getelementptr i8, ptr %op{r}_0, i64 {64 * c}")
        lines += [f"  store {vector} %{result}{r}_{c}, ptr %op{r}_{c}, align 4" for c in range(vectors)]
    return [*lines, "  ret void", "}"]


__all__ = [
    "PANEL",
    "OnFirstUse",
    "Tiles",
    "accumulators",
    "broadcasts",
    "compile_tiles",
    "panel_loads",
    "row_pointers",
    "stores",
]
