"""The kernel-grain cases: one per compiled kernel of packrt-kernels-cpu that a model's forward runs.

A whole-model case cannot see a 30% slowdown of one kernel that is 5% of the forward; each case
here times one kernel at a size where that kernel is nearly all of the call (tens of microseconds to
a few milliseconds on one core), so its own slowdown moves its own case by about as much. Both
``test_kernels.py`` (pytest-benchmark, packrt against torch) and the same-run A/B (``ab.py``, packrt at
two revisions) time these same calls.

packrt is imported inside each builder, never at module level: the A/B's workers put one revision's
sources first on ``sys.path`` before a case is built, and a case a revision cannot build (a kernel it
does not have yet) is reported missing for that side instead of stopping the run.

Two whole-model cases close the list (``model=True``; model_cases.py): they run layers' ``forward`` and the
glue between kernels, which no kernel case calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import model_cases
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
_ERFC = np.frompyfunc(math.erfc, 1, 1)  # the reference only: evaluated once per case, in float64


@dataclass
class Built:
    """One built case: ``run()`` calls the packrt kernel on the case's inputs (nothing else), ``reference()``
    computes its result in numpy in float64 (only where the case is checked), ``torch_run`` builds torch's call
    on the same inputs."""

    run: Callable[[], Any]
    reference: Callable[[], np.ndarray]
    tolerance: float
    torch_run: Callable[[Any], Callable[[], Any]] | None = None


@dataclass(frozen=True)
class KernelCase:
    """A kernel case: ``name`` (the pytest-benchmark group and the A/B row), what it times, its builder,
    whether the ``--quick`` selection takes it, and the thread cap the A/B times it under (1: one kernel on
    one core; 2: the pool's split of the work, where two pools fighting over the cores would show).
    ``model``: a whole-model case (model_cases.py), which every package's sources can slow down, where a
    kernel case depends on packrt-kernels-cpu's and packrt-base's alone."""

    name: str
    kernel: str
    build: Callable[[], Built]
    quick: bool = False
    threads: int = 1
    model: bool = False


def _rand(shape: tuple[int, ...], seed: int = 0, dtype: np.dtype[Any] = F32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32).astype(dtype)


def _torch(call: Callable[..., Any], *arrays: np.ndarray) -> Callable[[Any], Callable[[], Any]]:
    """Builds torch's side of a case: ``call(torch, *tensors)`` on tensors equal to ``arrays`` (bfloat16
    through float32: torch cannot read ml_dtypes' arrays)."""

    def make(torch: Any) -> Callable[[], Any]:
        tensors = [
            torch.from_numpy(a.astype(np.float32)).bfloat16() if a.dtype == BF16 else torch.from_numpy(a)
            for a in arrays
        ]
        return lambda: call(torch, *tensors)

    return make


def _model(make: Callable[[], model_cases.Made]) -> Callable[[], Built]:
    """A whole-model case's builder: its call, the float64 twin's result as the reference, no torch side."""

    def build() -> Built:
        run, reference, tolerance = make()
        return Built(run, reference, tolerance)

    return build


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _gelu_ref(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    v = _f64(x)
    if approximate == "tanh":
        return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))
    return np.asarray(0.5 * v * np.asarray(_ERFC(-v / math.sqrt(2.0)), dtype=np.float64))


def _silu_ref(x: np.ndarray) -> np.ndarray:
    v = _f64(x)
    return np.asarray(v / (1.0 + np.exp(-v)))


def _layer_norm_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    v = _f64(x)
    centered = v - v.mean(axis=-1, keepdims=True)
    return np.asarray(centered / np.sqrt((centered**2).mean(axis=-1, keepdims=True) + eps) * _f64(w) + _f64(b))


def _rms_norm_ref(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    v = _f64(x)
    return np.asarray(v / np.sqrt((v**2).mean(axis=-1, keepdims=True) + eps) * _f64(w))


def _softmax_ref(x: np.ndarray) -> np.ndarray:
    v = _f64(x)
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return np.asarray(e / e.sum(axis=-1, keepdims=True))


def _attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, hidden: np.ndarray | None) -> np.ndarray:
    scores = _f64(q) @ _f64(k).swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    if hidden is not None:
        scores = np.where(hidden, -np.inf, scores)
    return np.asarray(_softmax_ref(scores) @ _f64(v))


