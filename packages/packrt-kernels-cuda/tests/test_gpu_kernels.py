"""The CUDA kernels on a GPU against the CPU kernels on the same data (skipped without cupy or a GPU)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from packrt_kernels_cpu import CPU_KERNELS, quantize_per_channel
from packrt_kernels_cpu.tolerance import tolerance
from packrt_kernels_cuda import CudaBackend, kernels

F32 = np.float32
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]


@pytest.fixture
def to_gpu(cp: ModuleType) -> Any:
    def put(a: np.ndarray | None) -> Any:
        if a is None:
            return None
        try:
            return cp.asarray(a)
        except Exception as err:  # this cupy cannot hold the dtype (bfloat16 needs cupy >= 14 and ml_dtypes)
            pytest.skip(f"cupy cannot hold {a.dtype} arrays here: {err}")

    return put


def _close(cp: ModuleType, got: Any, want: np.ndarray, dtype: Any) -> None:
    assert type(got).__module__.startswith("cupy"), "the result left the GPU"
    host = cp.asnumpy(got)
    assert host.dtype == want.dtype and host.shape == want.shape
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(host.astype(F32), want.astype(F32), rtol=rtol, atol=atol)


def _data(shape: tuple[int, ...], dtype: Any, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("width", [1, 7, 768, 4100])
def test_norms(cp: ModuleType, to_gpu: Any, dtype: Any, width: int) -> None:
    x, w, b = _data((6, width), dtype), _data((width,), dtype, 1), _data((width,), dtype, 2)
    gx, gw, gb = to_gpu(x), to_gpu(w), to_gpu(b)
    _close(cp, kernels.layer_norm(gx, width, gw, gb, 1e-5), CPU_KERNELS.layer_norm(x, width, w, b, 1e-5), dtype)
    _close(cp, kernels.layer_norm(gx, width), CPU_KERNELS.layer_norm(x, width), dtype)
    _close(cp, kernels.rms_norm(gx, width, gw), CPU_KERNELS.rms_norm(x, width, w), dtype)
    _close(cp, kernels.rms_norm(gx, width, None, 1e-6), CPU_KERNELS.rms_norm(x, width, None, 1e-6), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_and_activations(cp: ModuleType, to_gpu: Any, dtype: Any) -> None:
    x = _data((5, 1000), dtype, 3, 4.0)
    x[2] = -np.inf  # all -inf: NaN, as torch
    gx = to_gpu(x)
    _close(cp, kernels.softmax(gx, -1), CPU_KERNELS.softmax(x, -1), dtype)
    _close(cp, kernels.softmax(gx, 0), CPU_KERNELS.softmax(x, 0), dtype)
    y = _data((3, 4097), dtype, 4, 5.0)
    gy = to_gpu(y)
    _close(cp, kernels.gelu(gy), CPU_KERNELS.gelu(y), dtype)
    _close(cp, kernels.gelu(gy, "tanh"), CPU_KERNELS.gelu(y, "tanh"), dtype)
    _close(cp, kernels.silu(gy), CPU_KERNELS.silu(y), dtype)
    b = _data((4097,), dtype, 5)
    for name, act in kernels._CPU_ACTIVATIONS.items():
        want = act(y.astype(F32) + b.astype(F32)).astype(dtype)
        _close(cp, kernels.bias_activation(gy, to_gpu(b), name), want, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows", [1, 64, 300])
def test_linear_and_packs(cp: ModuleType, to_gpu: Any, dtype: Any, rows: int) -> None:
    x, w, b = _data((rows, 256), dtype), _data((384, 256), dtype, 1, 0.06), _data((384,), dtype, 2)
    want = CPU_KERNELS.linear(x, w, b)
    gx, gw, gb = to_gpu(x), to_gpu(w), to_gpu(b)
    _close(cp, kernels.linear(gx, gw, gb), want, dtype)
    pack = kernels.pack_linear(gw, gb)
    _close(cp, pack.forward(gx), want, dtype)
    w2, b2 = pack.unpack()
    assert cp.asnumpy(w2).tobytes() == w.tobytes() and cp.asnumpy(b2).tobytes() == b.tobytes()
    _close(cp, kernels.borrow_linear(gw, None).forward(gx), CPU_KERNELS.linear(x, w), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows", [1, 5, 16, 17, 300])
@pytest.mark.parametrize("depth", [512, 514])
def test_quantized_linear(cp: ModuleType, to_gpu: Any, dtype: Any, rows: int, depth: int) -> None:
    q, scale = quantize_per_channel(_data((320, depth), F32, 1, 0.05))
    b = _data((320,), F32, 2)
    x = _data((rows, depth), dtype, 3)
    # The GPU multiplies by the dequantized weight (weight-only int8), so the reference is that product in
    # float: the CPU's int8 road also quantizes the activations, an error of its own (docs/benchmarks.md).
    weight = q.astype(F32) * scale[:, None]
    pack = kernels.pack_quantized_linear(to_gpu(q), to_gpu(scale), to_gpu(b), scratch_bytes=64 * depth * 4)
    _close(cp, pack.forward(to_gpu(x)), (x.astype(F32) @ weight.T + b).astype(x.dtype), dtype)
    got_q, got_s, got_b = pack.unpack()
    assert cp.asnumpy(got_q).tobytes() == q.tobytes() and cp.asnumpy(got_s).tobytes() == scale.tobytes()
    view = kernels.borrow_quantized_linear(to_gpu(q)[:, : depth - 2], to_gpu(scale))  # strided, unaligned rows
    want = (x[:, : depth - 2].astype(F32) @ weight[:, : depth - 2].T).astype(x.dtype)
    _close(cp, view.forward(to_gpu(np.ascontiguousarray(x[:, : depth - 2]))), want, dtype)
    assert got_b is not None


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", ["none", "causal", "causal-wide", "bool", "float", "broadcast", "long"])
def test_attention(cp: ModuleType, to_gpu: Any, dtype: Any, case: str) -> None:
    length, source = {"causal-wide": (3, 9), "long": (130, 1100)}.get(case, (17, 17))
    q = _data((2, 4, length, 32), dtype, 1)
    k, v = _data((2, 4, source, 32), dtype, 2), _data((2, 4, source, 16), dtype, 3)
    mask: np.ndarray | None = None
    if case == "bool":
        mask = np.random.default_rng(4).random((2, 1, length, source)) > 0.3
        mask[1, 0, 3] = False  # a query that sees no key gets zeros
    elif case == "float":
        mask = _data((length, source), dtype, 5)
    elif case == "broadcast":
        k, v = k[:, :1], v[:, :1]
    causal = case.startswith("causal")
    want = CPU_KERNELS.scaled_dot_product_attention(q, k, v, mask, causal, None)
    got = kernels.scaled_dot_product_attention(to_gpu(q), to_gpu(k), to_gpu(v), to_gpu(mask), causal, None)
    _close(cp, got, want, dtype)


def test_the_backend_reads_the_gpus_free_memory(cuda_backend: CudaBackend, cp: ModuleType) -> None:
    free, total = cp.cuda.runtime.memGetInfo()
    reading = cuda_backend.free_memory(0)
    assert free <= reading <= total
    assert cuda_backend.kernels is kernels.CUDA_KERNELS
