"""Fused float32 CPU kernels compiled with numba: one pass over the data, no temporaries.

The elementwise and row-wise kernels that dominate an encoder's forward outside its GEMMs
(exact and tanh GELU, SiLU, LayerNorm, RMSNorm, softmax) each run here as one compiled loop,
multi-threaded over rows with ``prange`` (capped by ``CpuBackend.set_num_threads``), instead
of a chain of numpy temporaries. They take C-contiguous float32 arrays; the numpy code in
:mod:`packrt_kernels_cpu.functional` stays the reference the tests compare against and the
path for every other dtype and namespace, and for machines where numba cannot load.

numba is imported, and the kernels compiled, on the first call only (``cache=True`` keeps the
machine code on disk for the next process, in the per-user directory :mod:`.kernel_cache` names,
shared by every venv with the same kernel sources), so ``import packrt`` never pays for either.
``PACKRT_NUMBA=0`` in the environment turns the fused path off. The compiled loops live in
:mod:`packrt_kernels_cpu._numba_kernels` (conv2d's in :mod:`packrt_kernels_cpu.conv._numba`),
the only modules that import numba.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import threading
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

from packrt_kernels_cpu import blas

Array = Any
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_CAST_MIN = 4096  # below this many elements the compiled call costs more than it saves
_PARALLEL_MIN = 1 << 18  # elements below which a kernel runs on the calling thread only
PARALLEL_MIN = _PARALLEL_MIN  # (for callers choosing between a pooled kernel and numpy)
_state: dict[str, Any] = {}  # "kernels": the compiled namespace, or None when numba cannot load


def enabled() -> bool:
    """Whether the fused path is on: numba imports and ``PACKRT_NUMBA`` is not "0"."""
    return os.environ.get("PACKRT_NUMBA", "1") != "0" and _kernels() is not None


def handles(x: Array) -> bool:
    """Whether ``x`` can take the fused path (a C-contiguous float32 numpy array, path enabled)."""
    return type(x) is np.ndarray and x.dtype == _F32 and x.flags.c_contiguous and enabled()


def handles_bf16(x: Array) -> bool:
    """Whether ``x`` is a C-contiguous bfloat16 numpy array the fused kernels take as it is (bfloat16 in
    and out, computed in float32 tile by tile)."""
    return type(x) is np.ndarray and x.dtype == _BF16 and x.flags.c_contiguous and enabled()


def _bits(a: Array) -> Array:
    """A bfloat16 array's bits as uint16, flat (what the bfloat16 kernels read and write)."""
    return a.reshape(-1).view(np.uint16)


def set_num_threads(n: int) -> None:
    """Cap numba's thread pool at ``n`` for every thread that launches a kernel (a no-op until numba has
    loaded; the cap then applies on load). numba keeps the count per calling thread, and a thread that
    never set one runs on the whole pool, so each thread takes the cap at its next kernel call
    (:func:`_kernels` compares a generation number: one attribute read per call)."""
    _state["threads"] = n
    _state["generation"] = _state.get("generation", 0) + 1
    kernels = _state.get("kernels")
    if kernels is not None:
        _follow_cap(kernels)


def _follow_cap(kernels: Any) -> None:
    """Give the calling thread the cap :func:`set_num_threads` last set (numba's count is per thread)."""
    kernels.set_num_threads(_state["threads"])
    _local.generation = _state["generation"]
    _state["pool"] = kernels.num_threads()


def _kernels() -> Any:
    kernels = _state.get("kernels", _UNLOADED)
    if kernels is _UNLOADED:
        kernels = _load()
    if kernels is not None and getattr(_local, "generation", None) != _state.get("generation"):
        _follow_cap(kernels)
    return kernels


_UNLOADED = object()
_load_lock = threading.Lock()


def _load() -> Any:
    """Import numba and the kernels (no compilation: each kernel compiles, or loads from the cache, on
    its first call) and start numba's pool, keeping the OpenMP thread counts as they were."""
    with _load_lock:
        if "kernels" in _state:
            return _state["kernels"]
        try:
            kernels = _compile()
        except (ImportError, OSError):  # no numba here (or its LLVM cannot load): numpy path only
            kernels = None
        if kernels is not None:
            with _openmp_counts_kept():
                kernels.num_threads()  # starts numba's pool now, inside the guard
        _state["pool"] = 1 if kernels is None else kernels.num_threads()
        _state["kernels"] = kernels
        return kernels