# -- elementwise and row kernels (fused.py, reached through functional.py as the layers call them) --------
ACT_SHAPE = (128, 3072)  # one BERT-base MLP activation at batch 1, sequence 128
ROW_SHAPE = (512, 768)  # hidden states of 4 x 128 tokens, BERT-base width


def _gelu(approximate: str) -> Callable[[], Built]:
    def build() -> Built:
        from packrt_kernels_cpu import functional

        x = _rand(ACT_SHAPE)
        return Built(
            lambda: functional.gelu(x, approximate),
            lambda: _gelu_ref(x, approximate),
            1e-5,
            _torch(lambda torch, t: torch.nn.functional.gelu(t, approximate=approximate), x),
        )

    return build


def _gelu_bf16() -> Built:
    from packrt_kernels_cpu import functional

    x = _rand(ACT_SHAPE, dtype=BF16)
    torch_run = _torch(lambda torch, t: torch.nn.functional.gelu(t), x)
    return Built(lambda: functional.gelu(x), lambda: _gelu_ref(x), 1e-2, torch_run)


def _silu() -> Built:
    from packrt_kernels_cpu import functional

    x = _rand(ACT_SHAPE)
    return Built(
        lambda: functional.silu(x),
        lambda: _silu_ref(x),
        1e-5,
        _torch(lambda torch, t: torch.nn.functional.silu(t), x),
    )


def _relu() -> Built:
    from packrt_kernels_cpu import functional

    x = _rand(ACT_SHAPE)
    return Built(
        lambda: functional.relu(x),
        lambda: np.maximum(_f64(x), 0.0),
        0.0,
        _torch(lambda torch, t: torch.relu(t), x),
    )


def _add() -> Built:
    from packrt_kernels_cpu import fused

    a, b = _rand(ROW_SHAPE, 1), _rand(ROW_SHAPE, 2)
    return Built(
        lambda: fused.binary("add", a, b),
        lambda: _f64(a) + _f64(b),
        1e-6,
        _torch(lambda torch, ta, tb: ta + tb, a, b),
    )


def _layer_norm() -> Built:
    from packrt_kernels_cpu import functional

    x, w, b = _rand(ROW_SHAPE), _rand(ROW_SHAPE[-1:], 1), _rand(ROW_SHAPE[-1:], 2)
    width = ROW_SHAPE[-1]

    def torch_run(torch: Any) -> Callable[[], Any]:
        t, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
        return lambda: torch.nn.functional.layer_norm(t, (width,), tw, tb, 1e-12)

    return Built(
        lambda: functional.layer_norm(x, width, w, b, 1e-12), lambda: _layer_norm_ref(x, w, b, 1e-12), 1e-4, torch_run
    )


def _rms_norm() -> Built:
    from packrt_kernels_cpu import functional

    x, w = _rand(ROW_SHAPE), _rand(ROW_SHAPE[-1:], 1)
    width = ROW_SHAPE[-1]

    def torch_run(torch: Any) -> Callable[[], Any]:
        t, tw = torch.from_numpy(x), torch.from_numpy(w)
        return lambda: torch.nn.functional.rms_norm(t, (width,), tw, 1e-6)

    return Built(lambda: functional.rms_norm(x, width, w, 1e-6), lambda: _rms_norm_ref(x, w, 1e-6), 1e-4, torch_run)


SCORES_SHAPE = (12, 128, 128)  # one layer's attention scores: 12 heads, 128 queries x 128 keys


def _softmax() -> Built:
    from packrt_kernels_cpu import functional

    x = _rand(SCORES_SHAPE)
    return Built(
        lambda: functional.softmax(x, -1),
        lambda: _softmax_ref(x),
        1e-5,
        _torch(lambda torch, t: torch.softmax(t, -1), x),
    )


def _softmax_in_place() -> Built:
    """Attention's softmax (the compiled shift and normalise steps around the vector exp), over a copy the
    kernel then writes: the copy is a fixed, small part of the call on both sides."""
    from packrt_kernels_cpu import fused

    x = _rand(SCORES_SHAPE).reshape(-1, SCORES_SHAPE[-1])
    work = np.empty_like(x)

    def run() -> np.ndarray:
        np.copyto(work, x)
        fused.softmax_in_place(work)
        return work

    return Built(run, lambda: _softmax_ref(x), 1e-5)


