"""The GEMM roads: MKL's and numpy's give numpy's results for every layout they take; the road is the
one PACKRT_BLAS asks for, or an error that names the fix; MKL's threads follow the cap."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_info  # type: ignore[import-untyped]

from packrt_kernels_cpu import BlasUnavailableError, CpuBackend, KernelError, blas, mkl, openmp
from packrt_kernels_cpu import settings as kernel_settings
from packrt_kernels_cpu.errors import SettingError

BF16 = np.dtype(ml_dtypes.bfloat16)


def _layout(a: np.ndarray, order: str) -> np.ndarray:
    """``a``'s values laid out C-contiguous, F-contiguous (what a transposed view is) or strided."""
    if order == "C":
        return np.ascontiguousarray(a)
    if order == "F":
        return np.asfortranarray(a)
    wide = np.zeros((a.shape[0], 2 * a.shape[1] + 1), a.dtype)
    wide[:, : 2 * a.shape[1] : 2] = a
    return wide[:, : 2 * a.shape[1] : 2]  # every other column: no BLAS reads it in place


def _expected(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    out = a.astype(np.float64) @ b.astype(np.float64)
    return out if bias is None else out + bias


@pytest.mark.usefixtures("blas_road")
@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(0, 40),
    k=st.integers(0, 40),
    n=st.integers(0, 40),
    orders=st.tuples(st.sampled_from("CFS"), st.sampled_from("CFS")),
    dtype=st.sampled_from([np.float32, np.float64]),
    with_bias=st.booleans(),
)
def test_matmul_is_numpys_product_for_every_layout_and_size(
    m: int, k: int, n: int, orders: tuple[str, str], dtype: Any, with_bias: bool
) -> None:
    rng = np.random.default_rng(m * 10_000 + k * 100 + n)
    a = _layout(rng.standard_normal((m, k)).astype(dtype), orders[0])
    b = _layout(rng.standard_normal((k, n)).astype(dtype), orders[1])
    bias = rng.standard_normal(n).astype(dtype) if with_bias else None
    out = blas.matmul(a, b, bias)
    assert out.dtype == np.dtype(dtype) and out.shape == (m, n)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, _expected(a, b, bias), rtol=tol, atol=tol * max(1, k))


@pytest.mark.usefixtures("blas_road")
def test_matmul_leaves_its_operands_as_they_were() -> None:
    rng = np.random.default_rng(1)
    a, b, bias = (rng.standard_normal(s).astype(np.float32) for s in [(9, 7), (7, 5), (5,)])
    copies = [x.copy() for x in (a, b, bias)]
    blas.matmul(a, b.T.copy().T, bias)
    for before, after in zip(copies, (a, b, bias), strict=True):
        np.testing.assert_array_equal(before, after)


def test_bfloat16_operands_multiply_into_float32_on_both_roads(blas_road: str) -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((33, 70)).astype(BF16)
    b = np.asfortranarray(rng.standard_normal((70, 21)).astype(BF16))  # as a transposed weight is
    bias = rng.standard_normal(21).astype(np.float32)
    out = blas.matmul(a, b, bias)
    assert out.dtype == np.float32
    # the products of bfloat16 values are exact in float32: only the sum order differs
    np.testing.assert_allclose(out, _expected(a, b, bias), rtol=1e-5, atol=1e-4)
    assert blas.multiplies(BF16) is (blas_road == "mkl")


def test_float16_is_not_a_dtype_the_gemm_takes_as_it_is(blas_road: str) -> None:
    assert blas.multiplies(np.dtype(np.float16)) is False
    assert blas.multiplies(np.dtype(np.float32)) and blas.multiplies(np.dtype(np.float64))


def test_the_road_is_the_one_packrt_blas_names(blas_road: str) -> None:
    assert blas.provider() == blas_road


def test_an_unknown_packrt_blas_value_is_refused_with_the_choices() -> None:
    with pytest.raises(BlasUnavailableError, match=r"PACKRT_BLAS='openblas'.*auto, mkl, numpy.*unset it"):
        kernel_settings.from_environment({"PACKRT_BLAS": "openblas"})
    assert issubclass(BlasUnavailableError, KernelError) and issubclass(BlasUnavailableError, ImportError)


