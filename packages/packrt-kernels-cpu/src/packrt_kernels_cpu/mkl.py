"""oneMKL's runtime library, loaded through ctypes where the ``mkl`` wheel is installed, and the road
decision: whether this process's GEMMs take MKL or numpy's OpenBLAS (``settings.blas``, decided once, on
first use, and again only when :func:`packrt_kernels_cpu.settings.override` changes it).

``auto`` takes MKL on Intel CPUs only (:func:`auto_road`). On other x86-64 CPUs oneMKL runs its generic
code, not the kernels it tunes for Intel's: on a 2-core AMD EPYC (Zen 4, AVX-512) its float32 GEMM
measured 56-88 GFLOP/s at an encoder's shapes against OpenBLAS's 94-100, and its int8 GEMM 42 GOP/s
against 88 for the int8 road's exact float32 chunks on OpenBLAS (and 380-430 for :mod:`.vnni`, which
int8 layers take off MKL's road). ``PACKRT_BLAS=mkl`` still takes MKL there. conv2d's batched GEMMs are
the exception: they take MKL wherever it loads unless ``PACKRT_BLAS=numpy`` (:func:`batch_handle`).

MKL runs on libgomp, the OpenMP runtime numba's pool uses, so the two share one pool; its global thread
count follows the settings' thread cap (``set_num_threads``).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import os
import platform
import threading
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from packrt_kernels_cpu import openmp, settings
from packrt_kernels_cpu.errors import BlasUnavailableError

_BF16 = np.dtype(ml_dtypes.bfloat16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_MKL_LP64, _MKL_THREADING_INTEL, _MKL_THREADING_GNU = 0, 0, 3


@dataclass(frozen=True)
class Mkl:
    """The loaded ``libmkl_rt`` and the GEMMs packrt calls in it."""

    path: str
    sgemm: Any
    dgemm: Any
    bf16gemm: Any | None  # cblas_gemm_bf16bf16f32: absent from MKL before 2019
    sgemm_batch: Any | None  # cblas_sgemm_batch_strided: absent before MKL 2020
    set_num_threads: Any
    set_local_threads: Any  # MKL_Set_Num_Threads_Local: this thread's count for the next calls (0: the global)
    vexp: Any | None  # vmsExp: the vector math library's float32 exp, with an accuracy mode
    s8u8s32: Any | None = None  # cblas_gemm_s8u8s32: int8 x uint8 -> int32 (VNNI / AMX where the CPU has them)

    def gemm_for(self, dtype: np.dtype[Any]) -> Any | None:
        """The CBLAS GEMM that multiplies operands of ``dtype`` (None: none here)."""
        return (
            self.sgemm if dtype == _F32 else self.dgemm if dtype == _F64 else self.bf16gemm if dtype == _BF16 else None
        )


# "road": "mkl" | "numpy" (decided); "loaded": Mkl | str (loaded once, or why not); "capped": the thread
# cap given to an MKL loaded off its road (batch_handle)
_state: dict[str, Any] = {}
_deciding = threading.Lock()  # two threads' first GEMMs must not both load and configure MKL


def _mkl_candidates() -> list[str]:
    """Where libmkl_rt may be: the ``mkl`` wheel's files first, then the loader's search path."""
    found: list[str] = []
    try:
        files = importlib.metadata.files("mkl") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for item in files:
        if item.name.startswith("libmkl_rt.so"):
            found.append(str(item.locate()))
    return [*sorted(found, reverse=True), "libmkl_rt.so.3", "libmkl_rt.so.2"]


def handle() -> Mkl | None:
    """The loaded MKL when this process's GEMMs take MKL's road, else None (the road decided on first use)."""
    road = _state.get("road")
    if road is None:
        with _deciding:
            road = _state.get("road") or _decide()
    return _state["loaded"] if road == "mkl" else None


def batch_handle() -> Mkl | None:
    """The loaded MKL for conv2d's batched GEMMs: on MKL's road, and under ``PACKRT_BLAS=auto`` also where
    the GEMMs took OpenBLAS for the vendor's sake. conv2d's compiled bands call MKL's strided batch without
    coming back to Python, and its Winograd road needs it: on a Zen 4 core a 3x3 conv of 8x32x32x32 -> 64
    took 0.65x the time of the OpenBLAS bands (docs/benchmarks.md). None under ``PACKRT_BLAS=numpy`` or
    where MKL does not load."""
    found = handle()
    if found is not None or settings.current().blas != "auto":
        return found
    with _deciding:
        loaded = _loaded()
        if not isinstance(loaded, Mkl):
            return None
        if not _state.get("capped"):  # the thread cap reaches MKL once it is loaded, whichever road it serves
            _cap_threads(loaded)
            _state["capped"] = True
    return loaded


def loaded_handle() -> Mkl | None:
    """MKL if this process has loaded it (for any road), else None: what a thread-count change must reach."""
    loaded = _state.get("loaded")
    return loaded if isinstance(loaded, Mkl) else None


INTEL = "GenuineIntel"


def read_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The ``vendor_id`` a Linux ``cpuinfo`` file names, else what ``platform.processor()`` ends with
    (Windows: "Intel64 Family 6 ..., GenuineIntel"), else ""."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    processor = platform.processor()
    return processor.rpartition(",")[2].strip() if "," in processor else ""


@functools.cache
def cpu_vendor() -> str:
    """This machine's CPU vendor (``GenuineIntel``, ``AuthenticAMD``, ...), read once; "" if unknown."""
    return read_vendor()


