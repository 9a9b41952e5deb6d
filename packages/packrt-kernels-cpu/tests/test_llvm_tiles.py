"""Every LLVM tile, one test per shape: each float32 tile (rows 1 to 8 by one panel, one row by four
panels, two rows by two), each bfloat16 tile of the same shapes, and each VNNI int8 tile (8 rows, 1 row),
called directly at its address on random operands, at inputs that end mid-prefetch, mid-group of 4 and
past a full register tile. A tile writes its rows x panels block of ``out`` and nothing beside it, reads
``a`` only up to ``k`` in each row, gives numpy's product (float32 within the road tolerance, bfloat16
pairs and int8 exactly), and a float32 tile gives each output the bits the one-row tile gives it. The
compiled loops that choose the tiles are checked to call the tile each row count is meant to get, by
offering them only that tile (every other slot does nothing). A CPU without the tiles' instructions skips
these tests, naming what it lacks."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest
from bf16_pairs import BF16, pair_sums

from packrt_kernels_cpu import compiled, float_tiles, llvm_tiles, vnni
from packrt_kernels_cpu.tolerance import road_tolerance

# every tile's C signature: (out, ldo, a, lda, b, count) -> void
_TILE = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64
)
_FLOAT_K = (1, 2, 13, 31, 300)  # one input; under, at and past the 12-input prefetch distance
_VNNI_K = (1, 3, 4, 5, 130, 1027)  # inputs: part of a group of 4, whole groups, groups and a part
_VNNI_SHAPES = ((0, vnni.ROWS), (1, 1))  # (index in vnni._tiles().addresses, rows)
_F32_SENTINEL = np.float32(-7.25e30)  # where a tile must not write; no product here comes near it
_I32_SENTINEL = np.int32(-0x5A5A5A5A)


def _tiles_or_skip(tiles: llvm_tiles.Tiles | None, lacking: str) -> llvm_tiles.Tiles:
    if tiles is None:
        pytest.skip(f"the tiles need {lacking}, which this CPU (or its llvmlite) lacks")
    return tiles


@pytest.fixture(scope="module")
def float_library() -> llvm_tiles.Tiles:
    return _tiles_or_skip(float_tiles._tiles(), "AVX-512F and FMA")


@pytest.fixture(scope="module")
def vnni_library() -> llvm_tiles.Tiles:
    return _tiles_or_skip(vnni._tiles(), "AVX-512F, AVX-512BW and AVX512-VNNI")


@pytest.fixture(scope="module")
def noop() -> llvm_tiles.Tiles:
    """A tile that writes nothing, for the slot of every tile a loop must not call (its ``engine`` holds
    the machine code: the tests take the object, so the address stays valid while they run)."""
    source = (
        "define void @packrt_noop_tile(ptr %out, i64 %ldo, ptr %a, i64 %lda, ptr %b, i64 %k) {\nentry:\n  ret void\n}"
    )
    tiles = llvm_tiles.compile_tiles(source, ["packrt_noop_tile"], ())
    if tiles is None:
        pytest.skip("llvmlite is not installed here")
    return tiles


def _call(address: int, out: np.ndarray, a: np.ndarray, b: np.ndarray, count: int) -> None:
    """Tile ``address`` on ``out`` and ``a`` row-major with their own row strides (in elements)."""
    ldo = out.strides[0] // out.itemsize
    lda = a.strides[0] // a.itemsize
    _TILE(address)(out.ctypes.data, ldo, a.ctypes.data, lda, b.ctypes.data, count)


def _float_operands(rows: int, width: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``x`` (rows, k) inside a wider buffer whose extra columns are NaN, ``w`` (32 * width, k), and an
    ``out`` four columns wider than the tile's block, all sentinel."""
    rng = np.random.default_rng(seed)
    x = np.full((rows, k + 5), np.nan, np.float32)
    x[:, :k] = rng.standard_normal((rows, k))
    w = rng.standard_normal((float_tiles.PANEL * width, k)).astype(np.float32)
    out = np.full((rows, float_tiles.PANEL * width + 4), _F32_SENTINEL, np.float32)
    return x, w, out


