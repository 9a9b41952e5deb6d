"""A packed layer whose weights were views of a mapped checkpoint hands the file's pages back once its pack is
built: the pack is the copy that serves. Borrowed and per-call layers read the pages, so they keep them, and so
does every array a model still holds when its serving plan hands back the rest."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest

import packrt_core as prt
from packrt_base.pages import pagemap_readable
from packrt_core import nn

pytestmark = pytest.mark.skipif(not pagemap_readable(), reason="no readable pagemap here (Linux's, unhardened)")

PAGE = mmap.PAGESIZE


def resident_pages(view: np.ndarray) -> int:
    """How many of the whole pages under ``view`` are in the resident set (pagemap bit 63)."""
    start = -(-int(view.__array_interface__["data"][0]) // PAGE)
    end = (int(view.__array_interface__["data"][0]) + view.nbytes) // PAGE
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(start * 8)
        entries = np.frombuffer(pagemap.read((end - start) * 8), np.uint64)
    return int((entries >> np.uint64(63)).sum())


def mapped_linear(tmp_path: Path, residency: str) -> tuple[nn.Linear, np.ndarray, np.ndarray]:
    """A Linear(256, 128) bound to views of a privately mapped file (as a load with mmap=True binds them): the
    layer, its weight's view, and the weight's values."""
    weight = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)
    (tmp_path / "w.bin").write_bytes(weight.tobytes())
    with open(tmp_path / "w.bin", "rb") as handle:
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    view = np.frombuffer(mapping, np.float32).reshape(128, 256)
    with prt.meta_init():
        layer = nn.Linear(256, 128, bias=False)
    layer.load_state_dict({"weight": prt.from_numpy(view)}, assign=True, weight_residency=residency)
    return layer, view, weight


def test_a_packed_layer_hands_its_mapped_weights_pages_back_once_packed(tmp_path: Path) -> None:
    layer, view, weight = mapped_linear(tmp_path, "packed")
    view.sum()  # every page read, as the pack's copy reads them
    x = prt.from_numpy(np.ones((2, 256), np.float32))
    out = layer(x).numpy()
    assert resident_pages(view) == 0, "the pack serves: the file's pages left the resident set"
    np.testing.assert_allclose(out, np.ones((2, 256), np.float32) @ weight.T, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(view, weight)


@pytest.mark.parametrize("residency", ["borrowed", "per_call"])
def test_a_layer_serving_from_the_files_pages_keeps_them(tmp_path: Path, residency: str) -> None:
    layer, view, _ = mapped_linear(tmp_path, residency)
    layer(prt.from_numpy(np.ones((2, 256), np.float32)))
    assert resident_pages(view) == view.nbytes // PAGE