def test_the_prefill_road_of_block_weights_is_q8_unless_the_environment_asks_for_float() -> None:
    assert kernel_settings.from_environment({}).block_prefill == "q8"
    assert kernel_settings.from_environment({"PACKRT_BLOCK_PREFILL": " Float "}).block_prefill == "float"
    with pytest.raises(SettingError, match=r"PACKRT_BLOCK_PREFILL='int4'.*q8, float.*unset it"):
        kernel_settings.from_environment({"PACKRT_BLOCK_PREFILL": "int4"})
    assert issubclass(SettingError, KernelError) and issubclass(SettingError, ValueError)


def test_a_decode_step_runs_a_layer_in_one_call_unless_the_environment_asks_for_kernels() -> None:
    assert kernel_settings.from_environment({}).decode_step == "layer"
    assert kernel_settings.from_environment({"PACKRT_DECODE_STEP": " Kernels "}).decode_step == "kernels"
    with pytest.raises(SettingError, match=r"PACKRT_DECODE_STEP='fused'.*layer, kernels.*unset it"):
        kernel_settings.from_environment({"PACKRT_DECODE_STEP": "fused"})


@pytest.mark.parametrize(("value", "choice"), [("", "auto"), (" MKL ", "mkl"), ("numpy", "numpy"), ("auto", "auto")])
def test_packrt_blas_is_read_case_and_space_insensitively(value: str, choice: str) -> None:
    assert kernel_settings.from_environment({"PACKRT_BLAS": value}).blas == choice


def test_the_environment_is_read_once_and_later_edits_change_no_road(monkeypatch: pytest.MonkeyPatch) -> None:
    road, numba = blas.provider(), kernel_settings.current().numba
    monkeypatch.setenv("PACKRT_BLAS", "numpy" if road == "mkl" else "mkl")
    monkeypatch.setenv("PACKRT_NUMBA", "1" if not numba else "0")
    assert blas.provider() == road and kernel_settings.current().numba is numba


def test_an_override_puts_the_settings_and_the_road_back_even_on_error() -> None:
    before, road = kernel_settings.current(), blas.provider()
    seen = []

    def fail_inside() -> None:
        with kernel_settings.override(blas="numpy", numba=False):
            seen.append((blas.provider(), kernel_settings.current().numba))
            raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        fail_inside()
    assert seen == [("numpy", False)]
    assert kernel_settings.current() == before and blas.provider() == road


def _without_mkl(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection: MKL's library is not found (its loader and its cached load forgotten)."""
    monkeypatch.setattr(mkl, "_state", {})
    monkeypatch.setattr(mkl, "_mkl_candidates", lambda: ["/nonexistent/libmkl_rt.so.3"])


def test_asking_for_mkl_where_it_does_not_load_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_mkl(monkeypatch)
    with (
        kernel_settings.override(blas="mkl"),
        pytest.raises(BlasUnavailableError, match=r"libmkl_rt.*pip install packrt-kernels-cpu\[mkl\]"),
    ):
        blas.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))


def test_auto_falls_back_to_numpy_where_mkl_does_not_load(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_mkl(monkeypatch)
    with kernel_settings.override(blas="auto"):
        assert blas.provider() == "numpy"
        np.testing.assert_array_equal(blas.matmul(np.eye(3, dtype=np.float32), np.full((3, 2), 2, np.float32)), 2.0)


@pytest.mark.parametrize(
    ("vendor", "road"),
    [("GenuineIntel", "mkl"), ("AuthenticAMD", "numpy"), ("HygonGenuine", "numpy"), ("", "numpy")],
)
def test_auto_takes_mkl_on_intel_cpus_only(vendor: str, road: str) -> None:
    assert mkl.auto_road(vendor) == road


def test_auto_on_a_cpu_not_intels_takes_openblas_with_mkl_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mkl, "cpu_vendor", lambda: "AuthenticAMD")
    with kernel_settings.override(blas="numpy"), kernel_settings.override(blas="auto"):  # decided afresh
        assert blas.provider() == "numpy"
        with kernel_settings.override(blas="mkl"):  # asked for by name, MKL is still taken where it loads
            try:
                assert blas.provider() == "mkl"
            except BlasUnavailableError:
                pytest.skip("MKL does not load here")


