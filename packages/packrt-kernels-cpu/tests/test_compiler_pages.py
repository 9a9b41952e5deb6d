"""The JIT compiler's pages are handed back once it has been idle (packrt_kernels_cpu.compiler_pages): only after
it ran and went quiet, and the kernels it made run on with the same bits."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from packrt_base.pages import pagemap_readable
from packrt_kernels_cpu import blocks, compiled, compiler_pages


@pytest.fixture
def released(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The library names :func:`compiler_pages.hand_back` released, instead of releasing them."""
    calls: list[str] = []
    monkeypatch.setattr(compiler_pages, "release_library_pages", lambda name: calls.append(name) or 0)
    return calls


def test_the_pages_go_only_once_the_compiler_ran_and_then_stayed_idle(
    monkeypatch: pytest.MonkeyPatch, released: list[str]
) -> None:
    now = [1000.0]
    monkeypatch.setattr(compiler_pages.time, "monotonic", lambda: now[0])
    compiler_pages.compiler_ran()
    compiler_pages.settle()
    assert released == [], "the compiler ran just now"
    now[0] += compiler_pages.QUIET_S
    compiler_pages.settle()
    assert released == [compiler_pages.LIBRARY]
    now[0] += 10 * compiler_pages.QUIET_S
    compiler_pages.settle()
    assert released == [compiler_pages.LIBRARY], "nothing compiled since: nothing more to hand back"


def test_a_numba_compile_counts_as_the_compiler_running(released: list[str]) -> None:
    if compiled.kernels() is None:
        pytest.skip("numba cannot load here")
    compiler_pages.hand_back()
    assert not compiler_pages._state["ran"]
    numba.njit(lambda x: x + 1)(1)
    assert compiler_pages._state["ran"]


@pytest.mark.skipif(not pagemap_readable(), reason="no readable pagemap here (Linux's, unhardened)")
def test_after_the_hand_back_the_kernels_run_on_and_give_the_same_bits() -> None:
    rng = np.random.default_rng(0)
    raw = blocks.random_blocks(rng, "Q4_0", 64, 256)
    pack = blocks.pack_block_linear(raw, "Q4_0", 256)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    before = pack.forward(x)
    assert compiler_pages.hand_back() > 0, "compiling and loading the kernels read LLVM's pages in"
    np.testing.assert_array_equal(pack.forward(x), before)