def auto_road(vendor: str) -> str:
    """The road ``PACKRT_BLAS=auto`` takes on a CPU of ``vendor`` where MKL loads: ``"mkl"`` on Intel's,
    ``"numpy"`` (OpenBLAS) on every other or unknown vendor, where MKL takes its generic code paths."""
    return "mkl" if vendor == INTEL else "numpy"


def _decide() -> str:
    """Take the road the settings ask for (under ``_deciding``)."""
    choice = settings.current().blas
    if choice == "numpy":
        loaded: Mkl | str = "PACKRT_BLAS=numpy"
    elif choice == "auto" and auto_road(cpu_vendor()) == "numpy":
        loaded = f"PACKRT_BLAS=auto on a {cpu_vendor() or 'CPU of unknown vendor'}: OpenBLAS is the faster road there"
    else:
        loaded = _loaded()
    if isinstance(loaded, str):
        if choice == "mkl":
            raise BlasUnavailableError(
                f"PACKRT_BLAS=mkl, but MKL does not load: {loaded}. Install it with "
                "`pip install packrt-kernels-cpu[mkl]` (x86-64), or unset PACKRT_BLAS to use numpy's BLAS"
            )
        road = "numpy"
    else:
        road = "mkl"
        _cap_threads(loaded)
    _state["road"] = road
    return road


def _cap_threads(loaded: Mkl) -> None:
    """Give MKL the thread cap the settings hold, if they hold one."""
    threads = settings.current().threads
    if threads is not None:
        loaded.set_num_threads(threads)


def _loaded() -> Mkl | str:
    if "loaded" not in _state:
        _state["loaded"] = _load()
    loaded: Mkl | str = _state["loaded"]
    return loaded


def _follow(before: settings.Settings, after: settings.Settings) -> None:
    """Settings changed: a new BLAS choice is decided afresh at the next GEMM; a new cap reaches MKL now."""
    if before.blas != after.blas:
        _state.pop("road", None)
    if before.threads != after.threads and after.threads is not None:
        mkl = loaded_handle()
        if mkl is not None:  # conv2d's batched GEMMs may run on it off MKL's road (batch_handle)
            mkl.set_num_threads(after.threads)


settings.on_change(_follow)


def _load() -> Mkl | str:
    """The MKL handle, or why it did not load (a sentence for the error ``PACKRT_BLAS=mkl`` raises)."""
    reasons: list[str] = []
    for path in _mkl_candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as err:
            reasons.append(f"{path}: {err}")
            continue
        break
    else:
        return "no libmkl_rt loads (" + "; ".join(reasons[-2:]) + ")"
    # Both calls must precede every other MKL call; a layer already fixed (MKL_INTERFACE_LAYER in the
    # environment) is what they return, and packrt's 32-bit ints need LP64.
    if lib.MKL_Set_Interface_Layer(_MKL_LP64) != _MKL_LP64:
        return f"{path} runs with 64-bit integers (MKL_INTERFACE_LAYER=ILP64); packrt calls it with LP64"
    if "MKL_THREADING_LAYER" not in os.environ:
        openmp.prefer_short_openmp_spin()
        try:  # MKL aborts the process when a layer's runtime is missing: check libgomp first
            ctypes.CDLL("libgomp.so.1")
            lib.MKL_Set_Threading_Layer(_MKL_THREADING_GNU)
        except OSError:
            lib.MKL_Set_Threading_Layer(_MKL_THREADING_INTEL)
    i, p = ctypes.c_int, ctypes.c_void_p
    gemm_args = [i, i, i, i, i, i, None, p, i, p, i, None, p, i]

    def bind(name: str, scalar: type[Any]) -> Any:
        fn = getattr(lib, name)
        fn.argtypes = [scalar if a is None else a for a in gemm_args]
        fn.restype = None
        return fn

    bf16 = bind("cblas_gemm_bf16bf16f32", ctypes.c_float) if hasattr(lib, "cblas_gemm_bf16bf16f32") else None
    batch = None
    if hasattr(lib, "cblas_sgemm_batch_strided"):  # a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, count
        batch = lib.cblas_sgemm_batch_strided
        batch.argtypes = [i] * 6 + [ctypes.c_float, p, i, i, p, i, i, ctypes.c_float, p, i, i, i]
        batch.restype = None
    set_threads, set_local = lib.MKL_Set_Num_Threads, lib.MKL_Set_Num_Threads_Local
    set_threads.argtypes, set_threads.restype = [ctypes.c_int], None
    set_local.argtypes, set_local.restype = [ctypes.c_int], ctypes.c_int
    sgemm, dgemm = bind("cblas_sgemm", ctypes.c_float), bind("cblas_dgemm", ctypes.c_double)
    vexp = getattr(lib, "vmsExp", None)
    if vexp is not None:
        vexp.argtypes, vexp.restype = [i, p, p, ctypes.c_longlong], None
    s8u8s32 = getattr(lib, "cblas_gemm_s8u8s32", None)
    if s8u8s32 is not None:  # layout, transa, transb, offsetc, m, n, k, alpha, a, lda, ao, b, ldb, bo, beta, c, ldc, co
        s8u8s32.argtypes = [i] * 7 + [ctypes.c_float, p, i, ctypes.c_int8, p, i, ctypes.c_int8, ctypes.c_float, p, i, p]
        s8u8s32.restype = None
    return Mkl(path, sgemm, dgemm, bf16, batch, set_threads, set_local, vexp, s8u8s32)


__all__ = ["INTEL", "Mkl", "auto_road", "batch_handle", "cpu_vendor", "handle", "loaded_handle", "read_vendor"]