def test_auto_on_an_intel_cpu_takes_mkl_where_it_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mkl, "cpu_vendor", lambda: mkl.INTEL)
    with kernel_settings.override(blas="numpy"), kernel_settings.override(blas="auto"):
        loads = isinstance(mkl._loaded(), mkl.Mkl)
        assert blas.provider() == ("mkl" if loads else "numpy")


def test_auto_on_a_cpu_not_intels_still_gives_conv2d_mkls_batched_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GEMMs take OpenBLAS there, but conv2d's compiled bands (and its Winograd road) need MKL's strided
    batch, which measured faster on that CPU; PACKRT_BLAS=numpy still keeps MKL out entirely."""
    monkeypatch.setattr(mkl, "cpu_vendor", lambda: "AuthenticAMD")
    with kernel_settings.override(blas="numpy"):
        assert blas.sgemm_batch() is None
        with kernel_settings.override(blas="auto"):
            assert blas.provider() == "numpy"
            loaded = mkl._loaded()
            if not isinstance(loaded, mkl.Mkl) or loaded.sgemm_batch is None:
                pytest.skip("MKL (2020 or newer) does not load here")
            assert blas.sgemm_batch() is loaded.sgemm_batch


def test_an_mkl_loaded_off_its_road_follows_the_thread_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mkl, "cpu_vendor", lambda: "AuthenticAMD")
    with kernel_settings.override(blas="numpy"), kernel_settings.override(blas="auto", threads=1):
        loaded = mkl.batch_handle()
        if loaded is None:
            pytest.skip("MKL does not load here")
        max_threads = ctypes.CDLL(loaded.path).MKL_Get_Max_Threads
        assert max_threads() == 1
        with kernel_settings.override(threads=2):
            assert max_threads() == 2


def test_the_cpu_vendor_is_the_vendor_id_cpuinfo_names(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n")
    assert mkl.read_vendor(str(info)) == "AuthenticAMD"
    assert isinstance(mkl.read_vendor(str(tmp_path / "missing")), str)  # unreadable: the platform's word, or ""


def test_mkl_threads_follow_the_backend_cap_set_before_and_after_it_is_chosen() -> None:
    backend = CpuBackend()
    with kernel_settings.override(blas="numpy"):
        backend.set_num_threads(1)  # before MKL's road is taken: applied when it is
        assert blas.num_threads() == 1
        with kernel_settings.override(blas="mkl"):
            try:
                blas.provider()
            except BlasUnavailableError:
                pytest.skip("MKL does not load here")
            mkl_pools = [p for p in threadpool_info() if p.get("internal_api") == "mkl"]
            assert mkl_pools and all(p["num_threads"] == 1 for p in mkl_pools)
            assert backend.get_num_threads() == 1
            backend.set_num_threads(2)
            assert backend.get_num_threads() == min(2, max(p["num_threads"] for p in threadpool_info()))
        backend.set_num_threads(1)


def test_first_use_from_many_threads_decides_one_road() -> None:
    a = np.ones((16, 16), np.float32)
    results: list[np.ndarray] = []
    road = blas.provider()
    with kernel_settings.override(blas="numpy"), kernel_settings.override(blas="auto"):  # the road undecided again
        workers = [threading.Thread(target=lambda: results.append(blas.matmul(a, a))) for _ in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert len(results) == 8 and all(np.array_equal(r, np.full((16, 16), 16.0)) for r in results)
        assert blas.provider() in ("mkl", "numpy")
    assert blas.provider() == road


def _stack(rng: np.random.Generator, batch: tuple[int, ...], rows: int, cols: int, heads_view: bool) -> np.ndarray:
    """A (*batch, rows, cols) stack: contiguous, or the heads of a (..., rows, heads, cols) array swapped
    forward as attention's query and key are (each matrix then strides rows by heads * cols)."""
    if not heads_view:
        return rng.standard_normal((*batch, rows, cols)).astype(np.float32)
    wide = rng.standard_normal((*batch[:-1], rows, batch[-1], cols)).astype(np.float32)
    return np.swapaxes(wide, -2, -3)