@contextlib.contextmanager
def _openmp_counts_kept() -> Iterator[None]:
    """Put every loaded OpenMP runtime's thread count for the calling thread back as it was before the
    block. numba starts its pool with ``omp_set_num_threads(NUMBA_NUM_THREADS)``, the core count by
    default, which overwrote the count torch (sharing libgomp) or ``OMP_NUM_THREADS=1`` had set: torch's
    MiniLM 1x16 went from 29 to 109-182 ms on a loaded two-core machine. A runtime the block loaded
    itself takes ``OMP_NUM_THREADS`` where that is set (what it would have read), else stays as is."""
    before = {lib.filepath: lib.num_threads for lib in ThreadpoolController().select(user_api="openmp").lib_controllers}
    try:
        yield
    finally:
        env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
        for lib in ThreadpoolController().select(user_api="openmp").lib_controllers:
            want = before.get(lib.filepath, int(env) if env.isdigit() and int(env) > 0 else None)
            if want is not None and lib.num_threads != want:
                lib.set_num_threads(want)


def _launch(name: str, work: int, *args: Any) -> None:
    """Run compiled kernel ``name`` over ``work`` elements: on the thread pool when the work is
    large, on the calling thread (``name_serial``) when it is not. A parallel region waits for
    every thread it wakes, and on a busy two-core machine one of them is often descheduled
    (measured: a 512-wide RMSNorm took 1.5 us on one thread and a median 8.8 ms with two)."""
    kernels = _kernels()
    parallel = work >= _PARALLEL_MIN and not getattr(_local, "serial", False)
    getattr(kernels, name if parallel else name + "_serial")(*args)


