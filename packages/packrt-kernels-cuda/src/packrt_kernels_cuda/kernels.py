"""The CUDA table of the kernels contract (:class:`packrt_base.kernels.Kernels`): GPU code where it pays.

packrt-kernels-cpu's kernels are written against the array namespace of their inputs, so on
cupy arrays they already run cupy code (embedding, conv2d, relu, sigmoid, the packs of conv and
embedding, quantization), and the table takes them as they are. What is GPU code here, each with the
contract's signature:

- ``layer_norm``, ``rms_norm``, ``softmax`` (last axis), ``gelu`` (exact and tanh), ``silu``: one
  fused kernel each from ``cuda_src/fused.cu`` (float32 arithmetic, one rounding on the store)
  for float32, float16 and bfloat16 activations; float64 and anything else take the CPU code.
- ``linear`` / ``pack_linear`` / ``borrow_linear``: one cuBLAS GEMM through ``cupy.matmul`` in the
  activation dtype (float16 runs on tensor cores with float32 accumulation; bfloat16 does the same
  where this cupy's matmul takes bfloat16, see :func:`bf16_matmul_native`, and otherwise computes
  in float32), then the bias added in place by the fused bias + activation kernel. A GPU pack keeps
  ``W^T`` in the serving dtype, so a float16 pack is the declared size, not an upcast float32 copy.
- ``pack_quantized_linear`` / ``borrow_quantized_linear``: up to 16 rows a call (decode), one warp
  per output column reads the int8 row and converts it in registers (``pk_qgemv``); for more rows,
  blocks of int8 rows are dequantized (with their scales) into a scratch of ``scratch_bytes`` and
  multiplied by cuBLAS. The whole weight is never dequantized at once.
- ``scaled_dot_product_attention``: two cuBLAS batched GEMMs (``cupy.matmul`` broadcasts the
  leading dims) around one fused kernel that scales, applies the causal mask and normalizes the
  float32 scores in place. Half inputs compute the scores in float32, as the CPU kernel does.

- ``plan_kernels``: None. The serving plan (``packrt_core.nn.plan``) has no GPU kernels, so a model on a
  CUDA device serves module by module, the plain road.

Every function falls back to the CPU kernel when its inputs are not cupy arrays, so the record
is safe to call with numpy arrays too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from packrt_base.arrays import (
    BFLOAT16,
    FLOAT16,
    FLOAT32,
    array_namespace,
    astype,
    check_linear_args,
    compute_dtype,
    require_float,
    require_ndim,
)
from packrt_base.kernels import OwnedPack, Pack
from packrt_base.plan import PlanKernels

# What this package reuses of the CPU's: the array-generic kernels of CPU_KERNELS (as table entries, and as
# the fallback for inputs the GPU code does not take: numpy arrays, float64) and the int8 pack (its checks,
# its owned copies, its nbytes/unpack), which the GPU pack subclasses, and the zero-copy linear view, served
# here by the GPU GEMM.
from packrt_kernels_cpu import CPU_KERNELS, LinearView, PackedQuantizedLinear
from packrt_kernels_cpu import quantize as cpu_quantize
from packrt_kernels_cuda import compiled

Array = Any  # cupy.ndarray (numpy arrays are passed on to the CPU kernels)
Dims = int | Sequence[int]

SUFFIX: dict[np.dtype[Any], str] = {FLOAT32: "f32", FLOAT16: "f16", BFLOAT16: "bf16"}
ACTIVATIONS: dict[str, int] = {"identity": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
QGEMV_MAX_ROWS = 16  # PK_QGEMV_MAX_ROWS in fused.cu: rows the in-register int8 kernel serves
_state: dict[str, bool] = {}


def on_gpu(*arrays: Array | None) -> bool:
    """Whether every given array (None ignored) is a cupy array."""
    return all(a is None or type(a).__module__.startswith("cupy") for a in arrays)


def pointer(a: Array) -> int:
    """The device address of ``a``'s first element."""
    return int(a.data.ptr)


def _fusable(x: Array) -> bool:
    return on_gpu(x) and np.dtype(x.dtype) in SUFFIX and int(x.size) > 0


def _i32(v: int) -> np.int32:
    return np.int32(v)