def _float_id(case: tuple[int, int, int, int]) -> str:
    _, rows, width, k = case
    return f"f32-{rows}rows-{width}panels-k{k}"


_FLOAT_CASES = [(index, rows, width, k) for index, (rows, width) in enumerate(float_tiles._SHAPES) for k in _FLOAT_K]


def test_there_is_a_float32_tile_of_one_panel_for_every_row_count_up_to_eight() -> None:
    assert [shape for shape in float_tiles._SHAPES if shape[1] == 1] == [(r, 1) for r in range(1, float_tiles.ROWS + 1)]


@pytest.mark.parametrize("case", _FLOAT_CASES, ids=_float_id)
def test_a_float32_tile_writes_numpys_product_into_its_block_and_nothing_beside_it(
    float_library: llvm_tiles.Tiles, case: tuple[int, int, int, int]
) -> None:
    index, rows, width, k = case
    x, w, out = _float_operands(rows, width, k, seed=index * 1000 + k)
    _call(int(float_library.addresses[index]), out, x, float_tiles.pack(w).data, k)
    block = float_tiles.PANEL * width
    rtol, atol = road_tolerance(np.float32, k)
    np.testing.assert_allclose(out[:, :block], x[:, :k] @ w.T, rtol=rtol, atol=atol)
    assert (out[:, block:] == _F32_SENTINEL).all(), "the tile wrote past its block"


@pytest.mark.parametrize("case", _FLOAT_CASES, ids=_float_id)
def test_a_float32_tile_gives_each_output_the_bits_of_the_one_row_one_panel_tile(
    float_library: llvm_tiles.Tiles, case: tuple[int, int, int, int]
) -> None:
    index, rows, width, k = case
    x, w, out = _float_operands(rows, width, k, seed=index * 1000 + k + 1)
    data = float_tiles.pack(w).data
    _call(int(float_library.addresses[index]), out, x, data, k)
    single = np.full((1, float_tiles.PANEL), _F32_SENTINEL, np.float32)
    for r in range(rows):
        for p in range(width):
            _call(int(float_library.addresses[0]), single, x[r : r + 1], data[p], k)
            np.testing.assert_array_equal(out[r, p * float_tiles.PANEL : (p + 1) * float_tiles.PANEL], single[0])


@pytest.fixture(scope="module")
def bf16_library() -> llvm_tiles.Tiles:
    return _tiles_or_skip(float_tiles._bf16_tiles(), "AVX-512F and AVX512-BF16")


def _bf16_id(case: tuple[int, int, int, int]) -> str:
    _, rows, width, pairs = case
    return f"bf16-{rows}rows-{width}panels-{pairs}pairs"


@pytest.mark.parametrize("case", _FLOAT_CASES, ids=_bf16_id)
def test_a_bfloat16_tile_writes_the_pairwise_sums_into_its_block_and_nothing_beside_it(
    bf16_library: llvm_tiles.Tiles, case: tuple[int, int, int, int]
) -> None:
    """The same shapes as the float32 tiles, each step a pair of inputs: ``k`` here counts pairs."""
    index, rows, width, pairs = case
    x, w, out = _float_operands(rows, width, 2 * pairs, seed=index * 1000 + pairs + 2)
    xb = np.full((rows, 2 * pairs + 6), np.nan, BF16)  # the row's further pairs are NaN: never read
    xb[:, : 2 * pairs] = x[:, : 2 * pairs]
    _call(int(bf16_library.addresses[index]), out, xb.view(np.float32), float_tiles.pack(w, BF16).data, pairs)
    block = float_tiles.PANEL * width
    np.testing.assert_array_equal(out[:, :block], pair_sums(x[:, : 2 * pairs], w.astype(BF16)))
    assert (out[:, block:] == _F32_SENTINEL).all(), "the tile wrote past its block"


