"""GEMM through the fastest BLAS this process can load: oneMKL's CBLAS when the ``mkl`` wheel is
installed (``pip install packrt-kernels-cpu[mkl]``), numpy's ``matmul`` (the OpenBLAS numpy ships)
otherwise.

Why a second road: at an encoder's shapes (1024 rows, 384-3072 wide) OpenBLAS's float32 GEMM ran
8-25% slower than MKL's on the development Xeon, and it has no bfloat16 GEMM at all, where MKL's
``cblas_gemm_bf16bf16f32`` multiplies bfloat16 operands into float32 (AMX on this Xeon: 820-985
GFLOP/s on one core against 210 for float32). With MKL a bias is added by the GEMM itself: the
output starts as the bias broadcast and the product accumulates onto it (``beta = 1``), the pass
a separate ``out += b`` would make over the output is gone.

``PACKRT_BLAS`` picks the road once per process: ``auto`` (the default: MKL where it loads, else
numpy), ``mkl`` (MKL or :class:`BlasUnavailableError`), ``numpy``. Whatever the road, the rules
are numpy's: the same shapes, dtypes and results up to float rounding (the sum order differs).
MKL runs on libgomp, the OpenMP runtime numba's pool uses, so the two share one pool whose idle
workers spin briefly, then sleep (:func:`prefer_short_openmp_spin`); its thread count follows
:func:`set_num_threads`.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from packrt_kernels_cpu.errors import BlasUnavailableError, KernelShapeError

Array = Any

_BF16 = np.dtype(ml_dtypes.bfloat16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112  # CBLAS_LAYOUT / CBLAS_TRANSPOSE values
_MKL_LP64, _MKL_THREADING_INTEL, _MKL_THREADING_GNU = 0, 0, 3
_INT32_MAX = 2**31 - 1
_VML_MIN = 1 << 14  # below this many elements numpy's exp wins: MKL's call costs ~3.5 us, numpy's 0.4
_VML_LA = 0x1  # vector math accuracy mode "low accuracy": within 4 ulp (measured 1.2e-7 relative for exp)
_SMALL_FLOP = 1 << 24  # a product below this many flops runs on one MKL thread (see matmul)
_CHOICES = ("auto", "mkl", "numpy")


OPENMP_SPIN = "20000"  # GOMP_SPINCOUNT packrt sets: idle workers spin for a few microseconds, then sleep


def prefer_short_openmp_spin() -> None:
    """Let idle OpenMP workers spin briefly before sleeping (``GOMP_SPINCOUNT=20000``), unless the user set
    ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``. libgomp reads them once, when it loads (numba's pool or MKL,
    whichever comes first). Measured on two cores, MiniLM 8x128 at 2 threads: libgomp's default long spin
    against OpenBLAS's workers 260 ms; sleeping at once (``OMP_WAIT_POLICY=PASSIVE``) 106-120 ms, each of
    the ~50 GEMMs and kernels of a forward then waking its workers from sleep; the short spin 90-97 ms."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN


@dataclass(frozen=True)
class _Mkl:
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


_state: dict[str, Any] = {}  # "road": "mkl" | "numpy"; "mkl": _Mkl; "threads": the last cap asked for
_deciding = threading.Lock()  # two threads' first GEMMs must not both load and configure MKL
_local = threading.local()  # .single: this thread's GEMMs run on one MKL thread (single_threaded)


def _choice() -> str:
    choice = os.environ.get("PACKRT_BLAS", "auto").strip().lower() or "auto"
    if choice not in _CHOICES:
        raise BlasUnavailableError(
            f"PACKRT_BLAS={choice!r} is not a BLAS packrt knows; expected one of {', '.join(_CHOICES)} "
            "(unset it for the default, auto)"
        )
    return choice


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


def _load_mkl() -> _Mkl | str:
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
        prefer_short_openmp_spin()
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
    return _Mkl(path, sgemm, dgemm, bf16, batch, set_threads, set_local, vexp, s8u8s32)


def _mkl() -> _Mkl | None:
    """The MKL road when this process takes it (decided once, on first use)."""
    if "road" not in _state:
        with _deciding:
            if "road" not in _state:
                _decide()
    return _state.get("mkl") if _state["road"] == "mkl" else None


