"""The compiled loops behind :mod:`packrt_kernels_cpu.fused` (with :mod:`packrt_kernels_cpu.conv._numba`,
conv2d's, the only modules that import numba).

Each kernel is a span loop (``_*_span``: elements, rows, planes or tiles ``lo:hi``, compiled serial)
and a body that splits its work into spans with ``numba.prange``, compiled twice by :func:`twins`:
``name`` runs the spans over numba's thread pool; ``name_serial`` runs the same body on the calling
thread (``prange`` as ``range``), what small work takes: waking a pool costs more than it saves, and
on a busy machine far more (:func:`packrt_kernels_cpu.compiled.launch` chooses). Every kernel takes
C-contiguous arrays (the rotary kernel's input may be any strided view) and writes ``out``. The norms'
means and variances and ``softmax``'s sums of exponentials accumulate in float64, so a wide row keeps
the accuracy numpy's pairwise float32 sums have; everything else stays float32, attention's in-place
softmax sums (reordered, so they vectorise) and the GEMV's sums (in a fixed grouping) included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import FunctionType
from typing import Any

import numba
import numpy as np
from llvmlite import ir  # type: ignore[import-untyped]
from numba.core import types
from numba.extending import intrinsic

Array = Any

# error_model="numpy": a float division by zero gives inf/NaN as numpy does, instead of a
# ZeroDivisionError check whose branch keeps LLVM from vectorising the loop.
_serial = numba.njit(cache=True, fastmath=False, nogil=True, error_model="numpy")
_parallel = numba.njit(parallel=True, cache=True, fastmath=False, nogil=True, error_model="numpy")
# Row reductions that may run in any order and ignore NaN's ordering (a row holding NaN ends up
# NaN either way): the flags let LLVM vectorise a max or a sum across a row.
_reducing = numba.njit(cache=True, fastmath={"nnan", "nsz", "reassoc"}, nogil=True, error_model="numpy")
# Multiplies and adds that may fuse into one FMA (rounded once instead of twice): polynomials and
# products, whose operation order stays as written.
_contracting = numba.njit(cache=True, fastmath={"contract"}, nogil=True, error_model="numpy")


@_serial
def tasks(units: int) -> int:
    """Into how many tasks a kernel body splits ``units`` independent units of work: one a unit, for the
    pool to share out. In a serial twin (:func:`twins`) this name is :func:`_one_task` instead."""
    return units


@_serial
def _one_task(units: int) -> int:
    """:func:`tasks` in a serial twin: all the work in one task (none for no work), so the span loop runs
    once over every unit, as a loop written for the calling thread would."""
    return min(units, 1)


def twins(body: Callable[..., None]) -> tuple[Any, Any]:
    """``(name, name_serial)``, ``name`` being ``body``'s name without its leading underscore: the body
    compiled for the pool and for the calling thread. A body splits its work with :func:`tasks` and
    runs the tasks in a ``numba.prange`` loop, each task one call of a span loop on units
    ``units * t // split`` to ``units * (t + 1) // split``.

    ``name`` is compiled with ``parallel=True``: the tasks are shared out over numba's pool.
    ``name_serial`` is compiled with ``parallel=False`` (numba runs ``prange`` as ``range``: no parallel
    region is started) and ``tasks`` bound to :func:`_one_task`, so it calls the span loop once over all
    the work, not once a row. The flags are otherwise the same, and each unit's result does not depend
    on the span it was computed in, so the twins give the same bits. The serial twin reads the module's
    names as they are when ``twins`` is called: a body may use only names defined above it.

    Each twin compiles its own copy of ``body`` named after it: numba files its disk cache entries by a
    function's name, and its key leaves ``parallel`` and the globals out, so one function compiled both
    ways would read back the other's machine code."""
    if not isinstance(body, FunctionType):
        raise TypeError(f"twins compiles a kernel body written as a Python function, got {body!r}")
    name = body.__name__.lstrip("_")
    made = []
    serial_globals = {**body.__globals__, "tasks": _one_task}
    for twin, jit, names in ((name, _parallel, body.__globals__), (name + "_serial", _serial, serial_globals)):
        copy = FunctionType(body.__code__, names, twin, body.__defaults__, body.__closure__)
        copy.__qualname__, copy.__doc__, copy.__module__ = twin, body.__doc__, body.__module__
        made.append(jit(copy))
    return made[0], made[1]