def _float_plan(rows: int, panels: int) -> list[tuple[int, int, int]]:
    """(tile index, first panel, panels) that the float32 loop calls for ``rows`` (at most 8) rows of
    ``panels`` panels: one or two rows take the tiles four or two panels wide while they fit, then
    one-panel tiles; three to eight rows take the one-panel tile of that many rows."""
    if rows > 2:
        return [(rows - 1, p, 1) for p in range(panels)]
    width = 4 // rows
    wide = [(float_tiles.ROWS + rows - 1, p, width) for p in range(0, panels - width + 1, width)]
    done = len(wide) * width
    return [*wide, *((rows - 1, p, 1) for p in range(done, panels))]


@pytest.mark.parametrize("loop", ["float_tiles", "float_tiles_serial"])
@pytest.mark.parametrize("rows", range(1, float_tiles.ROWS + 1))
def test_the_float32_loop_computes_each_row_count_with_the_tile_made_for_it(
    float_library: llvm_tiles.Tiles, noop: llvm_tiles.Tiles, rows: int, loop: str
) -> None:
    panels = 5  # one row: one four-wide tile and one single; two rows: two two-wide and one single
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 40)).astype(np.float32)
    w = rng.standard_normal((float_tiles.PANEL * panels, 40)).astype(np.float32)
    plan = _float_plan(rows, panels)
    only = np.full_like(float_library.addresses, noop.addresses[0])
    for index, _, _ in plan:
        only[index] = float_library.addresses[index]
    out = np.full((rows, float_tiles.PANEL * panels), _F32_SENTINEL, np.float32)
    if not compiled.enabled():
        pytest.skip("numba cannot load here: the tiles have no compiled loop to run them")
    loops = compiled.module("packrt_kernels_cpu._numba_plan")
    # one run of panels (threads=1): split over threads, each run chooses its tiles within its own panels
    getattr(loops, loop)(only, out, x, float_tiles.pack(w).data, 1)
    assert (out != _F32_SENTINEL).all(), f"a block was left to a tile other than those of {plan}"
    np.testing.assert_array_equal(out, float_tiles.gemm(x, float_tiles.pack(w)))


