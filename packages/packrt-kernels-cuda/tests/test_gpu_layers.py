"""packrt's layers, residencies, moves and DLPack on a GPU against the same layers on the CPU.

Skipped without packrt-core (the ``tests`` session installs this package alone), cupy or a GPU;
``nox -s gpu`` runs them where one answers.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from packrt_kernels_cpu.tolerance import tolerance

prt = pytest.importorskip("packrt_core", reason="the layer tests need packrt-core (installed by nox -s gpu)")
nn = prt.nn

RESIDENCIES = ["packed", "borrowed", "auto", "per_call"]
DTYPES = ["float32", "float16", "bfloat16"]


@pytest.fixture(autouse=True)
def _gpu(cp: ModuleType) -> None:
    if not prt.cuda.is_available():
        pytest.skip("packrt does not see the GPU cupy sees (is packrt-kernels-cuda installed?)")


def _close(got: Any, want: Any, dtype: str) -> None:
    assert str(got.device) == "cpu" or got.device.type == "cuda"
    rtol, atol = tolerance(np.dtype(want.numpy().dtype))
    np.testing.assert_allclose(
        got.cpu().float().numpy(), want.float().numpy(), rtol=rtol * 4, atol=atol * 4, err_msg=dtype
    )


Builder = Callable[[str | None], Any]
LAYERS: dict[str, tuple[Builder, tuple[int, ...]]] = {
    "Linear": (lambda r: nn.Linear(64, 48, weight_residency=r), (3, 5, 64)),
    "Linear-nobias": (lambda r: nn.Linear(64, 48, bias=False, weight_residency=r), (7, 64)),
    "Conv2d": (lambda r: nn.Conv2d(4, 6, 3, padding=1, weight_residency=r), (2, 4, 9, 9)),
    "LayerNorm": (lambda r: nn.LayerNorm(64), (3, 64)),
    "RMSNorm": (lambda r: nn.RMSNorm(64), (3, 64)),
    "GELU": (lambda r: nn.GELU(), (3, 64)),
    "GELU-tanh": (lambda r: nn.GELU("tanh"), (3, 64)),
    "SiLU": (lambda r: nn.SiLU(), (3, 64)),
    "ReLU": (lambda r: nn.ReLU(), (3, 64)),
    "Softmax": (lambda r: nn.Softmax(-1), (3, 64)),
}


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_layer_on_the_gpu_matches_the_cpu(name: str, dtype: str) -> None:
    build, shape = LAYERS[name]
    prt.manual_seed(0)
    layer = build(None).to(dtype)
    x = prt.randn(*shape).to(dtype)
    want = layer(x)
    layer.to("cuda")
    got = layer(x.to("cuda"))
    assert got.device == prt.Device("cuda:0") and got.dtype == want.dtype
    _close(got, want, dtype)


@pytest.mark.parametrize("residency", RESIDENCIES)
@pytest.mark.parametrize("kind", ["Linear", "Conv2d", "Embedding", "QuantizedLinear"])
def test_each_residency_serves_on_the_gpu(residency: str, kind: str) -> None:
    prt.manual_seed(1)
    if kind == "Embedding":
        layer: Any = nn.Embedding(50, 16, weight_residency=residency)
        x = prt.tensor([[1, 4, 49], [0, 2, 3]])
    elif kind == "Conv2d":
        layer, x = nn.Conv2d(3, 5, 3, weight_residency=residency), prt.randn(2, 3, 8, 8)
    elif kind == "QuantizedLinear":
        layer, x = nn.QuantizedLinear.from_float(nn.Linear(96, 40), weight_residency=residency), prt.randn(20, 96)
    else:
        layer, x = nn.Linear(32, 24, weight_residency=residency), prt.randn(4, 32)
    want = layer(x)
    if kind == "QuantizedLinear":  # the GPU serves weight-only int8, the CPU's float64 road (its float32 one is int8)
        want = layer(x.to("float64")).to("float32")
    layer.to("cuda")
    got = layer(x.to("cuda"))
    _close(got, want, "float32")
    assert layer.residency_decision in ("packed", "borrowed", "per_call")
    if layer.residency_decision == "packed":
        assert layer.is_packed and layer.resident_pack_bytes > 0
    back = layer.to("cpu")(x if kind != "QuantizedLinear" else x.to("float64")).to("float32")  # and back again
    _close(back, want, "float32")


def test_auto_reads_the_gpus_free_memory() -> None:
    from packrt_core.nn import residency

    free = residency.free_memory(prt.Device("cuda:0"))
    assert free > 0
    layer = nn.Linear(16, 16, weight_residency="auto").to("cuda")
    assert layer.serving_residency() == "packed"  # a few KiB fit any GPU
    with nn.free_memory_override(0):
        assert nn.Linear(16, 16, weight_residency="auto").to("cuda").serving_residency() == "borrowed"


def test_tensor_moves_both_ways_and_arithmetic_runs_on_the_gpu(cp: ModuleType) -> None:
    a = prt.randn(64, 32)
    g = a.to("cuda")
    assert g.device.type == "cuda" and type(g._array()).__module__.startswith("cupy")
    h = (g @ g.T + 1.0).sum(-1)
    np.testing.assert_allclose(h.cpu().numpy(), (a @ a.T + 1.0).sum(-1).numpy(), rtol=1e-4, atol=1e-3)
    assert g.cuda().device == g.device and g.cpu().device == prt.Device("cpu")
    np.testing.assert_array_equal(g.cpu().numpy(), a.numpy())


def test_dlpack_with_cupy_shares_device_memory(cp: ModuleType) -> None:
    t = prt.randn(8, 8).to("cuda")
    peer = cp.from_dlpack(t)
    assert int(peer.data.ptr) == t.data_ptr()
    mine = prt.from_dlpack(cp.arange(6, dtype=cp.float32))
    assert mine.device.type == "cuda" and mine.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_dlpack_with_torch_shares_device_memory() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("this torch build has no CUDA (install a CUDA torch build for this check)")
    t = prt.randn(4, 5).to("cuda")
    peer = torch.from_dlpack(t)
    assert peer.is_cuda and peer.data_ptr() == t.data_ptr()
    source = torch.arange(10, dtype=torch.float32, device="cuda")
    mine = prt.from_dlpack(source)
    assert mine.data_ptr() == source.data_ptr() and mine.device.type == "cuda"


def test_a_model_moves_to_the_gpu_and_back() -> None:
    prt.manual_seed(2)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 8))
    x = prt.randn(5, 32)
    want = model(x)
    model.to("cuda")
    _close(model(x.to("cuda")), want, "float32")
    model.to("cpu")
    _close(model(x), want, "float32")
