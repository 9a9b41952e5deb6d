"""The AVX512-VNNI int8 GEMM (packrt_kernels_cpu.vnni) gives the exact integers of every other int8 road,
at every edge of its tiling; a packed int8 linear on it gives the bits of the float32-chunk road."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packrt_kernels_cpu import compiled, int8, pack_quantized_linear, quantize_per_channel, threads, vnni
from packrt_kernels_cpu import settings as kernel_settings

needs_vnni = pytest.mark.skipif(not vnni.available(), reason="this CPU has no AVX512-VNNI (or numba is off)")


def _exact(u: np.ndarray, q: np.ndarray) -> np.ndarray:
    return u.astype(np.int64) @ q.astype(np.int64).T


@needs_vnni
@pytest.mark.parametrize(
    ("m", "n", "k"),
    [(1, 32, 4), (8, 32, 4), (9, 33, 5), (13, 100, 30), (16, 64, 384), (17, 96, 1536), (3, 1, 1), (40, 70, 130)],
)
def test_the_vnni_gemm_gives_the_exact_integers_at_every_tile_edge(m: int, n: int, k: int) -> None:
    # rows past a multiple of 8, columns past a multiple of 32, inputs past a multiple of 4: each edge
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    u = rng.integers(0, 256, (m, k)).astype(np.uint8)
    q = rng.integers(-127, 128, (n, k)).astype(np.int8)
    got = vnni.gemm(u, vnni.pack(q))
    assert got.shape == (m, n) and got.dtype == np.int32
    np.testing.assert_array_equal(got, _exact(u, q))


@needs_vnni
def test_the_extremes_of_both_operands_sum_exactly() -> None:
    k = 4096  # 4096 * 255 * 127 fits int32 with room: every product at its largest, one sign
    u = np.full((9, k), 255, np.uint8)
    q = np.concatenate([np.full((16, k), 127, np.int8), np.full((17, k), -127, np.int8)])
    np.testing.assert_array_equal(vnni.gemm(u, vnni.pack(q)), _exact(u, q))


@needs_vnni
def test_panels_hold_the_weight_padded_to_whole_panels_and_groups() -> None:
    panels = vnni.pack(np.ones((33, 5), np.int8))
    assert (panels.out_features, panels.in_features, panels.groups, panels.padded_out) == (33, 5, 2, 64)
    assert panels.nbytes == 64 * 8 and int(panels.data.sum()) == 33 * 5  # the padding is zeros


@needs_vnni
def test_an_int8_linear_on_vnni_panels_gives_the_float_chunk_roads_bits() -> None:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((70, 96)).astype(np.float32)
    q, scale = quantize_per_channel(w)
    bias = rng.standard_normal(70).astype(np.float32)
    x = rng.standard_normal((11, 96)).astype(np.float32)
    sums = int8.weight_sums(q)
    with kernel_settings.override(blas="numpy"):
        chunks = int8.linear(x, q, scale, sums, bias)  # float32 GEMMs over exact chunks
        panelled = int8.linear(x, q, scale, sums, bias, panels=vnni.pack(q))
    np.testing.assert_array_equal(panelled, chunks)


@needs_vnni
@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 150),
    n=st.integers(1, 100),
    k=st.integers(1, 200),
    biased=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_fused_vnni_linear_gives_the_bits_of_quantize_gemm_then_the_dequantize_pass(
    m: int, n: int, k: int, biased: bool, seed: int
) -> None:
    # every row, column and input edge of the tiles and of the row chunks (64 rows), with and without a bias
    rng = np.random.default_rng(seed)
    q, scale = quantize_per_channel(rng.standard_normal((n, k)).astype(np.float32))
    sums = int8.weight_sums(q)
    bias = rng.standard_normal(n).astype(np.float32) if biased else np.empty(0, np.float32)
    x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    x[m // 2, k // 3] = np.nan  # a row holding NaN: scale NaN, every output of that row NaN, on both roads
    panels = vnni.pack(q)
    u, x_scale, x_zero = int8.quantize_rows(x)
    product = vnni.gemm(u, panels)
    want = np.empty((m, n), np.float32)
    loops = compiled.module("packrt_kernels_cpu._numba_int8")
    loops.dequantize_product_serial(np.ascontiguousarray(product), x_scale, x_zero, scale, sums, bias, False, want)
    got = np.full((m, n), 7.0, np.float32)
    vnni.linear(x, panels, scale, sums, bias, got)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.isnan(got[m // 2]).all()


@needs_vnni
def test_inside_on_this_thread_the_int8_loops_stay_on_the_calling_thread_with_the_same_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(11)
    q, scale = quantize_per_channel(rng.standard_normal((1024, 1024)).astype(np.float32))
    x = rng.standard_normal((300, 1024)).astype(np.float32)  # each loop's work past its pool bound
    loops = compiled.module("packrt_kernels_cpu._numba_int8")
    pooled = ("row_sums", "vnni_rows")  # 300 rows: each task quantizes its own chunks
    calls: list[str] = []

    def counted(name: str, loop: Any) -> Any:
        def call(*args: Any) -> None:
            calls.append(name)
            loop(*args)

        return call

    for name in pooled:
        monkeypatch.setattr(loops, name, counted(name, getattr(loops, name)))

    def linear() -> np.ndarray:
        return int8.linear(x, q, scale, int8.weight_sums(q), None, panels=vnni.pack(q))

    if compiled.pool_size() < 2:
        pytest.skip("numba's pool has one thread here: every loop runs on the calling thread anyway")
    with kernel_settings.override(blas="numpy"):
        on_the_pool = linear()
        assert sorted(calls) == list(pooled), "outside, work this large goes to a pool of two threads or more"
        calls.clear()
        with threads.on_this_thread():
            alone = linear()
    assert calls == [], f"{calls} started a parallel region inside on_this_thread"
    np.testing.assert_array_equal(alone, on_the_pool)


@needs_vnni
def test_a_packed_int8_layer_takes_the_vnni_road_off_mkls_and_counts_its_panels() -> None:
    rng = np.random.default_rng(3)
    q, scale = quantize_per_channel(rng.standard_normal((40, 64)).astype(np.float32))
    x = rng.standard_normal((5, 64)).astype(np.float32)
    with kernel_settings.override(blas="numpy"):
        assert int8.uses_vnni()
        pack = pack_quantized_linear(q, scale, None)
        declared = pack.nbytes
        got = pack.forward(x)
        _, _, panels = pack.int8_operands()
        assert panels is not None and pack.nbytes == declared + panels.nbytes
        reference = pack_quantized_linear(q, scale, None)
        reference._int8 = (int8.weight_sums(q), None, None)  # the same layer without panels
        np.testing.assert_array_equal(got, reference.forward(x))


def test_without_numba_the_vnni_road_is_not_taken() -> None:
    with kernel_settings.override(numba=False):
        assert not vnni.available()
        assert not int8.uses_vnni()