def _vnni_operands(rows: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, vnni.Panels]:
    """``u`` (rows, k) uint8 zero-padded to whole groups of 4 inside a buffer whose further columns
    are 255, ``q`` (32, k) int8 and its panel."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-127, 128, (vnni.PANEL, k)).astype(np.int8)
    panel = vnni.pack(q)
    u = np.full((rows, 4 * panel.groups + 8), 255, np.uint8)
    u[:, : 4 * panel.groups] = 0
    u[:, :k] = rng.integers(0, 256, (rows, k))
    return u, q, panel


@pytest.mark.parametrize(("index", "rows"), _VNNI_SHAPES, ids=[f"int8-{rows}rows" for _, rows in _VNNI_SHAPES])
@pytest.mark.parametrize("k", _VNNI_K, ids=[f"k{k}" for k in _VNNI_K])
def test_a_vnni_tile_writes_the_exact_int32_product_into_its_block_and_nothing_beside_it(
    vnni_library: llvm_tiles.Tiles, index: int, rows: int, k: int
) -> None:
    u, q, panel = _vnni_operands(rows, k, seed=rows * 10_000 + k)
    out = np.full((rows, vnni.PANEL + 4), _I32_SENTINEL, np.int32)
    _call(int(vnni_library.addresses[index]), out, u, panel.data, panel.groups)
    exact = u[:, :k].astype(np.int64) @ q.astype(np.int64).T
    np.testing.assert_array_equal(out[:, : vnni.PANEL], exact)
    assert (out[:, vnni.PANEL :] == _I32_SENTINEL).all(), "the tile wrote past its block"


@pytest.mark.parametrize("loop", ["vnni_tiles", "vnni_tiles_serial"])
@pytest.mark.parametrize("rows", [*range(1, vnni.ROWS + 2), 16, 17])
def test_the_int8_loop_takes_the_eight_row_tile_down_the_rows_and_the_one_row_tile_for_the_rest(
    vnni_library: llvm_tiles.Tiles, noop: llvm_tiles.Tiles, rows: int, loop: str
) -> None:
    u, q, panel = _vnni_operands(rows, 70, seed=rows)
    u = np.ascontiguousarray(u[:, : 4 * panel.groups])
    whole = rows // vnni.ROWS * vnni.ROWS
    exact = u.astype(np.int64) @ np.pad(q, ((0, 0), (0, 2))).astype(np.int64).T
    if not compiled.enabled():
        pytest.skip("numba cannot load here: the tiles have no compiled loop to run them")
    loops = compiled.module("packrt_kernels_cpu._numba_int8")
    for kept, computed in ((0, slice(0, whole)), (1, slice(whole, rows))):
        only = np.full_like(vnni_library.addresses, noop.addresses[0])
        only[kept] = vnni_library.addresses[kept]
        out = np.full((rows, vnni.PANEL), _I32_SENTINEL, np.int32)
        getattr(loops, loop)(only, out, u, panel.data, panel.groups)
        np.testing.assert_array_equal(out[computed], exact[computed])
        left = np.ones(rows, bool)
        left[computed] = False
        assert (out[left] == _I32_SENTINEL).all(), f"tile {kept} computed rows the other tile is for"


def _store_tile(value: float) -> str:
    """IR of a tile that writes ``value`` to ``out[0]``."""
    return (
        "define void @packrt_store_tile(ptr %out, i64 %ldo, ptr %a, i64 %lda, ptr %b, i64 %k) {\n"
        f"entry:\n  store float {value:.6e}, ptr %out, align 4\n  ret void\n}}"
    )


def _stored(tiles: llvm_tiles.Tiles | None) -> float:
    if tiles is None:
        pytest.skip("llvmlite is not installed here")
    out = np.zeros((1, 1), np.float32)
    _call(int(tiles.addresses[0]), out, np.zeros((1, 1), np.float32), np.zeros(1, np.float32), 0)
    return float(out[0, 0])


def test_compiled_tiles_are_kept_on_disk_and_a_later_build_loads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PACKRT_CACHE_DIR", str(tmp_path))
    assert _stored(llvm_tiles.compile_tiles(_store_tile(1.5), ["packrt_store_tile"], ())) == 1.5
    (kept,) = llvm_tiles.tile_cache_dir().glob("*.o")
    assert llvm_tiles.tile_cache_dir() == tmp_path / "tiles"
    compiles = []
    monkeypatch.setattr(llvm_tiles, "_write_object", lambda path, code: compiles.append(path))
    assert _stored(llvm_tiles.compile_tiles(_store_tile(1.5), ["packrt_store_tile"], ())) == 1.5
    assert compiles == [], "the second build read the machine code the first one kept"
    assert _stored(llvm_tiles.compile_tiles(_store_tile(2.5), ["packrt_store_tile"], ())) == 2.5
    assert len(compiles) == 1 and compiles[0] != kept, "other IR is other machine code: a file of its own"


def test_a_cached_tile_cut_short_or_overwritten_is_compiled_again_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PACKRT_CACHE_DIR", str(tmp_path))
    assert _stored(llvm_tiles.compile_tiles(_store_tile(1.5), ["packrt_store_tile"], ())) == 1.5
    (kept,) = llvm_tiles.tile_cache_dir().glob("*.o")
    whole = kept.read_bytes()
    for damaged in (whole[: len(whole) // 2], whole[:40] + bytes(len(whole) - 40), b""):
        kept.write_bytes(damaged)
        assert _stored(llvm_tiles.compile_tiles(_store_tile(1.5), ["packrt_store_tile"], ())) == 1.5
        assert kept.read_bytes() == whole, "the damaged entry was replaced by the compiled code"


def test_tiles_compile_in_memory_where_the_cache_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache root would go")
    monkeypatch.setenv("PACKRT_CACHE_DIR", str(blocker))
    assert _stored(llvm_tiles.compile_tiles(_store_tile(4.0), ["packrt_store_tile"], ())) == 4.0
    assert blocker.read_text() == "a file where the cache root would go"
    assert not list(tmp_path.glob("**/*.part")), "no partial file is left behind"