def _rotary() -> Built:
    from packrt_kernels_cpu import functional

    # (batch, heads, seq, head_dim) as a transposed view of a projection, as a Llama layer hands it over
    x = _rand((1, 256, 12, 64)).transpose(0, 2, 1, 3)
    angles = np.outer(np.arange(256), 1.0 / 10000 ** (np.arange(0, 64, 2) / 64))
    cos = np.cos(np.concatenate([angles, angles], -1)).astype(np.float32)
    sin = np.sin(np.concatenate([angles, angles], -1)).astype(np.float32)
    v = _f64(x)
    turned = np.concatenate([-v[..., 32:], v[..., :32]], axis=-1)

    def torch_run(torch: Any) -> Callable[[], Any]:
        t, tc, ts = torch.from_numpy(x), torch.from_numpy(cos), torch.from_numpy(sin)
        return lambda: t * tc + torch.cat([-t[..., 32:], t[..., :32]], -1) * ts

    return Built(lambda: functional.rotary_embedding(x, cos, sin), lambda: v * cos + turned * sin, 1e-5, torch_run)


# -- casts, GEMV, attention -------------------------------------------------------------------------------
def _cast(widen: bool) -> Callable[[], Built]:
    def build() -> Built:
        from packrt_kernels_cpu import fused

        x = _rand(ACT_SHAPE, dtype=BF16 if widen else F32)
        target = F32 if widen else BF16

        def expected() -> np.ndarray:  # ml_dtypes' conversion: the bits the fused cast must give
            return _f64(x.astype(target))

        def torch_run(torch: Any) -> Callable[[], Any]:
            if widen:
                t = torch.from_numpy(x.astype(np.float32)).bfloat16()
                return lambda: t.float()
            t = torch.from_numpy(x)
            return lambda: t.bfloat16()

        return Built(lambda: fused.cast(x, target), expected, 0.0, torch_run)

    return build


def _gemv(packed: bool) -> Callable[[], Built]:
    """A decode step's projection, 768 -> 3072: the compiled GEMV called directly (the layers route a
    single row to it only on two threads or more; on one, the A/B's setting, they take OpenBLAS's)."""

    def build() -> Built:
        from packrt_kernels_cpu import gemv

        x, w, b = _rand((1, 768)), _rand((3072, 768), 1) * np.float32(0.03), _rand((3072,), 2)
        wt = np.ascontiguousarray(w.T) if packed else w.T  # a pack's (in, out) layout, or a borrowed weight's view
        return Built(
            lambda: gemv.gemv(x, wt, b),
            lambda: _f64(x) @ _f64(w).T + _f64(b),
            1e-5,
            _torch(lambda torch, tx, tw, tb: torch.nn.functional.linear(tx, tw, tb), x, w, b),
        )

    return build


def _blocks(block_format: str, rows: int) -> Callable[[], Built]:
    """A linear over quantized blocks (packrt_kernels_cpu.blocks), 576 -> 1536 as in SmolLM2-135M's MLP (2304 ->
    1536 for the K-quants' 256-weight blocks): one row (decode, the q8 dots) or 64 (prefill: the VNNI block GEMM,
    q8_gemm, where it serves the format, else dequantized panels); torch multiplies the dequantized float32 weight
    by the activations packrt multiplies."""

    def build() -> Built:
        from packrt_kernels_cpu import block_tiles, blocks

        try:
            from packrt_kernels_cpu import q8_gemm
        except ImportError:  # a revision from before the VNNI block GEMM: prefill rows take the float panels
            q8_gemm = None

        width = 2304 if block_format.endswith("_K") else 576
        b = blocks.random_blocks(np.random.default_rng(3), block_format, 1536, width)
        x, w = _rand((rows, width)), blocks.dequantize(b, block_format, width)
        pack = blocks.pack_block_linear(b, block_format, width)
        # decode rows of a format with a q8 dot multiply int8 activations (llama.cpp's): the reference takes the
        # activations as their q8 blocks hold them (Q4_1/Q5_1's mins then differ by the fp16 sum q8_1 keeps)
        seen, tolerance = x, 1e-5
        dots = rows <= blocks.ROW_LOOP_ROWS and block_format in block_tiles.FORMATS and block_tiles.available()
        gemm = rows > blocks.ROW_LOOP_ROWS and q8_gemm is not None
        gemm = gemm and block_format in q8_gemm.FORMATS and q8_gemm.available()
        if dots or gemm:
            q8 = block_tiles.quantize_reference(x).reshape(rows, -1, block_tiles.Q8_BYTES)
            scales = q8[..., 32:36].copy().view(np.float32)
            seen = (q8[..., :32].view(np.int8).astype(np.float32) * scales).reshape(rows, width)
            tolerance = 1e-4
        return Built(
            lambda: pack.forward(x),
            lambda: _f64(seen) @ _f64(w).T,
            tolerance,
            _torch(lambda torch, tx, tw: torch.nn.functional.linear(tx, tw), seen, w),  # the same activations
        )

    return build