_local = (
    threading.local()
)  # .serial: this thread's kernels stay on it (single_threaded); .generation: the cap it follows


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Within it, this thread's compiled kernels run serially and its GEMMs on one MKL thread, for a
    caller that spreads its work over threads of its own (conv2d's images on a thread pool)."""
    previous = getattr(_local, "serial", False)
    _local.serial = True
    try:
        with blas.single_threaded():
            yield
    finally:
        _local.serial = previous


def casts(a: Array, dtype: np.dtype[Any]) -> bool:
    """Whether the fused path converts ``a`` to ``dtype`` (bfloat16 <-> float32, numpy, contiguous)."""
    pair = (a.dtype, dtype)
    return (
        (pair == (_BF16, _F32) or pair == (_F32, _BF16))
        and type(a) is np.ndarray
        and a.flags.c_contiguous
        and a.size >= _CAST_MIN
        and enabled()
    )


def cast(a: Array, dtype: np.dtype[Any]) -> Array:
    """``a.astype(dtype)`` for bfloat16 <-> float32 by bit arithmetic (ml_dtypes' loop is ~10x slower);
    the same bits as ml_dtypes, rounding to nearest even."""
    if a.dtype == _BF16:
        out = np.empty(a.shape, _F32)
        _kernels().cast_bits(True, a.reshape(-1).view(np.uint16), out.reshape(-1).view(np.uint32), 0, a.size)
    else:
        out = np.empty(a.shape, _BF16)
        _kernels().cast_bits(False, a.reshape(-1).view(np.uint32), out.reshape(-1).view(np.uint16), 0, a.size)
    return out


_SCRATCH_MAX = 256 << 20  # bytes: a larger scratch request gets a fresh array, kept by no one
_scratch = threading.local()


def scratch_f32(shape: tuple[int, ...]) -> Array:
    """An uninitialised float32 array of ``shape`` over this thread's scratch buffer, which grows to
    the largest request up to 256 MiB and is then reused. Only for temporaries that die before the
    same thread asks again (conv2d's columns and Winograd tiles): glibc may map a large block anew on
    every allocation, and a fresh one per call would then page-fault in on every call."""
    size = math.prod(shape)
    if size * 4 > _SCRATCH_MAX:
        return np.empty(shape, _F32)
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None or buffer.size < size:
        buffer = _scratch.buffer = np.empty(size, _F32)
    return buffer[:size].reshape(shape)


_GEMV_MIN = 1 << 12  # weight elements below which numpy's call (less overhead) stays the road
_GEMV_PARALLEL_MIN = 1 << 16  # weight elements from which a GEMV spreads over the pool
_gemv_parts = threading.local()  # .buffer: this thread's partial sums of gemv (its own, not scratch_f32's)


def gemv_takes(x: Array, wt: Array, bias: Array | None) -> bool:
    """Whether :func:`gemv` computes ``x @ wt (+ bias)``: one float32 row ``x`` (1, K), ``wt`` (K, N) float32
    C-contiguous (a linear pack) or the transpose of a C-contiguous (N, K) weight, ``bias`` None or
    contiguous (N,) float32, the path enabled, and numba's pool holding two threads or more (on one
    thread OpenBLAS's GEMV is as fast and already there)."""
    pool = _state.get("pool")  # known once the kernels loaded (enabled() below loads them)
    if pool is not None and pool < 2:
        return False
    if type(x) is not np.ndarray or type(wt) is not np.ndarray or x.dtype != _F32 or wt.dtype != _F32:
        return False
    if x.ndim != 2 or x.shape[0] != 1 or wt.ndim != 2 or x.shape[1] != wt.shape[0] or wt.size < _GEMV_MIN:
        return False
    if not (wt.flags.c_contiguous or wt.T.flags.c_contiguous) or getattr(_local, "serial", False):
        return False
    if bias is not None and (type(bias) is not np.ndarray or bias.dtype != _F32 or bias.shape != (wt.shape[1],)):
        return False
    return enabled() and _state["pool"] > 1  # enabled() loads the kernels, which sets the pool's size


def gemv(x: Array, wt: Array, bias: Array | None) -> Array:
    """``x @ wt (+ bias)`` as a (1, N) float32 array, for what :func:`gemv_takes` accepts. A pack's (K, N)
    layout sums fixed groups of 128 weight rows, then the groups in order; a transposed weight takes one
    dot product per output. Either way the bits do not depend on the thread count."""
    k = _kernels()
    row = np.ascontiguousarray(x[0])
    b = np.empty(0, _F32) if bias is None else np.ascontiguousarray(bias)
    out = np.empty((1, wt.shape[1]), _F32)
    parallel = wt.size >= _GEMV_PARALLEL_MIN
    if wt.flags.c_contiguous:
        chunks = -(-wt.shape[0] // k.GEMV_ROWS)
        size = chunks * wt.shape[1]
        buffer = getattr(_gemv_parts, "buffer", None)
        if buffer is None or buffer.size < size:
            buffer = _gemv_parts.buffer = np.empty(size, _F32)
        parts = buffer[:size].reshape(chunks, wt.shape[1])
        (k.gemv_t if parallel else k.gemv_t_serial)(row, wt, b, parts, out[0])
    else:
        (k.gemv if parallel else k.gemv_serial)(row, wt.T, b, out[0])
    return out


def rotates(x: Array, cos: Array, sin: Array) -> bool:
    """Whether :func:`rotary` takes these: a 4-D float32 numpy ``x`` (B, H, T, D) of any strides (heads
    split off a projection are a transposed view) and C-contiguous float32 (T, D) tables."""
    if type(x) is not np.ndarray or x.ndim != 4 or x.dtype != _F32 or x.size == 0:
        return False
    for t in (cos, sin):
        if type(t) is not np.ndarray or t.dtype != _F32 or t.shape != x.shape[2:] or not t.flags.c_contiguous:
            return False
    return enabled()


def rotary(x: Array, cos: Array, sin: Array) -> Array:
    """``x * cos + rotate_half(x) * sin`` as a new C-contiguous array, in one pass (see :func:`rotates`)."""
    out = np.empty(x.shape, _F32)
    _launch("rotary", x.size, x, cos, sin, out)
    return out


def transposes(w: Array, dtype: np.dtype[Any]) -> bool:
    """Whether :func:`transposed` takes ``w`` into ``dtype`` (2-D numpy, float32 or float64 kept,
    or bfloat16 kept or widened to float32, and large enough to be worth a compiled call)."""
    pairs = ((_F32, _F32), (_F64, _F64), (_BF16, _F32), (_BF16, _BF16))
    return type(w) is np.ndarray and w.ndim == 2 and (w.dtype, dtype) in pairs and w.size >= _CAST_MIN and enabled()


def transposed(w: Array, dtype: np.dtype[Any]) -> Array:
    """A new C-contiguous ``w.T`` in ``dtype`` (what a linear pack keeps), copied tile by tile."""
    out = np.empty((w.shape[1], w.shape[0]), dtype)
    if w.dtype == _BF16:  # bit patterns: widened into float32's upper half, or copied as they are
        widen = out.dtype != _BF16
        _launch("transpose", w.size, w.view(np.uint16), out.view(np.uint32 if widen else np.uint16), widen)
    else:
        _launch("transpose", w.size, w, out, False)
    return out


def gelu(x: Array, approximate: str) -> Array:
    """GELU of a float32 (or bfloat16) array: ``x/2 * erfc(-x/sqrt 2)``, or the tanh form."""
    k = _kernels()
    return _activation(k.GELU_TANH if approximate == "tanh" else k.GELU_ERF, x)


def _activation(op: int, x: Array) -> Array:
    """Elementwise kernel ``op`` of a float32 array, or of a bfloat16 one in one pass (bfloat16 out)."""
    out = np.empty_like(x)
    if x.dtype == _BF16:
        _launch("activation_bf16", x.size, op, _bits(x), _bits(out))
    else:
        _launch("activation", x.size, op, x.reshape(-1), out.reshape(-1))
    return out


def broadcast_rows(row: Array, rows: int) -> Array:
    """A new (rows, n) float32 array whose every row is ``row`` (n,), filled on the pool where large
    (numpy's broadcast copy is one pass on one core: a 1024x1536 bias 150 us, on two threads 60)."""
    out = np.empty((rows, int(row.shape[0])), _F32)
    _launch("fill_rows", out.size, np.ascontiguousarray(row, _F32), out)
    return out


_BINARY_OPS = ("add", "subtract", "multiply")


def binary_takes(a: Any, b: Any) -> bool:
    """Whether :func:`binary` computes ``a op b``: two C-contiguous float32 numpy arrays of one shape,
    large enough for the pool (numpy's loop is as fast below that), the path enabled."""
    return (
        type(a) is np.ndarray
        and type(b) is np.ndarray
        and a.dtype == _F32
        and b.dtype == _F32
        and a.shape == b.shape
        and a.size >= _PARALLEL_MIN
        and a.flags.c_contiguous
        and b.flags.c_contiguous
        and enabled()
    )


def binary(op: str, a: Array, b: Array) -> Array:
    """``numpy.<op>(a, b)`` for ``op`` add, subtract or multiply of arrays :func:`binary_takes` accepts,
    on the pool: the same bits (one IEEE operation an element)."""
    out = np.empty_like(a)
    k = _kernels()
    code = (k.ADD, k.SUBTRACT, k.MULTIPLY)[_BINARY_OPS.index(op)]
    _launch("binary", a.size, code, a.reshape(-1), b.reshape(-1), out.reshape(-1))
    return out


def relu(x: Array) -> Array:
    """``max(x, 0)`` of a float32 array, NaN kept (threaded where large: numpy's maximum is one pass
    on one core, 0.8 ms for one 4 MB activation of the conv net)."""
    out = np.empty_like(x)
    _launch("activation", x.size, _kernels().RELU, x.reshape(-1), out.reshape(-1))
    return out


def silu(x: Array) -> Array:
    """``x * sigmoid(x)`` of a float32 (or bfloat16) array."""
    return _activation(_kernels().SILU, x)


def layer_norm(x: Array, width: int, w: Array | None, b: Array | None, eps: float) -> Array:
    """LayerNorm over the trailing ``width`` elements of each row (w, b float32 of that size, or None);
    a bfloat16 ``x`` gives bfloat16."""
    ones = np.ones(width, _F32) if w is None else w.reshape(-1)
    zeros = np.zeros(width, _F32) if b is None else b.reshape(-1)
    return _rows(_kernels().LAYER_NORM, x, width, ones, zeros, eps)


def _rows(op: int, x: Array, width: int, w: Array, b: Array, eps: float) -> Array:
    """Row kernel ``op`` over rows of ``width`` of a float32 array, or of a bfloat16 one in one pass."""
    out = np.empty_like(x)
    if x.dtype == _BF16:
        args = (_bits(x).reshape(-1, width), w, b, np.float32(eps), _bits(out).reshape(-1, width))
        _launch("rows_bf16", x.size, op, *args)
    else:
        _launch("rows", x.size, op, x.reshape(-1, width), w, b, np.float32(eps), out.reshape(-1, width))
    return out


def rms_norm(x: Array, width: int, w: Array | None, eps: float) -> Array:
    """RMSNorm over the trailing ``width`` elements of each row; a bfloat16 ``x`` gives bfloat16."""
    ones = np.ones(width, _F32) if w is None else w.reshape(-1)
    return _rows(_kernels().RMS_NORM, x, width, ones, ones, eps)


def softmax_last(x: Array) -> Array:
    """Softmax along the last axis (max-shifted; an all ``-inf`` row gives NaN, as numpy's path)."""
    out = np.empty_like(x)
    width = x.shape[-1]
    unused = np.empty(0, _F32)  # softmax takes no weights
    _launch(
        "rows", x.size, _kernels().SOFTMAX, x.reshape(-1, width), unused, unused, np.float32(0), out.reshape(-1, width)
    )
    return out


def softmax_in_place(x: Array) -> None:
    """Softmax along the last axis of a float32 C-contiguous ``x``, written over it: shift by the
    row max, a SIMD exp (``blas.exp``), divide by the row sum. A row that is all ``-inf`` becomes zeros
    (attention's rule for a query that may see no key), not NaN. (Tried and dropped: the three steps
    block by block in one compiled pass calling MKL's exp from numba's parallel region, 0.42 -> 0.34 ms
    on two threads for 8x12x128x128 scores, but MKL called inside an OpenMP region sometimes ran
    nested threads: MiniLM at 2 threads 1.9x slower in some processes.)"""
    rows = x.reshape(-1, x.shape[-1])
    k = _kernels()
    _launch("softmax_step", x.size, k.SHIFT, rows)
    blas.exp(rows, out=rows)  # MKL's vector exp where it loaded, else numpy's (both SIMD)
    _launch("softmax_step", x.size, k.NORMALIZE, rows)


def _compile() -> Any:
    # numba's thread pool is OpenMP (libgomp), whose idle workers spin long by default: on two
    # cores against OpenBLAS's workers and the caller (a MiniLM forward at 2 threads: 260 ms). A
    # short spin, then sleep (blas.prefer_short_openmp_spin); libgomp reads it when it loads, below.
    blas.prefer_short_openmp_spin()
    from packrt_kernels_cpu import kernel_cache  # import numba: only now, on first use

    with kernel_cache.shared_cache():  # the kernels' cache=True keys on their source's content (kernel_cache)
        from packrt_kernels_cpu import _numba_kernels

    return _numba_kernels


def compiled_module(name: str) -> Any:
    """Another module of compiled loops (``packrt_kernels_cpu.conv._numba``, ``._numba_int8``), imported
    once numba is loaded and set up as this module's kernels are (OpenMP spin, pool started, the
    calling thread on the thread cap) and under the shared kernel cache. ImportError where numba
    cannot load: those roads have no numpy twin, and the callers choose them only where it does.

    Threads of a pool may ask at once on first use: the import runs once, under a lock, and no
    caller sees the module before it has finished importing."""
    if _kernels() is None:
        raise ImportError(f"{name} needs numba, which cannot load here")
    module = _compiled_modules.get(name)
    if module is None:
        with _load_lock:
            module = _compiled_modules.get(name)
            if module is None:
                from packrt_kernels_cpu import kernel_cache

                with kernel_cache.shared_cache():
                    module = importlib.import_module(name)
                _compiled_modules[name] = module
    return module


_compiled_modules: dict[str, Any] = {}  # compiled_module's imports, each complete
