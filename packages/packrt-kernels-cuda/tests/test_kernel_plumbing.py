"""The GPU kernels' Python side, checked on the CPU: every launch against numpy stand-ins.

Each CUDA entry point gets a numpy stand-in that does what its CUDA code does (float32
arithmetic, one rounding on the store) and checks it was launched with the parameter count the
source declares. With cupy arrays replaced by numpy ones, this runs every path of
``packrt_kernels_cuda.kernels`` (which kernel, which arguments in which order, the int8 paths
for few and many rows, the attention masks) against the CPU kernels, on a machine with no GPU.
What it cannot check is the CUDA code itself: the GPU tests and the nvcc compile test do that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from packrt_kernels_cpu import CPU_KERNELS, quantize_per_channel
from packrt_kernels_cpu.tolerance import tolerance
from packrt_kernels_cuda import compiled, kernels

F32 = np.float32
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
DECLARED = compiled.entry_points(compiled.source_text("fused.cu"))
Kernel = Callable[..., None]


def _act(v: np.ndarray, kind: int) -> np.ndarray:
    if kind == 1:
        return np.asarray(CPU_KERNELS.relu(v))
    if kind == 2:
        return np.asarray(CPU_KERNELS.gelu(v))
    if kind == 3:
        return np.asarray(CPU_KERNELS.gelu(v, "tanh"))
    if kind == 4:
        return np.asarray(CPU_KERNELS.silu(v))
    return v


def _rows(a: np.ndarray, width: int) -> np.ndarray:
    return a.reshape(-1, int(width))


def _layer_norm(x: Any, w: Any, b: Any, y: Any, width: Any, eps: Any, has_w: Any, has_b: Any) -> None:
    v = _rows(x, width).astype(F32)
    mean = v.mean(axis=1, keepdims=True)
    out = (v - mean) / np.sqrt(((v - mean) ** 2).mean(axis=1, keepdims=True) + eps)
    out = out * (w if has_w else 1) + (b if has_b else 0)
    _rows(y, width)[...] = out.astype(y.dtype)


def _rms_norm(x: Any, w: Any, y: Any, width: Any, eps: Any, has_w: Any) -> None:
    v = _rows(x, width).astype(F32)
    out = v / np.sqrt((v * v).mean(axis=1, keepdims=True) + eps) * (w if has_w else 1)
    _rows(y, width)[...] = out.astype(y.dtype)


def _softmax(x: Any, y: Any, width: Any) -> None:
    v = _rows(x, width).astype(F32)
    with np.errstate(all="ignore"):
        e = np.exp(v - v.max(axis=1, keepdims=True))
        _rows(y, width)[...] = (e / e.sum(axis=1, keepdims=True)).astype(y.dtype)


def _attention_softmax(scores: Any, length: Any, source: Any, scale: Any, causal: Any) -> None:
    s = _rows(scores, source)
    query = np.arange(s.shape[0]) % int(length)
    visible = np.minimum(query + 1, int(source)) if causal else np.full(s.shape[0], int(source))
    keep = np.arange(int(source))[None, :] < visible[:, None]
    with np.errstate(all="ignore"):
        v = np.where(keep, s * scale, -np.inf)
        top = v.max(axis=1, keepdims=True)
        top = np.where(top == -np.inf, 0, top)
        e = np.where(keep, np.exp(v - top), 0)
        total = e.sum(axis=1, keepdims=True)
        s[...] = e / np.where(total == 0, 1, total)


def _elementwise(x: Any, y: Any, n: Any, kind: Any) -> None:
    y.reshape(-1)[: int(n)] = _act(x.reshape(-1)[: int(n)].astype(F32), int(kind)).astype(y.dtype)


def _bias_act(x: Any, b: Any, y: Any, n: Any, width: Any, kind: Any) -> None:
    v = _rows(x, width).astype(F32) + b
    _rows(y, width)[...] = _act(v.astype(F32), int(kind)).astype(y.dtype)


def _qgemv(x: Any, q: Any, scale: Any, bias: Any, y: Any, rows: Any, cols: Any, depth: Any, has: Any, v4: Any) -> None:
    assert int(rows) <= kernels.QGEMV_MAX_ROWS
    assert bool(v4) == (int(depth) % 4 == 0)
    acc = _rows(x, depth)[: int(rows)].astype(F32) @ _rows(q, depth)[: int(cols)].astype(F32).T
    out = acc * scale + (bias if has else 0)
    _rows(y, cols)[...] = out.astype(y.dtype)


def _dequant_rows(q: Any, scale: Any, out: Any, row0: Any, rows: Any, depth: Any) -> None:
    r0, r1 = int(row0), int(row0) + int(rows)
    block = _rows(q, depth)[r0:r1].astype(F32) * scale[r0:r1, None]
    _rows(out, depth)[: int(rows)] = block.astype(out.dtype)


STAND_INS: dict[str, Kernel] = {
    "pk_layer_norm_": _layer_norm,
    "pk_rms_norm_": _rms_norm,
    "pk_softmax_": _softmax,
    "pk_attention_softmax": _attention_softmax,
    "pk_act_": _elementwise,
    "pk_bias_act_": _bias_act,
    "pk_qgemv_": _qgemv,
    "pk_dequant_rows_": _dequant_rows,
}


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """numpy arrays play cupy's, and each launch runs its stand-in; returns the kernels launched."""
    seen: list[str] = []

    def function(name: str, source: str = "fused.cu") -> Kernel:
        assert name in DECLARED, f"{name} is not declared in {source}"
        stem = next(k for k in STAND_INS if name == k or (k.endswith("_") and name.startswith(k)))

        def launch(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
            assert len(args) == DECLARED[name], f"{name} takes {DECLARED[name]} arguments, got {len(args)}"
            assert all(g >= 1 for g in grid) and block[0] % 32 == 0 and block[0] <= 1024
            seen.append(name)
            STAND_INS[stem](*args)

        return launch

    monkeypatch.setattr(compiled, "function", function)
    monkeypatch.setattr(kernels, "on_gpu", lambda *arrays: True)
    monkeypatch.setattr(kernels, "pointer", lambda a: int(a.ctypes.data))
    monkeypatch.setitem(kernels._state, "bf16", True)
    return seen


def _close(got: Any, want: Any, dtype: Any) -> None:
    rtol, atol = tolerance(dtype)
    assert np.dtype(got.dtype) == np.dtype(want.dtype) and got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got, F32), np.asarray(want, F32), rtol=rtol, atol=atol)


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_norms_launch_their_fused_kernel_with_the_cpu_result(launches: list[str], dtype: Any, affine: bool) -> None:
    rng = np.random.default_rng(0)
    x = _data(rng, (3, 5, 40), dtype)
    w, b = (_data(rng, (40,), dtype), _data(rng, (40,), dtype)) if affine else (None, None)
    _close(kernels.layer_norm(x, 40, w, b, 1e-5), CPU_KERNELS.layer_norm(x, 40, w, b, 1e-5), dtype)
    _close(kernels.layer_norm(x, (5, 40), None, None), CPU_KERNELS.layer_norm(x, (5, 40), None, None), dtype)
    _close(kernels.rms_norm(x, 40, w), CPU_KERNELS.rms_norm(x, 40, w), dtype)
    assert [n.rsplit("_", 1)[0] for n in launches] == ["pk_layer_norm", "pk_layer_norm", "pk_rms_norm"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_and_activations_launch_their_fused_kernels(launches: list[str], dtype: Any) -> None:
    rng = np.random.default_rng(1)
    x = _data(rng, (4, 33), dtype, 3.0)
    x[1] = -np.inf
    _close(kernels.softmax(x, -1), CPU_KERNELS.softmax(x, -1), dtype)
    _close(kernels.softmax(x, 0), CPU_KERNELS.softmax(x, 0), dtype)  # not the last axis: the CPU code
    y = _data(rng, (4, 33), dtype, 3.0)
    _close(kernels.gelu(y), CPU_KERNELS.gelu(y), dtype)
    _close(kernels.gelu(y, "tanh"), CPU_KERNELS.gelu(y, "tanh"), dtype)
    _close(kernels.silu(y), CPU_KERNELS.silu(y), dtype)
    b = _data(rng, (33,), dtype)
    for name in kernels.ACTIVATIONS:
        want = kernels._CPU_ACTIVATIONS[name](y.astype(F32) + b.astype(F32)).astype(dtype)
        _close(kernels.bias_activation(y, b, name), want, dtype)
    assert (
        launches[:4]
        == [f"pk_softmax_{kernels.SUFFIX[np.dtype(dtype)]}"] + [f"pk_act_{kernels.SUFFIX[np.dtype(dtype)]}"] * 3
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_and_its_packs_agree_with_the_cpu_and_unpack_bit_for_bit(
    launches: list[str], dtype: Any, bias: bool
) -> None:
    rng = np.random.default_rng(2)
    x, w = _data(rng, (2, 3, 24), dtype), _data(rng, (10, 24), dtype, 0.3)
    b = _data(rng, (10,), dtype) if bias else None
    want = CPU_KERNELS.linear(x, w, b)
    _close(kernels.linear(x, w, b), want, dtype)
    pack = kernels.pack_linear(w, b)
    assert isinstance(pack, kernels.CudaPackedLinear) and pack.wt.dtype == np.dtype(dtype)
    _close(pack.forward(x), want, dtype)
    w2, b2 = pack.unpack()
    assert w2.dtype == w.dtype and w2.tobytes() == w.tobytes()
    assert (b2 is None) == (b is None) and (b is None or b2 is None or b2.tobytes() == b.tobytes())
    _close(kernels.borrow_linear(w, b).forward(x), want, dtype)
    assert all(n.startswith("pk_bias_act_") for n in launches) and len(launches) == (3 if bias else 0)


def test_bfloat16_linear_computes_in_float32_where_cupy_cannot_multiply_it(launches: list[str]) -> None:
    kernels._state["bf16"] = False
    rng = np.random.default_rng(3)
    x, w = _data(rng, (5, 16), ml_dtypes.bfloat16), _data(rng, (7, 16), ml_dtypes.bfloat16)
    pack = kernels.pack_linear(w)
    assert pack.wt.dtype == np.float32 and pack.unpack()[0].tobytes() == w.tobytes()
    _close(pack.forward(x), CPU_KERNELS.linear(x, w), ml_dtypes.bfloat16)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows", [1, 5, 16, 17, 70])
@pytest.mark.parametrize("depth", [32, 30])
def test_quantized_linear_takes_the_in_register_kernel_for_few_rows_and_row_blocks_for_many(
    launches: list[str], dtype: Any, rows: int, depth: int
) -> None:
    rng = np.random.default_rng(4)
    q, scale = quantize_per_channel(_data(rng, (20, depth), np.float32, 0.2))
    b = _data(rng, (20,), np.float32)
    x = _data(rng, (rows, depth), dtype)
    cpu = CPU_KERNELS.pack_quantized_linear(q, scale, b)
    pack = kernels.pack_quantized_linear(q, scale, b, scratch_bytes=7 * depth * 4)  # blocks of 7 rows, or fewer
    assert isinstance(pack, kernels.CudaPackedQuantizedLinear) and pack.nbytes == cpu.nbytes
    # The GPU road is weight-only int8 (float activations): the CPU pack's float64 road is that math
    # (its float32 road quantizes activations too, packrt_kernels_cpu.int8).
    weight_only = cpu.forward(x.astype(np.float64)).astype(dtype)
    _close(pack.forward(x), weight_only, dtype)
    unbiased = CPU_KERNELS.borrow_quantized_linear(q, scale).forward(x[None].astype(np.float64)).astype(dtype)
    _close(kernels.borrow_quantized_linear(q, scale).forward(x[None]), unbiased, dtype)
    few = rows <= kernels.QGEMV_MAX_ROWS
    assert any(n.startswith("pk_qgemv_" if few else "pk_dequant_rows_") for n in launches)
    assert not any(n.startswith("pk_dequant_rows_" if few else "pk_qgemv_") for n in launches)
    if not few:
        blocks = -(-20 // pack.block_rows(kernels.gemm_dtype(dtype)))  # the pack's scratch: 7 float32 rows
        assert blocks >= 2 and sum(n.startswith("pk_dequant_rows_") for n in launches) == blocks + 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", ["none", "causal", "causal-wide", "bool", "float", "broadcast"])
def test_attention_scales_masks_and_normalizes_as_the_cpu_kernel(launches: list[str], dtype: Any, case: str) -> None:
    rng = np.random.default_rng(5)
    length, source = (3, 6) if case == "causal-wide" else (5, 5)
    q = _data(rng, (2, 3, length, 8), dtype)
    k, v = _data(rng, (2, 3, source, 8), dtype), _data(rng, (2, 3, source, 4), dtype)
    mask: np.ndarray | None = None
    if case == "bool":
        mask = rng.random((2, 1, length, source)) > 0.4
        mask[0, 0, 1] = False  # a query that sees nothing gets zeros
    elif case == "float":
        mask = _data(rng, (length, source), dtype)
    elif case == "broadcast":
        k, v = k[:, :1], v[:, :1]  # one key head for every query head
    causal = case.startswith("causal")
    want = CPU_KERNELS.scaled_dot_product_attention(q, k, v, mask, causal, 0.7 if case == "float" else None)
    got = kernels.scaled_dot_product_attention(q, k, v, mask, causal, 0.7 if case == "float" else None)
    _close(got, want, dtype)
    assert launches == ["pk_attention_softmax"]


def test_float64_and_empty_inputs_take_the_cpu_code(launches: list[str]) -> None:
    x = np.linspace(-2, 2, 12).reshape(3, 4)
    np.testing.assert_array_equal(kernels.gelu(x), CPU_KERNELS.gelu(x))
    np.testing.assert_array_equal(kernels.layer_norm(x, 4), CPU_KERNELS.layer_norm(x, 4))
    np.testing.assert_array_equal(kernels.softmax(np.zeros((0, 3), F32)), CPU_KERNELS.softmax(np.zeros((0, 3), F32)))
    assert launches == []


def test_the_record_replaces_exactly_the_gpu_entries() -> None:
    """A kernel the contract gains is the CPU's on CUDA until this set says otherwise: the set makes that a
    decision (every other entry runs on cupy arrays as written, through their array namespace)."""
    replaced = {
        "linear",
        "layer_norm",
        "rms_norm",
        "gelu",
        "silu",
        "softmax",
        "scaled_dot_product_attention",
        "pack_linear",
        "borrow_linear",
        "pack_quantized_linear",
        "borrow_quantized_linear",
        "plan_kernels",
        "pack_block_linear",  # None: no GPU kernels over quantized blocks
        "borrow_block_linear",
        "pack_block_embedding",
        "borrow_block_embedding",
    }
    for name in CPU_KERNELS.__dataclass_fields__:
        mine, cpu = getattr(kernels.CUDA_KERNELS, name), getattr(CPU_KERNELS, name)
        assert (mine is not cpu) == (name in replaced), name
        if name in replaced:
            assert mine is getattr(kernels, name, None)  # None: a kernel the GPU does not serve


def test_the_gpu_has_no_serving_plan_kernels_so_its_models_serve_module_by_module() -> None:
    assert kernels.CUDA_KERNELS.plan_kernels() is None
    assert CPU_KERNELS.plan_kernels() is not None


def test_numpy_inputs_are_served_by_the_cpu_kernels_without_cupy() -> None:
    x, w = np.ones((2, 4), F32), np.ones((3, 4), F32)
    np.testing.assert_array_equal(kernels.linear(x, w), CPU_KERNELS.linear(x, w))
    assert type(kernels.pack_linear(w)) is type(CPU_KERNELS.pack_linear(w))
    np.testing.assert_array_equal(kernels.gelu(x), CPU_KERNELS.gelu(x))
