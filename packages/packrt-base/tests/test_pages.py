"""Handing a mapped file's pages back after a copy: the resident set falls, what a view reads never changes, an
edit made through a writeable view survives, and memory of an array's own is never touched."""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packrt_base.pages import (
    PAGE,
    mapping_under,
    pagemap_readable,
    release_library_pages,
    release_pages,
    release_unserved_pages,
)

pytestmark = pytest.mark.skipif(not pagemap_readable(), reason="no readable pagemap here (Linux's, unhardened)")

PAGES = 16


def resident(view: np.ndarray) -> np.ndarray:
    """Whether each page under ``view`` (whole or not) is in the resident set, from the pagemap (bit 63)."""
    start = int(view.__array_interface__["data"][0]) // PAGE
    end = -(-(int(view.__array_interface__["data"][0]) + view.nbytes) // PAGE)
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(start * 8)
        entries = np.frombuffer(pagemap.read((end - start) * 8), np.uint64)
    return (entries >> np.uint64(63)).astype(bool)


@pytest.fixture
def content() -> bytes:
    return np.random.default_rng(7).integers(0, 256, PAGES * PAGE, dtype=np.uint8).tobytes()


@pytest.fixture
def mapped(tmp_path: Path, content: bytes) -> np.ndarray:
    """The whole file as uint8, a view of a private (copy-on-write) mapping, every page read once."""
    path = tmp_path / "weights.bin"
    path.write_bytes(content)
    with open(path, "rb") as handle:
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    view = np.frombuffer(mapping, np.uint8)
    view.sum()  # fault every page in, as a pack's copy does
    return view  # the mapping closes when the last view goes


def test_a_view_of_a_mapping_finds_its_mapping_and_an_array_of_its_own_has_none(mapped: np.ndarray) -> None:
    assert isinstance(mapping_under(mapped[PAGE:]), mmap.mmap)
    assert mapping_under(np.zeros(4)) is None


def test_released_pages_leave_the_resident_set_and_read_back_the_files_bytes(
    mapped: np.ndarray, content: bytes
) -> None:
    assert resident(mapped).all()
    assert release_pages(mapped) == PAGES * PAGE
    assert not resident(mapped).any(), "every whole page under the view was dropped"
    assert mapped.tobytes() == content, "a dropped page faults back in with the file's bytes"


def test_an_edit_written_through_the_view_survives_the_release(mapped: np.ndarray, content: bytes) -> None:
    mapped[3 * PAGE + 5] ^= 0xFF  # copy-on-write: page 3 is now memory of the process's own
    released = release_pages(mapped)
    assert released == (PAGES - 1) * PAGE, "the edited page is kept, the pages around it dropped"
    assert resident(mapped)[3] and not resident(mapped)[2] and not resident(mapped)[4]
    expected = bytearray(content)
    expected[3 * PAGE + 5] ^= 0xFF
    assert mapped.tobytes() == bytes(expected)


def test_pages_a_view_shares_with_its_neighbours_are_kept(mapped: np.ndarray) -> None:
    middle = mapped[PAGE + 100 : 5 * PAGE - 100]  # pages 1 and 4 hold bytes of the views on either side
    assert release_pages(middle) == 2 * PAGE
    assert list(resident(mapped)[:6]) == [True, True, False, False, True, True]


def test_a_view_covering_no_whole_page_releases_nothing(mapped: np.ndarray) -> None:
    assert release_pages(mapped[PAGE + 1 : 2 * PAGE + 10]) == 0
    assert resident(mapped).all()


def test_an_array_of_its_own_is_left_alone() -> None:
    own = np.arange(4 * PAGE, dtype=np.uint8)
    assert release_pages(own) == 0
    np.testing.assert_array_equal(own, np.arange(4 * PAGE, dtype=np.uint8))


def test_pages_already_dropped_are_not_counted_twice(mapped: np.ndarray) -> None:
    assert release_pages(mapped[: 4 * PAGE]) == 4 * PAGE
    assert release_pages(mapped[: 4 * PAGE]) == 0


@settings(max_examples=40, deadline=None)
@given(
    start=st.integers(0, PAGES * PAGE - 1),
    length=st.integers(0, PAGES * PAGE),
    edits=st.lists(st.integers(0, PAGES * PAGE - 1), max_size=4),
)
def test_any_slice_releases_exactly_its_whole_unedited_pages_and_reads_the_same(
    tmp_path_factory: pytest.TempPathFactory, start: int, length: int, edits: list[int]
) -> None:
    content = np.random.default_rng(start).integers(0, 256, PAGES * PAGE, dtype=np.uint8)
    path = tmp_path_factory.mktemp("pages") / "weights.bin"
    path.write_bytes(content.tobytes())
    with open(path, "rb") as handle:
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    whole = np.frombuffer(mapping, np.uint8)
    whole.sum()
    expected = content.copy()
    for at in edits:
        whole[at] ^= 0x5A
        expected[at] ^= 0x5A
    view = whole[start : start + length]
    first, last = -(-start // PAGE), (start + view.nbytes) // PAGE
    edited = {at // PAGE for at in edits}
    kept = sum(1 for page in range(first, last) if page in edited)
    assert release_pages(view) == max(0, last - first - kept) * PAGE
    np.testing.assert_array_equal(whole, expected)


def test_pages_under_a_kept_view_stay_whole_or_in_part(mapped: np.ndarray) -> None:
    kept = mapped[2 * PAGE + 10 : 4 * PAGE + 10]  # touches pages 2, 3 and 4
    assert release_pages(mapped, keep=[kept]) == (PAGES - 3) * PAGE
    assert list(resident(mapped)[:6]) == [False, False, True, True, True, False]


def test_what_a_model_still_serves_keeps_its_pages_and_the_rest_of_the_file_goes(
    mapped: np.ndarray, content: bytes
) -> None:
    norm = mapped[5 * PAGE : 5 * PAGE + 64]  # a small tensor the model still reads from the file
    own = np.ones(3 * PAGE, np.uint8)  # memory of the model's own: no file, nothing to do
    assert release_unserved_pages([norm, own]) == (PAGES - 1) * PAGE
    assert resident(mapped).tolist() == [page == 5 for page in range(PAGES)]
    assert mapped.tobytes() == content
    assert release_unserved_pages([own]) == 0


def _library(tmp_path: Path, content: bytes, prot: int) -> tuple[str, mmap.mmap, np.ndarray]:
    """A file mapped privately with ``prot`` as a loader maps a library's segments, every page read once: its
    unique name, the mapping and a uint8 view of it."""
    name = f"libpackrt-test-{tmp_path.name}.so"
    path = tmp_path / name
    path.write_bytes(content)
    with open(path, "rb" if prot == mmap.PROT_READ else "r+b") as handle:
        mapping = mmap.mmap(handle.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=prot)
    view = np.frombuffer(mapping, np.uint8)
    view.sum()
    return name, mapping, view


def test_a_librarys_unwritten_pages_leave_the_resident_set_and_read_back_its_bytes(
    tmp_path: Path, content: bytes
) -> None:
    name, _, view = _library(tmp_path, content, mmap.PROT_READ)
    assert resident(view).all()
    assert release_library_pages(name) == PAGES * PAGE
    assert not resident(view).any()
    assert view.tobytes() == content, "a dropped page of code faults back in with the file's bytes"


def test_a_library_page_its_loader_wrote_keeps_what_was_written(tmp_path: Path, content: bytes) -> None:
    """A loader relocates some pages of a library (copies of their own) and then makes them read-only: those
    hold what was written, and dropping them would hand the file's unrelocated bytes back."""
    name, mapping, view = _library(tmp_path, content, mmap.PROT_READ | mmap.PROT_WRITE)
    mapping[3] = (content[3] + 1) % 256  # page 0 now a copy of its own
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(view.__array_interface__["data"][0], PAGES * PAGE, mmap.PROT_READ) == 0
    assert release_library_pages(name) == (PAGES - 1) * PAGE
    assert resident(view)[0] and not resident(view)[1:].any()
    assert view[3] == (content[3] + 1) % 256 and view[PAGE:].tobytes() == content[PAGE:]


def test_writeable_and_shared_mappings_of_a_library_and_unknown_names_release_nothing(
    tmp_path: Path, content: bytes
) -> None:
    name, _, view = _library(tmp_path, content, mmap.PROT_READ | mmap.PROT_WRITE)
    assert release_library_pages(name) == 0 and resident(view).all()
    path = tmp_path / name
    with open(path, "rb") as handle:
        shared = np.frombuffer(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)
    shared.sum()
    assert release_library_pages(name) == 0 and resident(shared).all()
    assert release_library_pages("no-library-by-this-name") == 0