_INV_SQRT2 = np.float32(1.0 / math.sqrt(2.0))
_TANH_SCALE = np.float32(math.sqrt(2.0 / math.pi))
_CUBIC = np.float32(0.044715)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)
_CHUNK = 16384  # elements per parallel task of an elementwise kernel
_TILE = 32  # a transpose copies 32x32 tiles, so reads and writes both stay in cache


def set_num_threads(n: int) -> None:
    """Cap the pool for parallel regions this thread launches (numba's own maximum is the core count)."""
    limit = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
    numba.set_num_threads(max(1, min(int(n), int(limit))))


# erf(z) ~ z P(z^2) / Q(z^2) on |z| <= 3.92 (beyond it erf rounds to +-1 in float32), and tanh the
# same way on |z| <= 9: rational fits of our own (Lawson-weighted least squares on the absolute
# error; tools/fit_rational.py rebuilds them). Only multiplies, adds, one division and clamps, so
# LLVM vectorises the loops, where math.erf and math.tanh, scalar libm calls, keep them scalar (the
# tanh GELU ran 6x slower than the exact one). Errors evaluated in float32: erf 3.5e-7, tanh 3.0e-7.
_ERF_CLAMP = np.float32(3.92)
_ERF_P = (1.1283790224, 0.19276478673, 0.053060480025, 0.0038683320176, 0.0002874749643, 2.034670509e-06)
_ERF_Q = (0.50416501148, 0.11508483161, 0.015172308868, 0.0011881077905, 3.8069739659e-05)
_P0, _P1, _P2, _P3, _P4, _P5 = (np.float32(c) for c in _ERF_P)
_Q1, _Q2, _Q3, _Q4, _Q5 = (np.float32(c) for c in _ERF_Q)
_TANH_CLAMP = np.float32(9.0)
_TANH_P = (0.99999990639, 0.13373187177, 0.0034865690697, 2.0471609622e-05, 1.3183907025e-08)
_TANH_Q = (0.46706484055, 0.025841931231, 0.00032713639395, 7.7025356597e-07)
_TP0, _TP1, _TP2, _TP3, _TP4 = (np.float32(c) for c in _TANH_P)
_TQ1, _TQ2, _TQ3, _TQ4 = (np.float32(c) for c in _TANH_Q)


# -- elementwise: a span of a flat array ------------------------------------------------------------
# Each span kernel loops over views x[lo:hi], out[lo:hi] indexed from 0. Indexing the whole
# arrays from lo makes numba's negative-index wraparound reachable, and LLVM's overlap check then
# over-estimates what the loop reads: when out starts right after x in memory (numpy's next
# allocation usually does) the vector loop is skipped for the scalar one.
@_contracting  # the two Horner polynomials as FMAs: one instruction and one rounding per step
def gelu_erf_value(v: Any) -> Any:
    """``v/2 (1 + erf(v/sqrt 2))``: within 1.5e-6 absolute of the exact value for every float32
    ``v`` (exactly ``v`` or 0 past the clamp; NaN and -inf give NaN, as the numpy path does)."""
    z = min(max(v * _INV_SQRT2, -_ERF_CLAMP), _ERF_CLAMP)
    t = z * z
    p = ((((_P5 * t + _P4) * t + _P3) * t + _P2) * t + _P1) * t + _P0
    q = ((((_Q5 * t + _Q4) * t + _Q3) * t + _Q2) * t + _Q1) * t + _ONE
    erf = min(max(z * p / q, -_ONE), _ONE)
    return _HALF * v * (_ONE + erf)


@_contracting
def tanh_value(u: Any) -> Any:
    """tanh within 3.1e-7 absolute for every float32 ``u`` (exactly +-1 past the clamp; NaN stays NaN)."""
    z = min(max(u, -_TANH_CLAMP), _TANH_CLAMP)
    t = z * z
    p = (((_TP4 * t + _TP3) * t + _TP2) * t + _TP1) * t + _TP0
    q = (((_TQ4 * t + _TQ3) * t + _TQ2) * t + _TQ1) * t + _ONE
    # past the clamp tanh rounds to +-1 in float32, where the fit stays one unit short: a select, not a
    # branch, so the loop still vectorises (NaN fails both tests and stays NaN)
    return _ONE if u >= _TANH_CLAMP else -_ONE if u <= -_TANH_CLAMP else min(max(z * p / q, -_ONE), _ONE)