def _panels(dtype: np.dtype[Any], rows: int) -> Callable[[], Built]:
    """A packed linear's panel GEMM (packrt_kernels_cpu.float_tiles), 384 -> 1536 as in MiniLM's MLP, at a row
    count that picks one tile shape: one row runs the tile four panels wide, two rows two wide, 3 to 8 rows the
    tile of that many rows, more rows 8-row tiles and the rest. bfloat16 panels multiply the activations
    rounded to bfloat16, as the reference and torch's bfloat16 linear do."""

    def build() -> Built:
        from packrt_kernels_cpu import float_tiles

        x, w = _rand((rows, 384)), _rand((1536, 384), 1) * np.float32(0.05)
        panels = float_tiles.pack(w, dtype)
        seen, weight = (x.astype(dtype), w.astype(dtype)) if dtype == BF16 else (x, w)
        return Built(
            lambda: float_tiles.gemm(x, panels),
            lambda: _f64(seen) @ _f64(weight).T,
            1e-5,
            _torch(lambda torch, tx, tw: torch.nn.functional.linear(tx, tw), seen, weight),
        )

    return build


def _heads(seed: int) -> np.ndarray:
    return _rand((1, 12, 128, 64), seed)


def _attention() -> Built:
    from packrt_kernels_cpu import scaled_dot_product_attention

    q, k, v = _heads(0), _heads(1), _heads(2)
    hidden = ~np.tril(np.ones((128, 128), dtype=bool))

    def torch_run(torch: Any) -> Callable[[], Any]:
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        return lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)

    return Built(
        lambda: scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda: _attention_ref(q, k, v, hidden),
        1e-4,
        torch_run,
    )


def _decode_attention() -> Built:
    """One decode step of a 0.5B-sized model's layer: 14 query heads over 2 key heads, 64 wide, 512 cached
    positions of a 1024-position cache."""
    from packrt_kernels_cpu import plan

    q, keys, values = _rand((1, 14, 64)), _rand((1, 2, 1024, 64), 1), _rand((1, 2, 1024, 64), 2)
    out = np.empty((1, 14 * 64), np.float32)
    scale = 1 / math.sqrt(64)

    def expected() -> np.ndarray:
        k, v = _f64(keys[0, :, :512]), _f64(values[0, :, :512])  # (2, 512, 64)
        grouped = _f64(q[0]).reshape(2, 7, 64)
        scores = np.einsum("gjd,gtd->gjt", grouped, k) * scale
        p = np.exp(scores - scores.max(-1, keepdims=True))
        return np.asarray(np.einsum("gjt,gtd->gjd", p / p.sum(-1, keepdims=True), v).reshape(1, 14 * 64))

    return Built(lambda: plan.decode_attention(q, keys, values, 0, 512, None, scale, None, out), expected, 1e-4)