@pytest.mark.usefixtures("blas_road")
@settings(max_examples=40, deadline=None)
@given(
    batch=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
    m=st.integers(1, 9),
    k=st.integers(1, 9),
    n=st.integers(1, 9),
    heads_view=st.booleans(),
    transpose_b=st.booleans(),
)
def test_a_stack_of_matrices_multiplies_as_numpys_matmul_does(
    batch: tuple[int, ...], m: int, k: int, n: int, heads_view: bool, transpose_b: bool
) -> None:
    rng = np.random.default_rng(len(batch) * 1000 + m * 100 + k * 10 + n)
    a = _stack(rng, batch, m, k, heads_view)
    b = np.swapaxes(_stack(rng, batch, n, k, heads_view), -1, -2) if transpose_b else _stack(rng, batch, k, n, False)
    out = blas.matmul(a, b)
    assert out.shape == (*batch, m, n) and out.dtype == np.float32 and out.flags.c_contiguous
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("blas_road")
@pytest.mark.parametrize(
    ("a_shape", "b_shape", "bias_shape"),
    [
        ((2, 3, 4, 5), (1, 3, 5, 6), None),  # a batch axis of one repeats
        ((4, 5), (3, 5, 6), (4, 1)),  # a 2-D matrix over a stack, a bias per row: conv2d's GEMM
        ((2, 1, 4, 5), (3, 5, 6), (6,)),
    ],
)
def test_batch_axes_and_the_bias_broadcast_as_numpys_do(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...], bias_shape: tuple[int, ...] | None
) -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    bias = None if bias_shape is None else rng.standard_normal(bias_shape).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64) + (0 if bias is None else bias)
    np.testing.assert_allclose(blas.matmul(a, b, bias), want, rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("blas_road")
def test_batch_axes_that_do_not_broadcast_raise_numpys_error() -> None:
    with pytest.raises(ValueError, match="could not be broadcast together"):
        blas.matmul(np.ones((2, 3, 4), np.float32), np.ones((3, 4, 5), np.float32))


@pytest.mark.usefixtures("blas_road")
@pytest.mark.parametrize("shape", [(6, 7), (2, 3, 6, 7)])
def test_alpha_scales_the_product_and_not_the_bias(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal((*shape[:-2], 7, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    want = 0.125 * (a.astype(np.float64) @ b.astype(np.float64)) + bias
    np.testing.assert_allclose(blas.matmul(a, b, bias, alpha=0.125), want, rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("blas_road")
def test_exp_agrees_with_numpys_including_the_ieee_edges() -> None:
    x = np.linspace(-100, 80, 40_000, dtype=np.float32)  # large enough for MKL's vector exp
    x[:4] = [-np.inf, np.inf, np.nan, 0.0]  # 0, inf, nan, 1 as numpy gives them
    x[4] = 100.0  # overflows float32 to inf
    out = np.empty_like(x)
    with np.errstate(over="ignore"):  # numpy's road warns of the overflow, MKL's does not
        assert blas.exp(x, out=out) is out
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    tiny = 2 * float(np.finfo(np.float32).smallest_subnormal)  # results below 1e-38 may round by one subnormal
    np.testing.assert_allclose(out, want, rtol=3e-7, atol=tiny)
    assert out[0] == 0 and out[1] == np.inf and np.isnan(out[2]) and out[3] == 1 and out[4] == np.inf


@pytest.mark.usefixtures("blas_road")
def test_exp_in_place_small_arrays_and_other_dtypes_are_numpys() -> None:
    x = np.linspace(-5, 5, 20_000, dtype=np.float32).reshape(2, 10_000)
    want = np.exp(x)
    blas.exp(x, out=x)
    np.testing.assert_allclose(x, want, rtol=3e-7)
    y = np.linspace(-5, 5, 11)  # float64: numpy's exp on every road
    np.testing.assert_array_equal(blas.exp(y, out=np.empty_like(y)), np.exp(y))
    small = np.linspace(-5, 5, 11, dtype=np.float32)  # below MKL's threshold: numpy's, bit for bit
    np.testing.assert_array_equal(blas.exp(small, out=np.empty_like(small)), np.exp(small))


@pytest.mark.usefixtures("blas_road")
@pytest.mark.parametrize("with_bias", [False, True])
def test_out_may_be_a_strided_slice_and_only_its_slice_is_written(with_bias: bool) -> None:
    rng = np.random.default_rng(5)
    w = rng.standard_normal((2, 4, 6)).astype(np.float32)  # a (groups, out, in) weight over a batch of 3
    cols = rng.standard_normal((3, 2, 6, 10)).astype(np.float32)
    bias = rng.standard_normal((2, 4, 1)).astype(np.float32) if with_bias else None
    wide = np.full((3, 2, 4, 25), 7.0, np.float32)
    into = wide[..., 5:15]  # rows strided by 25: a band of pixels inside each output plane
    assert blas.matmul(w, cols, bias, out=into) is into
    want = w.astype(np.float64) @ cols.astype(np.float64) + (0 if bias is None else bias)
    np.testing.assert_allclose(into, want, rtol=1e-5, atol=1e-5)
    untouched = np.delete(wide, np.s_[5:15], axis=-1)
    np.testing.assert_array_equal(untouched, 7.0)


@pytest.mark.usefixtures("blas_road")
@pytest.mark.usefixtures("blas_road")
def test_out_may_interleave_its_matrices_as_merged_attention_heads_do() -> None:
    rng = np.random.default_rng(5)
    scores = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)  # (batch, heads, seq, seq)
    values = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)  # (batch, heads, seq, dim)
    merged = np.zeros((2, 4, 3 * 5), np.float32)  # (batch, seq, heads * dim): heads interleave in a row
    view = merged.reshape(2, 4, 3, 5).transpose(0, 2, 1, 3)
    assert blas.matmul(scores, values, out=view) is view
    expected = np.matmul(scores, values).transpose(0, 2, 1, 3).reshape(2, 4, 15)
    np.testing.assert_allclose(merged, expected, rtol=1e-5, atol=1e-6)


def test_an_out_of_the_wrong_shape_raises_numpys_error() -> None:
    a, b = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
    with pytest.raises(ValueError, match="mismatch"):
        blas.matmul(a, b, out=np.empty((3, 6), np.float32))


@pytest.mark.parametrize(
    ("preset", "expected_spin"),
    [({}, openmp.OPENMP_SPIN), ({"OMP_WAIT_POLICY": "PASSIVE"}, None), ({"GOMP_SPINCOUNT": "5"}, "5")],
)
def test_a_short_openmp_spin_is_set_only_where_the_user_chose_nothing(
    monkeypatch: pytest.MonkeyPatch, preset: dict[str, str], expected_spin: str | None
) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    for name, value in preset.items():
        monkeypatch.setenv(name, value)
    openmp.prefer_short_openmp_spin()
    assert os.environ.get("GOMP_SPINCOUNT") == expected_spin
    assert os.environ.get("OMP_WAIT_POLICY") == preset.get("OMP_WAIT_POLICY")


@pytest.mark.usefixtures("blas_road")
def test_matmul_with_accumulate_adds_the_product_onto_out() -> None:
    rng = np.random.default_rng(13)
    a, b = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 7)).astype(np.float32)
    start = rng.standard_normal((6, 7)).astype(np.float32)
    out = start.copy()
    assert blas.matmul(a, b, out=out, accumulate=True) is out
    np.testing.assert_allclose(out, start + a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("keywords", [{}, {"bias": np.zeros(7, np.float32), "out": np.zeros((6, 7), np.float32)}])
def test_matmul_with_accumulate_needs_out_and_no_bias(keywords: dict[str, Any]) -> None:
    with pytest.raises(KernelError, match=r"accumulate=True\) adds onto out: pass out=, and no bias"):
        blas.matmul(np.ones((6, 5), np.float32), np.ones((5, 7), np.float32), accumulate=True, **keywords)