@_contracting
def gelu_tanh_value(v: Any) -> Any:
    """``v/2 (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))`` with :func:`tanh_value`'s tanh."""
    return _HALF * v * (_ONE + tanh_value(_TANH_SCALE * (v + _CUBIC * v * v * v)))


def _bitcast_int32_to_float32(typingctx: Any, bits: Any) -> Any:
    signature = types.float32(types.int32)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.FloatType())

    return signature, codegen


# _float32_from_bits(bits): the float32 whose bits are the int32 ``bits``, a reinterpretation LLVM
# vectorises (numba has no scalar bit cast of its own)
_float32_from_bits: Any = intrinsic(_bitcast_int32_to_float32)


# exp(v) = 2^n e^r with n = round(v / ln 2) and |r| <= ln(2)/2: r by Cody and Waite's two-part ln 2 (the
# high part has few bits, so n * high is exact), e^r by its Taylor polynomial to r^7 (truncation below
# 2e-9 relative), 2^n as two float32 powers of two built from their bits, so neither leaves the normal
# range where the result does not. Within 1.3 units in the last place over float32's normal range.
_LOG2E = np.float32(1.0 / math.log(2.0))
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(math.log(2.0) - 0.693359375)
_EXP_HI = np.float32(88.72283935546875)  # above: inf
_EXP_LO = np.float32(-103.97)  # below: 0 (exp rounds to zero past the subnormals)
_E2, _E3, _E4, _E5, _E6, _E7 = (np.float32(1.0 / math.factorial(k)) for k in range(2, 8))
_ZERO = np.float32(0.0)
_INF = np.float32(np.inf)
_BIAS = np.int32(127)
_MANTISSA_BITS = np.int32(23)


@_contracting
def exp_value(v: Any) -> Any:
    """float32 ``exp(v)`` within 1.3 units in the last place (exactly inf above 88.7228, 0 below -103.97,
    NaN for NaN); plain arithmetic, so a loop over it vectorises where ``math.exp`` keeps it scalar."""
    x = min(max(v, _EXP_LO), _EXP_HI)
    n = np.floor(x * _LOG2E + _HALF)
    r = (x - n * _LN2_HI) - n * _LN2_LO
    p = ((((((_E7 * r + _E6) * r + _E5) * r + _E4) * r + _E3) * r + _E2) * r + _ONE) * r + _ONE
    k = np.int32(n)
    half = k >> np.int32(1)
    low = _float32_from_bits((half + _BIAS) << _MANTISSA_BITS)
    high = _float32_from_bits((k - half + _BIAS) << _MANTISSA_BITS)
    return _INF if v > _EXP_HI else _ZERO if v < _EXP_LO else p * low * high


@_serial
def silu_value(v: Any) -> Any:
    return v / (_ONE + exp_value(-v))


@_serial
def relu_value(v: Any) -> Any:
    return v if v > 0 or v != v else 0  # NaN stays NaN; -0.0 becomes 0.0, as numpy.maximum gives


@_serial
def _widen_span(src: Array, out: Array, lo: int, hi: int) -> None:
    """bfloat16 bits -> float32 bits: bfloat16 is the top half of a float32, so widening is a shift."""
    src, out = src[lo:hi], out[lo:hi]  # indexed from 0 (see the note above)
    for i in range(src.shape[0]):
        out[i] = np.uint32(src[i]) << np.uint32(16)