# -- the serving plan's fused steps (plan.py) ---------------------------------------------------------------
def _plan_attention() -> Built:
    from packrt_kernels_cpu import plan

    qkv = _rand((128, 3 * 768))
    key_mask = np.ones((1, 128), dtype=bool)
    key_mask[0, 100:] = False  # padding: the mask goes through the compiled masked shift
    out = np.empty((128, 768), np.float32)
    split = qkv.reshape(1, 128, 3, 12, 64)
    q, k, v = (split[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    hidden = np.broadcast_to(~key_mask[:, None, None, :], (1, 12, 128, 128))

    def expected() -> np.ndarray:
        return _attention_ref(q, k, v, hidden).transpose(0, 2, 1, 3).reshape(128, 768)

    return Built(lambda: plan.self_attention(qkv, 1, 12, key_mask, None, out), expected, 1e-4)


def _plan_attention_small_heads() -> Built:
    """MiniLM's attention: 8 sequences of 128 tokens, 12 heads of 32, no mask."""
    from packrt_kernels_cpu import plan

    qkv = _rand((8 * 128, 3 * 384))
    out = np.empty((8 * 128, 384), np.float32)
    split = qkv.reshape(8, 128, 3, 12, 32)
    q, k, v = (split[:, :, i].transpose(0, 2, 1, 3) for i in range(3))

    def expected() -> np.ndarray:
        return _attention_ref(q, k, v, None).transpose(0, 2, 1, 3).reshape(8 * 128, 384)

    return Built(lambda: plan.self_attention(qkv, 8, 12, None, None, out), expected, 1e-4)


def _residual_norm(rms: bool) -> Callable[[], Built]:
    """The residual add and the norm after it; the residual grows by ``x`` each call (as in a model), which
    leaves the work per call unchanged."""

    def build() -> Built:
        from packrt_kernels_cpu import plan

        x, w, b = _rand(ROW_SHAPE), _rand(ROW_SHAPE[-1:], 1), _rand(ROW_SHAPE[-1:], 2)
        residual, out = _rand(ROW_SHAPE, 3), np.empty(ROW_SHAPE, np.float32)
        start = residual + x  # what the first call normalises (float32 sum, as the kernel's)

        def expected() -> np.ndarray:
            return _rms_norm_ref(start, w, 1e-6) if rms else _layer_norm_ref(start, w, b, 1e-12)

        first = [True]

        def run() -> Any:
            if first[0]:  # the check reads the first call's result; later calls keep adding x
                first[0] = False
                return plan.residual_norm(x, residual, w, None if rms else b, 1e-6 if rms else 1e-12, out, rms).copy()
            return plan.residual_norm(x, residual, w, None if rms else b, 1e-6 if rms else 1e-12, out, rms)

        return Built(run, expected, 1e-4)

    return build


def _gated() -> Built:
    from packrt_kernels_cpu import plan

    x = _rand((128, 2 * 2048))
    out = np.empty((128, 2048), np.float32)
    return Built(lambda: plan.gated(x, "silu", out), lambda: _silu_ref(x[:, :2048]) * _f64(x[:, 2048:]), 1e-5)


def _epilogue() -> Built:
    """A GEMM's epilogue (bias + GELU in place over its output, what a plan linear's ``forward`` runs after
    the GEMM), applied to a fresh copy of one output each call."""
    from packrt_kernels_cpu import plan

    base, b = _rand(ACT_SHAPE), _rand(ACT_SHAPE[-1:], 1)
    y = np.empty_like(base)
    activate = plan._activate  # noqa: SLF001 - the epilogue has no public entry of its own

    def run() -> Any:
        np.copyto(y, base)
        return activate("gelu", y, b)

    return Built(run, lambda: _gelu_ref(_f64(base) + _f64(b)), 1e-5)


# -- int8 and conv ------------------------------------------------------------------------------------------
def _int8_quantize() -> Built:
    from packrt_kernels_cpu import int8

    x = _rand(ROW_SHAPE)

    def run() -> np.ndarray:
        u, scale, zero = int8.quantize_rows(x)
        return np.asarray(
            (u.astype(np.float32) - zero[:, None]) * scale[:, None]
        )  # checked as the values it stands for

    step = float(np.max(np.maximum(x.max(1), 0) - np.minimum(x.min(1), 0)) / 255)
    return Built(run, lambda: _f64(x), step / float(np.max(np.abs(x))))


def _int8_linear(rows: int, k: int = 384, n: int = 1536) -> Callable[[], Built]:
    """A packed int8 linear (packrt_kernels_cpu.int8.linear), k -> n with a bias as in MiniLM's MLP: the
    activations quantized per row, the product (VNNI panels where the CPU has them, else the float32
    chunks) and its way back to float32. Checked against the float64 product of the quantized values it
    multiplies: only the float32 rounding of the last pass differs."""

    def build() -> Built:
        from packrt_kernels_cpu import int8, quantize_per_channel, vnni

        x, b = _rand((rows, k)), _rand((n,), 2)
        q, scale = quantize_per_channel(_rand((n, k), 1) * np.float32(0.05))
        sums = int8.weight_sums(q)
        panels = vnni.pack(q) if vnni.available() else None
        out = np.empty((rows, n), np.float32)

        def reference() -> np.ndarray:
            u, x_scale, zero = int8.quantize_rows(x)
            levels = (_f64(u) - zero[:, None]) * _f64(x_scale)[:, None]
            return np.asarray(levels @ (_f64(q) * _f64(scale)[:, None]).T + _f64(b))

        return Built(lambda: int8.linear(x, q, scale, sums, b, out=out, panels=panels), reference, 1e-5)

    return build


def _conv2d() -> Built:
    from packrt_kernels_cpu import conv2d, conv2d_geometry

    x, w, b = _rand((1, 32, 32, 32)), _rand((32, 32, 3, 3), 1) * np.float32(0.1), _rand((32,), 2)
    geometry = conv2d_geometry((3, 3), padding=1)

    def expected() -> np.ndarray:
        padded = np.pad(_f64(x), ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # (1, C, H, W, 3, 3)
        return np.asarray(np.einsum("nchwij,ocij->nohw", windows, _f64(w)) + _f64(b)[None, :, None, None])

    def torch_run(torch: Any) -> Callable[[], Any]:
        tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
        return lambda: torch.nn.functional.conv2d(tx, tw, tb, padding=1)

    return Built(lambda: conv2d(x, w, b, geometry), expected, 1e-4, torch_run)


CASES: tuple[KernelCase, ...] = (
    KernelCase("kernel-gelu", "functional.gelu (fused erf GELU), fp32 128x3072", _gelu("none"), quick=True),
    KernelCase("kernel-gelu-tanh", "functional.gelu(approximate='tanh'), fp32 128x3072", _gelu("tanh")),
    KernelCase("kernel-gelu-bf16", "functional.gelu on bf16 in and out (one pass), 128x3072", _gelu_bf16),
    KernelCase("kernel-silu", "functional.silu (fused), fp32 128x3072", _silu, quick=True),
    KernelCase("kernel-relu", "functional.relu (fused), fp32 128x3072", _relu),
    KernelCase("kernel-add", "fused.binary('add'), fp32 512x768", _add),
    KernelCase("kernel-layer-norm", "functional.layer_norm (fused rows), fp32 512x768", _layer_norm, quick=True),
    KernelCase("kernel-rms-norm", "functional.rms_norm (fused rows), fp32 512x768", _rms_norm, quick=True),
    KernelCase("kernel-softmax", "functional.softmax(-1) (fused rows), fp32 12x128x128", _softmax, quick=True),
    KernelCase("kernel-softmax-in-place", "fused.softmax_in_place (attention's), fp32 1536x128", _softmax_in_place),
    KernelCase("kernel-rotary", "functional.rotary_embedding (fused), 1x12x256x64 view", _rotary, quick=True),
    KernelCase("kernel-cast-bf16-f32", "fused.cast bf16 -> fp32, 128x3072", _cast(widen=True), quick=True),
    KernelCase("kernel-cast-f32-bf16", "fused.cast fp32 -> bf16, 128x3072", _cast(widen=False)),
    KernelCase("kernel-gemv", "gemv.gemv, packed (in, out) weight, 768 -> 3072", _gemv(packed=True), quick=True),
    KernelCase("kernel-gemv-view", "gemv.gemv, borrowed (out, in) weight, 768 -> 3072", _gemv(packed=False)),
    KernelCase("kernel-attention", "scaled_dot_product_attention causal, 1x12x128x64", _attention, quick=True),
    KernelCase(
        "kernel-plan-attention", "plan.self_attention from fused qkv, key mask, 128 tokens", _plan_attention, quick=True
    ),
    KernelCase(
        "kernel-plan-attention-minilm", "plan.self_attention, 8x128 tokens, 12 heads of 32", _plan_attention_small_heads
    ),
    KernelCase(
        "kernel-plan-attention-2t",
        "plan.self_attention as above, 2 threads (a head a task)",
        _plan_attention,
        threads=2,
    ),
    KernelCase("kernel-decode-attention", "plan.decode_attention, 14/2 heads x 64 over 512 cached", _decode_attention),
    KernelCase("kernel-residual-layer-norm", "plan.residual_norm (LayerNorm), fp32 512x768", _residual_norm(False)),
    KernelCase("kernel-residual-rms-norm", "plan.residual_norm (RMSNorm), fp32 512x768", _residual_norm(True)),
    KernelCase("kernel-gated-silu", "plan.gated silu(gate) * up, fp32 128x2048", _gated),
    KernelCase("kernel-epilogue-gelu", "plan linear epilogue, bias + GELU in place, 128x3072", _epilogue),
    KernelCase("kernel-int8-quantize", "int8.quantize_rows, fp32 512x768", _int8_quantize),
    *(
        KernelCase(
            f"kernel-int8-linear-{rows}", f"int8.linear, {rows}x384 -> 1536 + bias", _int8_linear(rows), rows == 8
        )
        for rows in (8, 1024)
    ),
    KernelCase("kernel-int8-linear-down-1024", "int8.linear, 1024x1536 -> 384 + bias", _int8_linear(1024, 1536, 384)),
    KernelCase(
        "kernel-int8-linear-1024-2t", "int8.linear, 1024x384 -> 1536 + bias, 2 threads", _int8_linear(1024), threads=2
    ),
    *(
        KernelCase(
            f"kernel-blocks-{f.lower()}", f"blocks.PackedBlockLinear {f}, 1 row (decode)", _blocks(f, 1), f == "Q4_1"
        )
        for f in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K")
    ),
    *(
        KernelCase(
            f"kernel-blocks-{f.lower()}-prefill", f"blocks.PackedBlockLinear {f}, 64 rows (prefill)", _blocks(f, 64)
        )
        for f in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K")
    ),
    *(
        KernelCase(
            f"kernel-panels-f32-{rows}", f"float_tiles.gemm fp32, {rows}x384 -> 1536", _panels(F32, rows), rows == 1
        )
        for rows in (1, 2, 5, 8, 9, 64, 512)
    ),
    *(
        KernelCase(
            f"kernel-panels-bf16-{rows}",
            f"float_tiles.gemm bf16 pairs, {rows}x384 -> 1536",
            _panels(BF16, rows),
            rows == 8,
        )
        for rows in (1, 2, 3, 4, 5, 6, 7, 8, 64)
    ),
    KernelCase("kernel-conv2d", "conv2d 3x3 pad 1, 1x32x32x32 -> 32", _conv2d),
    KernelCase(
        "model-encoder-1x16",
        "a MiniLM-shaped BertEncoder's call (6 layers of 384), 1x16 tokens",
        _model(model_cases.encoder),
        quick=True,
        model=True,
    ),
    KernelCase(
        "model-decoder-decode",
        f"a SmolLM2-shaped Llama's generate (4 layers of 576), {model_cases.NEW_TOKENS} greedy tokens after one",
        _model(model_cases.decoder),
        quick=True,
        model=True,
    ),
)
BY_NAME = {case.name: case for case in CASES}


def select(names: list[str] | None = None, quick: bool = False) -> list[KernelCase]:
    """The cases named (all without names; the ``--quick`` ones with ``quick``); KeyError naming an unknown one."""
    if names:
        unknown = [n for n in names if n not in BY_NAME]
        if unknown:
            raise KeyError(f"no kernel case {', '.join(unknown)}; the cases are: {', '.join(BY_NAME)}")
        return [BY_NAME[n] for n in names]
    return [c for c in CASES if c.quick or not quick]


def check(case: KernelCase, built: Built) -> str | None:
    """None when the kernel's result matches the float64 reference within the case's tolerance (relative
    to the largest |reference|), else a line saying by how much it does not."""
    got = np.asarray(built.run()).astype(np.float64)
    want = built.reference()
    if got.shape != want.shape:
        return f"{case.name}: shape {got.shape} != reference {want.shape}"
    scale = float(np.max(np.abs(want))) or 1.0
    err = float(np.max(np.abs(got - want))) / scale
    limit = max(built.tolerance, 1e-7)
    return None if err <= limit else f"{case.name}: max error {err:.3g} (relative to the largest |reference|) > {limit}"