def _decide() -> None:
    """Take the road ``PACKRT_BLAS`` asks for (under ``_deciding``)."""
    choice = _choice()
    loaded = _load_mkl() if choice != "numpy" else "PACKRT_BLAS=numpy"
    if isinstance(loaded, str):
        if choice == "mkl":
            raise BlasUnavailableError(
                f"PACKRT_BLAS=mkl, but MKL does not load: {loaded}. Install it with "
                "`pip install packrt-kernels-cpu[mkl]` (x86-64), or unset PACKRT_BLAS to use numpy's BLAS"
            )
        _state["road"] = "numpy"
    else:
        _state.update(road="mkl", mkl=loaded)
        if "threads" in _state:
            loaded.set_num_threads(_state["threads"])


def provider() -> str:
    """``"mkl"`` or ``"numpy"``: the road GEMMs take in this process."""
    return "mkl" if _mkl() is not None else "numpy"


def set_num_threads(n: int) -> None:
    """Cap MKL's threads at ``n`` (now if loaded, else when it loads); numpy's BLAS is capped by the caller."""
    _state["threads"] = max(1, int(n))
    if _state.get("road") == "mkl":
        _state["mkl"].set_num_threads(_state["threads"])


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Within it, this thread's GEMMs run on one MKL thread: for work its caller already spreads over
    threads of its own (conv2d's images), where MKL's pool would only wake to contend."""
    previous = getattr(_local, "single", False)
    _local.single = True
    try:
        yield
    finally:
        _local.single = previous


_CORES = os.cpu_count() or 1


def num_threads() -> int:
    """The thread cap :func:`set_num_threads` last set (the machine's core count before any)."""
    return int(_state.get("threads") or _CORES)


def multiplies(dtype: np.dtype[Any]) -> bool:
    """Whether :func:`matmul` takes operands of ``dtype`` as they are: float32 and float64 always,
    bfloat16 where MKL's bfloat16 GEMM loaded (products exact in float32, the result float32)."""
    dt = np.dtype(dtype)
    if dt == _BF16:
        mkl = _mkl()
        return mkl is not None and mkl.bf16gemm is not None
    return dt in (_F32, _F64)


def _operand(a: Array) -> tuple[int, int] | None:
    """(CBLAS transpose flag, leading dimension) for the trailing matrices of a numpy operand that MKL
    reads in place: rows or columns evenly strided (a transposed or row-sliced view included), or None."""
    rows, cols = a.shape[-2:]
    size = a.itemsize
    row_step = a.strides[-2] if rows > 1 else cols * size  # a length-1 axis's stride means nothing
    col_step = a.strides[-1] if cols > 1 else size
    if col_step == size and row_step % size == 0 and row_step // size >= max(1, cols):
        return _NO_TRANS, max(1, row_step // size)
    if row_step == size and col_step % size == 0 and col_step // size >= max(1, rows):
        return _TRANS, max(1, col_step // size)
    return None


def _batch_step(a: Array) -> int | None:
    """Elements between one matrix of a stack and the next along its last batch axis (None if uneven)."""
    if a.ndim == 2 or a.shape[-3] == 1:
        return 0
    step = a.strides[-3]
    return step // a.itemsize if step >= 0 and step % a.itemsize == 0 else None


def matmul(
    a: Array,
    b: Array,
    bias: Array | None = None,
    *,
    alpha: float = 1.0,
    out: Array | None = None,
    accumulate: bool = False,
) -> Array:
    """``a @ b (+ bias)`` with numpy's rules for ``a`` (..., M, K) and ``b`` (..., K, N) of one float dtype
    (batch axes broadcast), ``bias`` broadcastable to the result, in its dtype. float32/float64 give their
    own dtype; bfloat16 operands (see :func:`multiplies`) give float32. Matrices whose rows or columns are
    evenly strided (transposed views, heads sliced out of a wider array) are read in place. ``alpha``
    scales the product (not the bias): MKL applies it inside the GEMM. The result is a new C-contiguous
    array, or ``out`` (the result's shape and dtype; rows may be strided, as in a slice of a wider array).
    ``accumulate=True`` adds the product onto what ``out`` holds (a bias laid out there already, say)."""
    if accumulate and (out is None or bias is not None):
        raise KernelShapeError("matmul(accumulate=True) adds onto out: pass out=, and no bias (lay it out in out)")
    plan = _plan(a, b, out)
    if plan is None:
        if accumulate:
            out += _numpy_matmul(a, b, None, alpha, None)
            return out
        return _numpy_matmul(a, b, bias, alpha, out)
    mkl, gemm, a, b, out, fa, fb, fo = plan
    beta = 1.0 if accumulate else 0.0
    if bias is not None:
        out[...] = bias  # the GEMM accumulates onto the bias: no second pass over out
        beta = 1.0
    # Below about 16 MFLOP one thread finishes first: waking a passive pool's workers costs 50-100 us,
    # measured at 2 threads (a 16x512x512 GEMM: 80 us on two threads, 55 us on one).
    small = getattr(_local, "single", False) or (num_threads() > 1 and 2 * a.shape[-1] * out.size < _SMALL_FLOP)
    if small:
        mkl.set_local_threads(1)
    try:
        _gemms(mkl, gemm, a, b, out, (alpha, beta), (fa, fb, fo))
    finally:
        if small:
            mkl.set_local_threads(0)
    return out


_Layout = tuple[int, int, int]  # (CBLAS transpose flag, leading dimension, elements between batch matrices)


def _plan(a: Array, b: Array, out: Array | None) -> tuple[Any, ...] | None:
    """How MKL computes ``a @ b`` into ``out`` (allocated here when None): the handle, the GEMM, the
    operands broadcast to one batch shape and each one's layout; None where numpy's matmul must.
    (Called for every GEMM, conv2d's many small ones too: the checks stay cheap.)"""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or (out is not None and type(out) is not np.ndarray):
        return None
    if a.ndim < 2 or b.ndim < 2 or (a.shape[-2] == 1 and a.dtype != _BF16):
        return None  # a row times a matrix (batch-1 decode): OpenBLAS's GEMV streams faster, numpy's road
    mkl = _mkl()
    if mkl is None or a.dtype != b.dtype or a.size == 0 or b.size == 0:
        return None
    if (a.ndim > 2 or b.ndim > 2) and a.shape[:-2] != b.shape[:-2]:  # batch axes broadcast as numpy's do:
        try:  # a repeated matrix gets stride 0
            batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            return None  # numpy raises its own error
        a, b = np.broadcast_to(a, (*batch, *a.shape[-2:])), np.broadcast_to(b, (*batch, *b.shape[-2:]))
    gemm = mkl.gemm_for(a.dtype)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    dtype = _F64 if a.dtype == _F64 else _F32
    if out is None:
        out = np.empty((*a.shape[:-2], m, n), dtype)
    elif out.shape != (*a.shape[:-2], m, n) or out.dtype != dtype:
        return None  # numpy's matmul accepts or refuses this out
    fa, fb, fo = _layout(a), _layout(b), _layout(out)
    if gemm is None or fa is None or fb is None or fo is None or fo[0] != _NO_TRANS:
        return None  # an output MKL would have to write transposed: numpy's
    if m * n > _INT32_MAX or max(k, fa[1], fa[2], fb[1], fb[2], fo[1], fo[2]) > _INT32_MAX:
        return None
    return (mkl, gemm, a, b, out, fa, fb, fo)


def _layout(a: Array) -> _Layout | None:
    """(CBLAS transpose flag, leading dimension, batch step) for a numpy operand's matrices, or None."""
    flag, step = _operand(a), _batch_step(a)
    return None if flag is None or step is None else (*flag, step)


def _gemms(
    mkl: _Mkl, gemm: Any, a: Array, b: Array, out: Array, scalars: tuple[float, float], layouts: tuple[_Layout, ...]
) -> None:
    """The CBLAS calls of one (batched) product into ``out``, which already holds the bias if any."""
    (ta, lda, sa), (tb, ldb, sb), (_, ldc, sc) = layouts
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    sc = sc or ldc * m  # a stack of one: MKL still wants the output's step to clear a whole matrix
    alpha, beta = scalars
    if a.ndim == 2:
        gemm(_ROW_MAJOR, ta, tb, m, n, k, alpha, a.ctypes.data, lda, b.ctypes.data, ldb, beta, out.ctypes.data, ldc)
        return
    count = a.shape[-3]
    if a.ndim == 3 and a.dtype == _F32 and mkl.sgemm_batch is not None:  # one stack (a conv band's, attention's)
        pa, pb, po = a.ctypes.data, b.ctypes.data, out.ctypes.data
        mkl.sgemm_batch(_ROW_MAJOR, ta, tb, m, n, k, alpha, pa, lda, sa, pb, ldb, sb, beta, po, ldc, sc, count)
        return
    for outer in np.ndindex(*a.shape[:-3]):  # the batch axes before the last: a call each
        pa, pb, po = (x.ctypes.data + sum(i * st for i, st in zip(outer, x.strides, strict=False)) for x in (a, b, out))
        if a.dtype == _F32 and mkl.sgemm_batch is not None:
            mkl.sgemm_batch(_ROW_MAJOR, ta, tb, m, n, k, alpha, pa, lda, sa, pb, ldb, sb, beta, po, ldc, sc, count)
            continue
        for j in range(count):
            at, bt, ot = (
                x + j * st * x_size
                for x, st, x_size in ((pa, sa, a.itemsize), (pb, sb, b.itemsize), (po, sc, out.itemsize))
            )
            gemm(_ROW_MAJOR, ta, tb, m, n, k, alpha, at, lda, bt, ldb, beta, ot, ldc)


def sgemm_batch() -> Any | None:
    """MKL's ``cblas_sgemm_batch_strided`` as a ctypes function that compiled code may call (numba takes
    it as an argument; pointers are ``array.ctypes``), or None off MKL's road or before MKL 2020. A
    compiled loop of many GEMMs calls it without coming back to Python (and the GIL) between them."""
    mkl = _mkl()
    return None if mkl is None else mkl.sgemm_batch


def gemm_s8u8s32() -> Any | None:
    """MKL's ``cblas_gemm_s8u8s32`` as a ctypes function (the arguments as oneMKL documents them), or None
    off MKL's road or where this MKL lacks it. :mod:`packrt_kernels_cpu.int8` calls it."""
    mkl = _mkl()
    return None if mkl is None else mkl.s8u8s32


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Within it, every MKL GEMM this thread starts, from compiled code too, runs on one MKL thread
    (``MKL_Set_Num_Threads_Local``): for a caller whose threads already share the work out."""
    mkl = _mkl()
    if mkl is None:
        yield
        return
    mkl.set_local_threads(1)
    try:
        yield
    finally:
        mkl.set_local_threads(0)


def _numpy_matmul(a: Array, b: Array, bias: Array | None, alpha: float, out: Array | None) -> Array:
    if a.dtype == _BF16:  # numpy's BLAS has no bfloat16 GEMM: multiply the float32 widening
        a, b = a.astype(_F32), b.astype(_F32)
    result = a @ b if out is None else np.matmul(a, b, out=out)
    if alpha != 1.0:
        result *= result.dtype.type(alpha)
    if bias is not None:
        result += bias
    return result


def exp(x: Array, out: Array) -> Array:
    """``numpy.exp(x, out=out)``; for large C-contiguous float32 numpy arrays on MKL's road, MKL's vector exp
    (threaded, about 1.5x numpy's on one core and 2x on two; error within 1.2e-7 relative, as numpy's)."""
    mkl = _mkl() if type(x) is np.ndarray and type(out) is np.ndarray else None
    fits = x.dtype == _F32 and out.dtype == _F32 and x.shape == out.shape and _VML_MIN <= x.size <= _INT32_MAX
    if mkl is None or mkl.vexp is None or not (fits and x.flags.c_contiguous and out.flags.c_contiguous):
        return np.exp(x, out=out)
    mkl.vexp(x.size, x.ctypes.data, out.ctypes.data, _VML_LA)
    return out


__all__ = [
    "BlasUnavailableError",
    "exp",
    "gemm_s8u8s32",
    "matmul",
    "multiplies",
    "prefer_short_openmp_spin",
    "provider",
    "set_num_threads",
    "one_thread",
    "sgemm_batch",
    "single_threaded",
]