@_serial
def _narrow_span(src: Array, out: Array, lo: int, hi: int) -> None:
    """float32 bits -> bfloat16 bits, rounding to nearest, ties to even (as ml_dtypes does);
    NaN stays a quiet NaN."""
    src, out = src[lo:hi], out[lo:hi]  # indexed from 0 (see the note above)
    for i in range(src.shape[0]):
        bits = src[i]
        if (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
            out[i] = np.uint16((bits >> np.uint32(16)) | np.uint32(0x0040))
        else:
            lsb = (bits >> np.uint32(16)) & np.uint32(1)
            out[i] = np.uint16((bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16))


GELU_ERF, GELU_TANH, SILU, RELU = 0, 1, 2, 3  # the elementwise activations, by op code


# The activations' arithmetic is written once, in the ``*_value`` functions above; this span and the
# serving plan's in-place epilogue (:mod:`._numba_plan`) loop over them, one loop per op (a branch per
# element would keep the loop from vectorising).
@_serial
def _activation_span(op: int, x: Array, out: Array, lo: int, hi: int) -> None:
    x, out = x[lo:hi], out[lo:hi]  # indexed from 0 (see the note above)
    if op == GELU_ERF:
        for i in range(x.shape[0]):
            out[i] = gelu_erf_value(x[i])
    elif op == GELU_TANH:
        for i in range(x.shape[0]):
            out[i] = gelu_tanh_value(x[i])
    elif op == SILU:
        for i in range(x.shape[0]):
            out[i] = silu_value(x[i])
    else:
        for i in range(x.shape[0]):
            out[i] = relu_value(x[i])


@_serial
def activate_in_place(op: int, row: Array, b: Array) -> None:
    """``row[j] = act(row[j] + b[j])`` for activation ``op`` (``b`` empty: no bias), one loop per case (a
    branch per element would keep the loop from vectorising); read and written through one array, so
    no overlap check sends it to the scalar loop."""
    if b.shape[0] == 0:
        if op == GELU_ERF:
            for j in range(row.shape[0]):
                row[j] = gelu_erf_value(row[j])
        elif op == GELU_TANH:
            for j in range(row.shape[0]):
                row[j] = gelu_tanh_value(row[j])
        elif op == SILU:
            for j in range(row.shape[0]):
                row[j] = silu_value(row[j])
        else:
            for j in range(row.shape[0]):
                row[j] = relu_value(row[j])
    elif op == GELU_ERF:
        for j in range(row.shape[0]):
            row[j] = gelu_erf_value(row[j] + b[j])
    elif op == GELU_TANH:
        for j in range(row.shape[0]):
            row[j] = gelu_tanh_value(row[j] + b[j])
    elif op == SILU:
        for j in range(row.shape[0]):
            row[j] = silu_value(row[j] + b[j])
    else:
        for j in range(row.shape[0]):
            row[j] = relu_value(row[j] + b[j])


@_serial
def cast_bits(widen: bool, src: Array, out: Array, lo: int, hi: int) -> None:
    """bfloat16 <-> float32 on their bits, elements ``lo:hi``: ``widen`` uint16 -> uint32, else uint32
    -> uint16. Memory-bound, so it runs on the calling thread whatever the size."""
    if widen:
        _widen_span(src, out, lo, hi)
    else:
        _narrow_span(src, out, lo, hi)


def _activation(op: int, x: Array, out: Array) -> None:
    n = x.shape[0]
    split = tasks((n + _CHUNK - 1) // _CHUNK)
    for c in numba.prange(split):
        _activation_span(op, x, out, n * c // split, n * (c + 1) // split)


activation, activation_serial = twins(_activation)


@_serial
def _fill_rows_span(row: Array, out: Array, lo: int, hi: int) -> None:
    n = row.shape[0]
    for r in range(lo, hi):
        for j in range(n):  # an explicit loop: numba's slice assignment does not vectorise the copy
            out[r, j] = row[j]


def _fill_rows(row: Array, out: Array) -> None:
    """Every row of ``out`` (rows, n) a copy of ``row`` (n,): a bias laid out for a GEMM to add onto."""
    rows = out.shape[0]
    per = max(1, _CHUNK // max(1, out.shape[1]))
    split = tasks((rows + per - 1) // per)
    for c in numba.prange(split):
        _fill_rows_span(row, out, rows * c // split, rows * (c + 1) // split)


fill_rows, fill_rows_serial = twins(_fill_rows)


ADD, SUBTRACT, MULTIPLY = 0, 1, 2  # the elementwise arithmetic of two arrays, by op code


@_serial
def _binary_span(op: int, a: Array, b: Array, out: Array, lo: int, hi: int) -> None:
    """``out = a op b`` over elements lo:hi: one IEEE operation each, numpy's bits exactly."""
    a, b, out = a[lo:hi], b[lo:hi], out[lo:hi]  # indexed from 0 (see the elementwise note above)
    if op == ADD:
        for i in range(out.shape[0]):
            out[i] = a[i] + b[i]
    elif op == SUBTRACT:
        for i in range(out.shape[0]):
            out[i] = a[i] - b[i]
    else:
        for i in range(out.shape[0]):
            out[i] = a[i] * b[i]


def _binary(op: int, a: Array, b: Array, out: Array) -> None:
    n = a.shape[0]
    split = tasks((n + _CHUNK - 1) // _CHUNK)
    for c in numba.prange(split):
        _binary_span(op, a, b, out, n * c // split, n * (c + 1) // split)


binary, binary_serial = twins(_binary)


# bfloat16 in and out: each tile of bits widened into float32 scratch, computed there, rounded back, in
# one pass over memory instead of a widening pass, the float32 kernel and a narrowing pass.
_HALF_TILE = 1024


@_serial
def _activation_bf16_span(op: int, x: Array, out: Array, lo: int, hi: int) -> None:
    a, c = np.empty(_HALF_TILE, np.float32), np.empty(_HALF_TILE, np.float32)
    a_bits, c_bits = a.view(np.uint32), c.view(np.uint32)
    for start in range(lo, hi, _HALF_TILE):
        n = min(hi, start + _HALF_TILE) - start
        _widen_span(x[start : start + n], a_bits, 0, n)
        _activation_span(op, a, c, 0, n)
        _narrow_span(c_bits, out[start : start + n], 0, n)


def _activation_bf16(op: int, x: Array, out: Array) -> None:
    n = x.shape[0]
    split = tasks((n + _CHUNK - 1) // _CHUNK)
    for c in numba.prange(split):
        _activation_bf16_span(op, x, out, n * c // split, n * (c + 1) // split)


activation_bf16, activation_bf16_serial = twins(_activation_bf16)


# -- row-wise: rows lo:hi of a (rows, width) array --------------------------------------------------
# The norms' row sums accumulate in float64 and may reorder (``_reducing``): a strict in-order float64
# sum is one dependent add per element, which keeps LLVM from vectorising it; any order of float64
# partial sums is as accurate as float32 data can use.
@_reducing
def _wide_squares(row: Array, center: Any) -> Any:
    """The sum of ``(row[j] - center)**2``, each difference taken in float32 as the kernels use it."""
    total = 0.0
    for j in range(row.shape[0]):
        d = np.float64(row[j] - center)
        total += d * d
    return total


@_reducing
def _wide_moments(row: Array, shift: Any) -> Any:
    """The sum and the sum of squares of ``row - shift`` in float64, in one pass. With ``shift`` one of
    the row's own values the variance as E[d^2] - E[d]^2 does not cancel (d is centred near 0 for
    any offset the row has), so one pass over the row is as accurate as two."""
    total = 0.0
    squares = 0.0
    for j in range(row.shape[0]):
        d = np.float64(row[j]) - shift
        total += d
        squares += d * d
    return total, squares


@_serial
def _layer_norm_rows(x: Array, w: Array, b: Array, eps: np.float32, out: Array, lo: int, hi: int) -> None:
    width = x.shape[1]
    for r in range(lo, hi):
        shift = np.float64(x[r, 0])
        total, squares = _wide_moments(x[r], shift)
        centre = total / width
        variance = max(squares / width - centre * centre, 0.0)
        mean = np.float32(shift + centre)
        scale = np.float32(1.0 / math.sqrt(variance + eps))
        for j in range(width):
            out[r, j] = (x[r, j] - mean) * scale * w[j] + b[j]


@_serial
def _rms_norm_rows(x: Array, w: Array, eps: np.float32, out: Array, lo: int, hi: int) -> None:
    width = x.shape[1]
    for r in range(lo, hi):
        scale = np.float32(1.0 / math.sqrt(_wide_squares(x[r], np.float32(0.0)) / width + eps))
        for j in range(width):
            out[r, j] = x[r, j] * scale * w[j]


@_serial
def _softmax_rows(x: Array, out: Array, lo: int, hi: int) -> None:
    """Max-shifted; an all ``-inf`` row gives NaN, as the numpy path does."""
    width = x.shape[1]
    for r in range(lo, hi):
        top = _row_max(x[r])
        for j in range(width):  # its own loop, so it vectorises (the float64 sum below stays in order)
            out[r, j] = exp_value(x[r, j] - top)
        total = 0.0
        for j in range(width):
            total += out[r, j]
        inv = np.float32(1.0 / total)
        for j in range(width):
            out[r, j] *= inv


@_reducing
def _row_max(row: Array) -> Any:
    """The row's largest value (NaN may be skipped: the caller's next step turns a NaN row all NaN).
    Eight running maxima, so eight comparisons are in flight: LLVM keeps a single running max one
    dependent step per element, 0.49 ns each, against 0.15 ns here."""
    n = row.shape[0]
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = row[0]
    j = 0
    while j + 8 <= n:
        a0, a1, a2, a3 = max(a0, row[j]), max(a1, row[j + 1]), max(a2, row[j + 2]), max(a3, row[j + 3])
        a4, a5, a6, a7 = max(a4, row[j + 4]), max(a5, row[j + 5]), max(a6, row[j + 6]), max(a7, row[j + 7])
        j += 8
    top = max(max(max(a0, a1), max(a2, a3)), max(max(a4, a5), max(a6, a7)))
    while j < n:
        top = max(top, row[j])
        j += 1
    return top


_SIGN_OFF = np.int32(0x7FFFFFFF)


@_serial
def _ordered(bits: Any) -> Any:
    """A float32's bits as an int32 that orders as the floats do (negative floats' magnitude bits flipped; the
    map is its own inverse). Integer minima and maxima vectorise where float ones, which must mind NaN, do not."""
    return bits ^ ((bits >> np.int32(31)) & _SIGN_OFF)


@_serial
def _row_top(row: Array) -> Any:
    """The largest value of a C-contiguous float32 row of one value or more, as the integer maximum of the
    ordered bits (:func:`_ordered`), 16 lanes at a time: 0.04 ns a value on a Zen 4 core against 0.21 for
    :func:`_row_max`. A NaN with the sign bit clear is the largest (the row's softmax is then NaN throughout,
    as it is anyway); -0.0 ranks below 0.0."""
    bits = row.view(np.int32)
    top = _ordered(bits[0])
    for j in range(1, bits.shape[0]):
        top = max(top, _ordered(bits[j]))
    return _float32_from_bits(_ordered(top))


@_reducing
def _row_sum(row: Array) -> Any:
    total = np.float32(0.0)
    for j in range(row.shape[0]):
        total += row[j]
    return total


@_serial
def _shift_rows(x: Array, lo: int, hi: int) -> None:
    """Rows lo:hi of ``x`` minus their max, in place (minus 0 for an all ``-inf`` row, whose
    exponentials are then all 0 rather than NaN): softmax's first step."""
    for r in range(lo, hi):
        row = x[r]
        top = _row_max(row)
        if top == -np.inf:
            top = np.float32(0.0)
        for j in range(row.shape[0]):
            row[j] -= top


@_serial
def _normalize_rows(x: Array, lo: int, hi: int) -> None:
    """Rows lo:hi of ``x`` divided by their sums, in place; a row summing to 0 stays 0 and a row
    holding NaN becomes all NaN: softmax's last step."""
    for r in range(lo, hi):
        row = x[r]
        total = _row_sum(row)
        if total != 0:
            inv = np.float32(1.0) / total
            for j in range(row.shape[0]):
                row[j] *= inv


SHIFT, NORMALIZE = 0, 1  # the in-place row steps of softmax, by op code


@_serial
def _steps_span(op: int, x: Array, lo: int, hi: int) -> None:
    if op == SHIFT:
        _shift_rows(x, lo, hi)
    else:
        _normalize_rows(x, lo, hi)


def _softmax_step(op: int, x: Array) -> None:
    """Softmax step ``op`` over every row of ``x``, in place."""
    units = x.shape[0]
    split = tasks(units)
    for r in numba.prange(split):
        _steps_span(op, x, units * r // split, units * (r + 1) // split)


softmax_step, softmax_step_serial = twins(_softmax_step)


LAYER_NORM, RMS_NORM, SOFTMAX = 0, 1, 2  # the row-wise kernels, by op code


@_serial
def _rows_span(op: int, x: Array, w: Array, b: Array, eps: np.float32, out: Array, lo: int, hi: int) -> None:
    if op == LAYER_NORM:
        _layer_norm_rows(x, w, b, eps, out, lo, hi)
    elif op == RMS_NORM:
        _rms_norm_rows(x, w, eps, out, lo, hi)
    else:
        _softmax_rows(x, out, lo, hi)


def _rows(op: int, x: Array, w: Array, b: Array, eps: np.float32, out: Array) -> None:
    """Row kernel ``op`` over every row of ``x`` (``w``, ``b``, ``eps``: what the norms take)."""
    units = x.shape[0]
    split = tasks(units)
    for r in numba.prange(split):
        _rows_span(op, x, w, b, eps, out, units * r // split, units * (r + 1) // split)


rows, rows_serial = twins(_rows)


@_serial
def _rows_bf16_span(op: int, x: Array, w: Array, b: Array, eps: np.float32, out: Array, lo: int, hi: int) -> None:
    """``_rows_span`` on rows of bfloat16 bits, each row widened into float32 scratch and rounded back."""
    width = x.shape[1]
    a, c = np.empty((1, width), np.float32), np.empty((1, width), np.float32)
    a_bits, c_bits = a.reshape(width).view(np.uint32), c.reshape(width).view(np.uint32)
    for r in range(lo, hi):
        _widen_span(x[r], a_bits, 0, width)
        _rows_span(op, a, w, b, eps, c, 0, 1)
        _narrow_span(c_bits, out[r], 0, width)


def _rows_bf16(op: int, x: Array, w: Array, b: Array, eps: np.float32, out: Array) -> None:
    units = x.shape[0]
    split = tasks(units)
    for r in numba.prange(split):
        _rows_bf16_span(op, x, w, b, eps, out, units * r // split, units * (r + 1) // split)


rows_bf16, rows_bf16_serial = twins(_rows_bf16)


# -- transposes: tiles lo:hi of a (rows, cols) matrix into out (cols, rows) ---------------------------
@_serial
def _transpose_tiles(src: Array, out: Array, widen: bool, lo: int, hi: int) -> None:
    """``out = src.T`` tile by tile, so reads and writes both stay within cache lines (numpy's copy
    of a transposed view strides across them); ``widen`` reads bfloat16 bits and writes float32 bits."""
    rows, cols = src.shape
    tiles_j = (cols + _TILE - 1) // _TILE
    for t in range(lo, hi):
        i0, j0 = (t // tiles_j) * _TILE, (t % tiles_j) * _TILE
        for i in range(i0, min(i0 + _TILE, rows)):
            for j in range(j0, min(j0 + _TILE, cols)):
                if widen:
                    out[j, i] = np.uint32(src[i, j]) << np.uint32(16)
                else:
                    out[j, i] = src[i, j]


def _transpose(src: Array, out: Array, widen: bool) -> None:
    units = ((src.shape[0] + _TILE - 1) // _TILE) * ((src.shape[1] + _TILE - 1) // _TILE)
    split = tasks(units)
    for t in numba.prange(split):
        _transpose_tiles(src, out, widen, units * t // split, units * (t + 1) // split)


transpose, transpose_serial = twins(_transpose)


# -- rotary embedding: (batch, head) planes lo:hi of a (B, H, T, D) array ------------------------------
@_serial
def _rotary_planes(x: Array, cos: Array, sin: Array, out: Array, lo: int, hi: int) -> None:
    """``out = x * cos + [-x2, x1] * sin`` row by row (x = [x1, x2] halves of D): the same products
    and sums, in the same order, as the numpy path's, so the same bits."""
    heads, length, half = x.shape[1], x.shape[2], x.shape[3] // 2
    for p in range(lo, hi):
        b, h = p // heads, p % heads
        for t in range(length):
            row, o, c, s = x[b, h, t], out[b, h, t], cos[t], sin[t]
            for i in range(half):
                first, second = row[i], row[i + half]
                o[i] = first * c[i] + (-second) * s[i]
                o[i + half] = second * c[i + half] + first * s[i + half]


def _rotary(x: Array, cos: Array, sin: Array, out: Array) -> None:
    units = x.shape[0] * x.shape[1]
    split = tasks(units)
    for p in numba.prange(split):
        _rotary_planes(x, cos, sin, out, units * p // split, units * (p + 1) // split)


rotary, rotary_serial = twins(_rotary)


# -- GEMV: one row times a matrix (a batch-1 decode step), bias added ---------------------------------
# Compiled here so that a decode step's products share numba's OpenMP pool with its other kernels:
# OpenBLAS's GEMV brings a pool of its own, and on two cores the two pools' waiting workers take
# the cores from each other, spinning while the other pool's work waits (docs/benchmarks.md has the
# measurement). Products may fuse multiply and add ("contract"); sums keep their order.
# Dot products may also reorder their sums (so they vectorise); the grouping is fixed by the shape.
_dotting = numba.njit(cache=True, fastmath={"contract", "reassoc", "nsz"}, nogil=True, error_model="numpy")
GEMV_ROWS = 128  # rows of (in, out) weight summed into one partial: fixed, so no thread count changes the bits
_GEMV_COLS = 1024  # outputs per task when the partials are summed


@_contracting
def _gemv_partial(x: Array, wt: Array, part: Array, lo: int, hi: int) -> None:
    """``part = sum(x[k] * wt[k] for k in lo..hi-1)``, four weight rows per pass over ``part`` (so it is
    read and written a quarter as often); rows stream through memory in order."""
    for j in range(part.shape[0]):
        part[j] = 0.0
    k = lo
    while k + 4 <= hi:
        x0, x1, x2, x3 = x[k], x[k + 1], x[k + 2], x[k + 3]
        w0, w1, w2, w3 = wt[k], wt[k + 1], wt[k + 2], wt[k + 3]
        for j in range(part.shape[0]):
            part[j] = part[j] + x0 * w0[j] + x1 * w1[j] + x2 * w2[j] + x3 * w3[j]
        k += 4
    while k < hi:
        xk, w0 = x[k], wt[k]
        for j in range(part.shape[0]):
            part[j] = part[j] + xk * w0[j]
        k += 1


@_contracting
def _gemv_sum(parts: Array, b: Array, out: Array, lo: int, hi: int) -> None:
    """``out[lo:hi] = b[lo:hi] + parts[0, lo:hi] + parts[1, lo:hi] + ...`` in that order (b empty: none)."""
    o = out[lo:hi]
    if b.shape[0]:
        bias = b[lo:hi]
        for j in range(o.shape[0]):
            o[j] = bias[j]
    else:
        for j in range(o.shape[0]):
            o[j] = 0.0
    for c in range(parts.shape[0]):
        p = parts[c, lo:hi]
        for j in range(o.shape[0]):
            o[j] = o[j] + p[j]


def _gemv_t(x: Array, wt: Array, b: Array, parts: Array, out: Array) -> None:
    """``out = x @ wt + b`` for a row ``x`` (K,) and a C-contiguous (K, N) ``wt`` (a linear pack):
    partials of GEMV_ROWS rows each (``parts``: (ceil(K / GEMV_ROWS), N) scratch), then their sum."""
    k, n = wt.shape
    for c in numba.prange(parts.shape[0]):
        _gemv_partial(x, wt, parts[c], c * GEMV_ROWS, min(k, (c + 1) * GEMV_ROWS))
    split = tasks((n + _GEMV_COLS - 1) // _GEMV_COLS)
    for t in numba.prange(split):
        _gemv_sum(parts, b, out, n * t // split, n * (t + 1) // split)


gemv_t, gemv_t_serial = twins(_gemv_t)


@_dotting
def _gemv_dots(x: Array, w: Array, b: Array, out: Array, lo: int, hi: int) -> None:
    """``out[n] = b[n] + w[n] . x`` for n in lo..hi-1 (b empty: no bias)."""
    for r in range(lo, hi):
        row = w[r]
        s = np.float32(0.0)
        for k in range(row.shape[0]):
            s += row[k] * x[k]
        out[r] = s + b[r] if b.shape[0] else s


def _gemv(x: Array, w: Array, b: Array, out: Array) -> None:
    """``out = w @ x + b`` for a C-contiguous (N, K) ``w`` (a declared weight, served borrowed)."""
    n = w.shape[0]
    split = tasks((n + 63) // 64)
    for t in numba.prange(split):
        _gemv_dots(x, w, b, out, n * t // split, n * (t + 1) // split)


gemv, gemv_serial = twins(_gemv)


def num_threads() -> int:
    """The thread count of the parallel regions this thread launches."""
    return int(numba.get_num_threads())
