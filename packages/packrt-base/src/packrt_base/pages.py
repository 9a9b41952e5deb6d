"""Handing a mapped file's pages back once a copy of them is what serves.

A checkpoint loaded with ``mmap=True`` is mapped privately (copy on write): its arrays are views of the file's
pages. An owned pack copies such a view, and from then on the pages are read by nobody; but a page once read
stays in the process's resident set for as long as the mapping lives, so a packed model would hold its weights
twice (the pack and the file's pages) until the file is closed, which may be never (a tokenizer, a tied weight or
a borrowed buffer keeps it open). :func:`release_pages` drops them: the kernel keeps them in its page cache, and
a later read of the view faults them back in with the same bytes.

Only pages that still hold the file's bytes are dropped. A page written through a writeable view holds the
edit in memory of its own (an anonymous copy-on-write page); dropping it would throw the edit away and hand the
file's bytes back in its place, so such pages are left resident (:func:`release_library_pages` does the same for
a shared library's code once nobody runs it). Linux's ``/proc/self/pagemap`` says which page is which (bit 63:
present, bit 61: file page; both readable without privileges since Linux 4.2). Where the
pagemap cannot be read (another OS, a hardened kernel) nothing is dropped: the pages stay as before, so the
answer is always correct, and memory is only what it was without the call.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import sys
from collections.abc import Iterable
from typing import Any, Final

import numpy as np

PAGE: Final = mmap.PAGESIZE
_PRESENT: Final = np.uint64(1 << 63)
_FILE_PAGE: Final = np.uint64(1 << 61)


def mapping_under(array: Any) -> mmap.mmap | None:
    """The :class:`mmap.mmap` an array is a view of (through its ``.base`` chain and the memoryviews on it), or
    None for memory of its own."""
    obj = array
    for _ in range(64):
        if isinstance(obj, mmap.mmap):
            return obj
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
        if obj is None:
            return None
    return None


def release_pages(view: Any, keep: Iterable[Any] = ()) -> int:
    """Drop from the resident set the whole pages under ``view`` that a private file mapping maps and that
    still hold the file's bytes, except pages under any array of ``keep``; return the bytes dropped (0 when
    ``view`` is not a view of a mapped file, covers no whole page, or the pagemap cannot be read).

    Call it after copying ``view`` into memory of its own, when the copy is what will be read (``keep``: views
    of the same file that are still served from its pages). ``view`` stays valid and equal to what it was: a
    dropped page is read back from the file on the next access, and a page written through a writeable view
    (an edit) is kept. Pages that ``view`` shares with its neighbours at either end are kept, since a neighbour
    may still be served from them.
    """
    mapping = mapping_under(view)
    if mapping is None or not sys.platform.startswith("linux"):
        return 0
    array = np.asarray(view)
    start = int(array.__array_interface__["data"][0])
    base = int(np.frombuffer(mapping, np.uint8).__array_interface__["data"][0])
    low = -(-start // PAGE) * PAGE
    high = (start + array.nbytes) // PAGE * PAGE
    if high <= low:
        return 0
    flags = _page_flags(low, (high - low) // PAGE)
    if flags is None:
        return 0
    droppable = (flags & _PRESENT).astype(bool) & (flags & _FILE_PAGE).astype(bool)
    for kept in keep:  # pages under a kept view, whole or in part, stay
        at, size = int(np.asarray(kept).__array_interface__["data"][0]), int(np.asarray(kept).nbytes)
        first, end = max(at // PAGE, low // PAGE), min(-(-(at + size) // PAGE), high // PAGE)
        if first < end:
            droppable[first - low // PAGE : end - low // PAGE] = False
    clean = np.flatnonzero(droppable)
    if clean.size == 0:
        return 0
    # madvise per run of consecutive clean pages: an edited page between two runs stays
    cuts = np.flatnonzero(np.diff(clean) != 1) + 1
    released = 0
    for run in np.split(clean, cuts):
        page, count = int(run[0]), int(run.size)
        mapping.madvise(mmap.MADV_DONTNEED, low - base + page * PAGE, count * PAGE)
        released += count * PAGE
    return released


def release_unserved_pages(served: Iterable[Any]) -> int:
    """For each file mapping under an array of ``served`` (the views a model still reads), drop the mapping's
    pages that hold the file's bytes and lie under none of ``served``; return the bytes dropped.

    Once a model's packed layers have copied their weights, the file's pages are read by nobody but may be
    back in the resident set: reading a small tensor (a norm, a bias) maps the whole cached folio around it
    (up to 2 MiB), neighbours' pages included. One call after the packs (and the serving plan) are built
    hands all of them back at once; the pages of ``served`` stay."""
    views, mappings = [], {}
    for view in served:  # arrays of memory of their own (or a device's) map no file: nothing to do for them
        mapping = mapping_under(view)
        if mapping is not None:
            views.append(view)
            mappings[id(mapping)] = mapping
    return sum(release_pages(np.frombuffer(m, np.uint8), keep=views) for m in mappings.values())


def release_library_pages(name: str) -> int:
    """Drop from the resident set the pages of the shared libraries mapped in this process whose path holds
    ``name`` (``"libllvmlite"``) that still hold the file's bytes: their code and read-only data, read back from the
    page cache when next run. Pages a library's loader wrote (its relocations, copies on write of their own) and
    every writeable mapping stay, so nothing the library holds in memory is lost. Returns the bytes dropped (0
    off Linux or where the pagemap cannot be read).

    For a library that is run in bursts and then not at all for long: a JIT compiler's, once what it compiled
    is in place."""
    if not sys.platform.startswith("linux") or not name:
        return 0
    try:
        with open("/proc/self/maps") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return 0
    released = 0
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or name not in fields[5] or fields[1][1] != "-" or fields[1][3] != "p":
            continue  # another file, a writeable mapping, or a shared one
        low, high = (int(bound, 16) for bound in fields[0].split("-"))
        flags = _page_flags(low, (high - low) // PAGE)
        if flags is not None:
            released += _drop_clean(low, flags)
    return released


def _drop_clean(low: int, flags: np.ndarray[Any, np.dtype[np.uint64]]) -> int:
    """madvise(MADV_DONTNEED) each run of present file pages (by ``flags``) of the private mapping from ``low``."""
    clean = np.flatnonzero((flags & _PRESENT).astype(bool) & (flags & _FILE_PAGE).astype(bool))
    if clean.size == 0:
        return 0
    libc = _libc()
    dropped = 0
    for run in np.split(clean, np.flatnonzero(np.diff(clean) != 1) + 1):
        if libc.madvise(low + int(run[0]) * PAGE, int(run.size) * PAGE, mmap.MADV_DONTNEED) == 0:
            dropped += int(run.size) * PAGE
    return dropped


@functools.cache
def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise.restype = ctypes.c_int
    return libc


def pagemap_readable() -> bool:
    """Whether this process can tell its resident pages apart (Linux, a readable pagemap that shows a page just
    written as present): where it cannot, :func:`release_pages` drops nothing."""
    if not sys.platform.startswith("linux"):
        return False
    probe = np.ones(2 * PAGE, np.uint8)
    start = int(probe.__array_interface__["data"][0])
    flags = _page_flags(-(-start // PAGE) * PAGE, 1)
    return flags is not None and bool(flags[0] & _PRESENT)


def _page_flags(address: int, pages: int) -> np.ndarray[Any, np.dtype[np.uint64]] | None:
    """The pagemap entry of each page from ``address`` on (one uint64 each), or None where it cannot be read."""
    try:
        fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.pread(fd, pages * 8, address // PAGE * 8)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) != pages * 8:
        return None
    return np.frombuffer(raw, np.uint64)