def _row_threads(width: int) -> int:
    """Threads per row for the row kernels: whole warps, up to compiled.THREADS."""
    return 32 * max(1, min(compiled.THREADS // 32, -(-width // 32)))


def _f32_vector(p: Array | None) -> Array | None:
    if p is None:
        return None
    return array_namespace(p).ascontiguousarray(astype(p, FLOAT32)).reshape(-1)


def _trailing(x: Array, shape: Dims) -> int:
    k = 1 if isinstance(shape, int) else len(tuple(shape))
    return math.prod(int(s) for s in x.shape[x.ndim - k :])


# -- row-wise kernels ------------------------------------------------------------------------------
def layer_norm(x: Array, shape: Dims, w: Array | None = None, b: Array | None = None, eps: float = 1e-5) -> Array:
    """LayerNorm over the trailing ``shape`` dims, fused (one block per row); CPU semantics."""
    width = _trailing(x, shape)
    if not _fusable(x) or width == 0:
        return CPU_KERNELS.layer_norm(x, shape, w, b, eps)
    xp = array_namespace(x)
    xc = xp.ascontiguousarray(x)
    out = xp.empty_like(xc)
    w32, b32 = _f32_vector(w), _f32_vector(b)
    fn = compiled.function(f"pk_layer_norm_{SUFFIX[np.dtype(x.dtype)]}")
    args = (xc, xc if w32 is None else w32, xc if b32 is None else b32, out, _i32(width), np.float32(eps))
    fn((int(xc.size) // width,), (_row_threads(width),), (*args, _i32(w32 is not None), _i32(b32 is not None)))
    return out


def rms_norm(x: Array, shape: Dims, w: Array | None = None, eps: float | None = None) -> Array:
    """RMSNorm over the trailing dims, fused; ``eps=None`` is float32's machine epsilon, as on the CPU."""
    width = _trailing(x, shape)
    if not _fusable(x) or width == 0:
        return CPU_KERNELS.rms_norm(x, shape, w, eps)
    xp = array_namespace(x)
    xc = xp.ascontiguousarray(x)
    out = xp.empty_like(xc)
    w32 = _f32_vector(w)
    eps_value = float(np.finfo(np.float32).eps) if eps is None else eps
    fn = compiled.function(f"pk_rms_norm_{SUFFIX[np.dtype(x.dtype)]}")
    args = (xc, xc if w32 is None else w32, out, _i32(width), np.float32(eps_value), _i32(w32 is not None))
    fn((int(xc.size) // width,), (_row_threads(width),), args)
    return out


def softmax(x: Array, dim: int = -1) -> Array:
    """Softmax along ``dim``; the last axis runs fused (an all ``-inf`` row gives NaN, as torch)."""
    if not _fusable(x) or x.ndim == 0 or dim % x.ndim != x.ndim - 1 or int(x.shape[-1]) == 0:
        return CPU_KERNELS.softmax(x, dim)
    xp = array_namespace(x)
    xc = xp.ascontiguousarray(x)
    out = xp.empty_like(xc)
    width = int(xc.shape[-1])
    fn = compiled.function(f"pk_softmax_{SUFFIX[np.dtype(x.dtype)]}")
    fn((int(xc.size) // width,), (_row_threads(width),), (xc, out, _i32(width)))
    return out


# -- elementwise -------------------------------------------------------------------------------
def _activate(x: Array, kind: str) -> Array:
    xp = array_namespace(x)
    xc = xp.ascontiguousarray(x)
    out = xp.empty_like(xc)
    n = int(xc.size)
    fn = compiled.function(f"pk_act_{SUFFIX[np.dtype(x.dtype)]}")
    fn((compiled.blocks_for(n),), (compiled.THREADS,), (xc, out, np.int64(n), _i32(ACTIVATIONS[kind])))
    return out


def gelu(x: Array, approximate: str = "none") -> Array:
    """GELU, exact (``x/2 * erfc(-x/sqrt 2)``) or tanh, fused."""
    if not _fusable(x):
        return CPU_KERNELS.gelu(x, approximate)
    return _activate(x, "gelu_tanh" if approximate == "tanh" else "gelu")


def silu(x: Array) -> Array:
    """SiLU, fused (the sigmoid never overflows: exp is taken of ``-|x|`` only)."""
    if not _fusable(x):
        return CPU_KERNELS.silu(x)
    return _activate(x, "silu")


_CPU_ACTIVATIONS: dict[str, Any] = {
    "identity": lambda v: v,
    "relu": CPU_KERNELS.relu,
    "gelu": CPU_KERNELS.gelu,
    "gelu_tanh": lambda v: CPU_KERNELS.gelu(v, "tanh"),
    "silu": CPU_KERNELS.silu,
}


def bias_activation(x: Array, b: Array, activation: str = "identity", out: Array | None = None) -> Array:
    """``activation(x + b)`` with ``b`` broadcast along the last axis, one fused pass.

    ``activation`` is one of :data:`ACTIVATIONS`; ``out`` may be ``x`` itself (in place, as after a
    GEMM). Not part of the ``Kernels`` record (the layers apply bias and activation separately);
    :func:`linear` uses it for its bias.
    """
    xp = array_namespace(x)
    if not _fusable(x):
        cd = compute_dtype(x.dtype)
        act = _CPU_ACTIVATIONS[activation]
        result = astype(act(astype(x, cd) + astype(b, cd)), x.dtype)
        if out is None:
            return result
        out[...] = result
        return out
    xc = xp.ascontiguousarray(x)
    target = xp.empty_like(xc) if out is None else out
    n, width = int(xc.size), int(xc.shape[-1])
    fn = compiled.function(f"pk_bias_act_{SUFFIX[np.dtype(x.dtype)]}")
    args = (xc, _f32_vector(b), target, np.int64(n), _i32(width), _i32(ACTIVATIONS[activation]))
    fn((compiled.blocks_for(n),), (compiled.THREADS,), args)
    return target


# -- GEMMs -------------------------------------------------------------------------------------
def bf16_matmul_native() -> bool:
    """Whether this cupy multiplies bfloat16 matrices itself (cupy >= 14 with ml_dtypes), checked once
    per process on a small product against float32. Without it bfloat16 GEMMs compute in float32."""
    if "bf16" not in _state:
        ok = False
        try:
            cp = compiled.cupy_module()
            rng = np.random.default_rng(0)
            a = rng.standard_normal((64, 48)).astype(BFLOAT16)
            b = rng.standard_normal((48, 40)).astype(BFLOAT16)
            got = cp.asnumpy(cp.asarray(a) @ cp.asarray(b)).astype(np.float32)
            want = a.astype(np.float32) @ b.astype(np.float32)
            ok = bool(np.max(np.abs(got - want)) <= 2.0**-7 * float(np.max(np.abs(want))) + 1e-3)
        except Exception:  # any failure means "not natively": the float32 path is exact
            ok = False
        _state["bf16"] = ok
    return _state["bf16"]


def gemm_dtype(dtype: Any) -> np.dtype[Any]:
    """The dtype a GPU GEMM runs in for activations of ``dtype``: the dtype itself (float16 on tensor
    cores), except bfloat16 where cupy cannot multiply it (float32 then)."""
    dt: np.dtype[Any] = np.dtype(dtype)
    if dt == BFLOAT16 and not bf16_matmul_native():
        return FLOAT32
    return dt


def _gemm(x: Array, wt: Array) -> Array:
    """``x @ wt`` with the batch dims folded into rows: one cuBLAS call."""
    lead = tuple(x.shape[:-1])
    out = x.reshape(-1, x.shape[-1]) @ wt
    return out.reshape((*lead, int(wt.shape[1])))


def _add_bias(out: Array, b: Array) -> Array:
    if _fusable(out):
        return bias_activation(out, b, "identity", out=out)
    out += astype(b, out.dtype)
    return out


def linear(x: Array, w: Array, b: Array | None = None) -> Array:
    """``x @ w.T + b`` from the declared (out, in) weight: cuBLAS reads ``w`` transposed in place."""
    if not on_gpu(x, w, b):
        return CPU_KERNELS.linear(x, w, b)
    dt = np.dtype(x.dtype)
    gd = gemm_dtype(dt)
    out = _gemm(astype(x, gd), astype(w, gd).T)
    if b is not None:
        out = _add_bias(out, b)
    return astype(out, dt)


def _owned(a: Array, dtype: np.dtype[Any]) -> Array:
    return array_namespace(a).array(a, dtype=dtype, order="C", copy=True)


def _bias_for(b: Array | None, gd: np.dtype[Any]) -> Array | None:
    """The bias as a pack keeps it: float32 for the fused add, the GEMM dtype for float64."""
    if b is None:
        return None
    return _owned(b, FLOAT32 if gd in SUFFIX else gd)


class CudaPackedLinear:
    """``W^T`` as a contiguous (in, out) device matrix in the GEMM dtype, plus the bias."""

    def __init__(self, wt: Array, b: Array | None, dtype: np.dtype[Any]) -> None:
        self.wt, self.b, self.dtype = wt, b, dtype
        self.in_features, self.out_features = (int(s) for s in wt.shape)

    def forward(self, x: Array) -> Array:
        out = _gemm(astype(x, self.wt.dtype), self.wt)
        if self.b is not None:
            out = _add_bias(out, self.b)
        return astype(out, self.dtype)

    @property
    def nbytes(self) -> int:
        return int(self.wt.nbytes) + (0 if self.b is None else int(self.b.nbytes))

    def unpack(self) -> tuple[Array, Array | None]:
        """(weight (out, in), bias) in the declared dtype, equal bit for bit to those packed."""
        return _owned(self.wt.T, self.dtype), None if self.b is None else _owned(self.b, self.dtype)


def pack_linear(w: Array, b: Array | None = None) -> OwnedPack:
    """Pack a device (out, in) weight and bias: ``W^T`` in the GEMM dtype (the declared dtype for
    float16, and for bfloat16 where cupy multiplies it), checked as the CPU pack is."""
    if not on_gpu(w, b):
        return CPU_KERNELS.pack_linear(w, b)
    dt = require_float(w, "weight")
    require_ndim(w, 2, "weight", "(out_features, in_features)")
    check_linear_args(w[:1], w, b)
    gd = gemm_dtype(dt)
    return CudaPackedLinear(_owned(w.T, gd), _bias_for(b, gd), dt)


def borrow_linear(w: Array, b: Array | None = None) -> Pack:
    """Serve ``linear`` straight from the declared device weight, copying nothing."""
    if not on_gpu(w, b):
        return CPU_KERNELS.borrow_linear(w, b)
    return LinearView(w, b, linear)  # the bound device arrays and zero extra bytes, served by the GPU GEMM


# -- int8 weight-only linear -----------------------------------------------------------------------
class CudaPackedQuantizedLinear(PackedQuantizedLinear):
    """The CPU pack's int8 weight, scales and bias, served by the GPU kernels (same ``nbytes`` and
    ``unpack``); float64 activations take the CPU code, which runs on cupy as well."""

    _bias32: Array | None = None

    def forward(self, x: Array) -> Array:
        if not _fusable(x) or not on_gpu(self.q):
            return super().forward(x)
        xp = array_namespace(x)
        dt = np.dtype(x.dtype)
        lead = tuple(x.shape[:-1])
        x2 = xp.ascontiguousarray(x.reshape(-1, self.in_features))
        rows = int(x2.shape[0])
        q = xp.ascontiguousarray(self.q)
        scale = xp.ascontiguousarray(self.scale)
        if self.b is not None and self._bias32 is None:
            self._bias32 = _f32_vector(self.b)
        if rows <= QGEMV_MAX_ROWS:
            out = xp.empty((rows, self.out_features), dtype=dt)
            warps = compiled.THREADS // 32
            vector = self.in_features % 4 == 0 and pointer(q) % 4 == 0
            fn = compiled.function(f"pk_qgemv_{SUFFIX[dt]}")
            bias = scale if self._bias32 is None else self._bias32
            dims = (_i32(rows), _i32(self.out_features), _i32(self.in_features))
            grid = (-(-self.out_features // warps),)
            fn(grid, (compiled.THREADS,), (x2, q, scale, bias, out, *dims, _i32(self.b is not None), _i32(vector)))
        else:
            gd = gemm_dtype(dt)
            xg = astype(x2, gd)
            out = xp.empty((rows, self.out_features), dtype=gd)
            step = self.block_rows(gd)
            scratch = xp.empty((step, self.in_features), dtype=gd)
            fn = compiled.function(f"pk_dequant_rows_{SUFFIX[gd]}")
            for r0 in range(0, self.out_features, step):
                n = min(step, self.out_features - r0)
                block = scratch[:n]
                grid = (compiled.blocks_for(n * self.in_features),)
                fn(grid, (compiled.THREADS,), (q, scale, block, _i32(r0), _i32(n), _i32(self.in_features)))
                out[:, r0 : r0 + n] = xg @ block.T
            if self._bias32 is not None:
                out = _add_bias(out, self._bias32)
            out = astype(out, dt)
        return out.reshape((*lead, self.out_features))


def _on_device(pack: PackedQuantizedLinear) -> PackedQuantizedLinear:
    if not on_gpu(pack.q):
        return pack
    return CudaPackedQuantizedLinear(pack.q, pack.scale, pack.b, pack.scratch_bytes)


def pack_quantized_linear(
    q: Array, scale: Array, b: Array | None = None, scratch_bytes: int = cpu_quantize.DEFAULT_SCRATCH_BYTES
) -> PackedQuantizedLinear:
    """The CPU pack (its checks, its owned copies), served by the GPU kernels."""
    return _on_device(cpu_quantize.pack_quantized_linear(q, scale, b, scratch_bytes))


def borrow_quantized_linear(
    q: Array, scale: Array, b: Array | None = None, scratch_bytes: int = cpu_quantize.DEFAULT_SCRATCH_BYTES
) -> PackedQuantizedLinear:
    """Serve straight from the declared int8 weight, scales and bias on the device, copying nothing."""
    return _on_device(cpu_quantize.borrow_quantized_linear(q, scale, b, scratch_bytes))


# -- attention ---------------------------------------------------------------------------------
def scaled_dot_product_attention(
    q: Array, k: Array, v: Array, attn_mask: Array | None = None, is_causal: bool = False, scale: float | None = None
) -> Array:
    """``softmax(q @ k^T * scale + mask) @ v`` as two batched GEMMs around one fused masked softmax;
    the CPU kernel's semantics (a query that sees no key gets zeros)."""
    dt = np.dtype(q.dtype)
    length, source = int(q.shape[-2]), int(k.shape[-2])
    if not on_gpu(q, k, v, attn_mask) or compute_dtype(dt) != FLOAT32 or length == 0 or source == 0:
        return CPU_KERNELS.scaled_dot_product_attention(q, k, v, attn_mask, is_causal, scale)
    xp = array_namespace(q, k, v)
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = astype(q, FLOAT32) @ xp.swapaxes(astype(k, FLOAT32), -1, -2)
    causal = bool(is_causal)
    if not causal and attn_mask is not None:
        scores *= np.float32(factor)
        factor = 1.0
        if np.dtype(attn_mask.dtype) == np.dtype(bool):
            scores = xp.where(attn_mask, scores, np.float32(-np.inf))
        else:
            scores = scores + astype(attn_mask, FLOAT32)
    scores = xp.ascontiguousarray(scores)
    fn = compiled.function("pk_attention_softmax")
    rows = int(scores.size) // source
    fn((rows,), (_row_threads(source),), (scores, _i32(length), _i32(source), np.float32(factor), _i32(causal)))
    return astype(scores @ astype(v, FLOAT32), dt)


def plan_kernels() -> PlanKernels | None:
    """None: the serving plan's fused kernels are not written for the GPU, so a model on a CUDA device
    serves module by module (the plain road, which these kernels already fuse where it pays)."""
    return None


# The GPU kernels above over the CPU's table, whose other kernels are written against the array
# namespace of their inputs and run on cupy arrays as they are (tests/test_kernel_plumbing.py pins
# which). ``replace`` is where mypy checks each GPU kernel against the contract's signature.
CUDA_KERNELS = replace(
    CPU_KERNELS,
    linear=linear,
    layer_norm=layer_norm,
    rms_norm=rms_norm,
    softmax=softmax,
    scaled_dot_product_attention=scaled_dot_product_attention,
    gelu=gelu,
    silu=silu,
    pack_linear=pack_linear,
    borrow_linear=borrow_linear,
    pack_quantized_linear=pack_quantized_linear,
    borrow_quantized_linear=borrow_quantized_linear,
    plan_kernels=plan_kernels,
    # No GPU kernels over quantized blocks yet: such a layer names the device instead of handing cupy arrays
    # to the CPU's numpy loops (a GGUF model loaded for CUDA has its blocks dequantized at load).
    pack_block_linear=None,
    borrow_block_linear=None,
    pack_block_embedding=None,
    borrow_block_embedding=None,
)
