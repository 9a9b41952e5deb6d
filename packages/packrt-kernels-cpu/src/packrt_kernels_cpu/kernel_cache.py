"""Where packrt's compiled kernels are kept between processes: numba's on-disk cache, shared across venvs.

numba compiles each kernel signature on its first call (seconds for the whole set) and, with
``cache=True``, keeps the machine code on disk. numba's own default keeps it next to the source
(``__pycache__`` in site-packages, which a system or read-only install cannot write) and keys it
by the source file's path and modification time, so every venv compiles everything again. packrt
keys it by the *content* of the kernel's source file and of the package's other sources (a kernel
inlines what it calls from sibling modules) instead, under one directory per user:

- ``PACKRT_CACHE_DIR`` (environment) is the root of packrt's caches; the kernels go to its
  ``numba/`` folder. Unset, the root is ``$XDG_CACHE_HOME/packrt`` or ``~/.cache/packrt``.
- ``NUMBA_CACHE_DIR`` set by the user wins: numba's own locator is used as numba documents it.
- Where packrt's directory cannot be written, numba's default places are tried (next to the
  source, then numba's per-user directory), and without any the kernels compile in memory only.

Two venvs with the same packrt-kernels-cpu sources (any install path, any file times) share one
cache entry per kernel signature; numba keys each entry by the signature and the CPU it was
compiled for, and drops an index written by another numba version. ``packrt warmup`` fills it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from numba.core import caching, config

_NUMBA_FALLBACKS = ("InTreeCacheLocator", "UserWideCacheLocator")  # numba's own, in its order


def cache_root() -> Path:
    """The root of packrt's caches: ``PACKRT_CACHE_DIR``, else ``$XDG_CACHE_HOME/packrt`` or ``~/.cache/packrt``."""
    chosen = os.environ.get("PACKRT_CACHE_DIR")
    if chosen:
        return Path(chosen).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "packrt"


def kernel_cache_dir() -> Path:
    """The directory compiled kernels are written to and read from (``NUMBA_CACHE_DIR`` when the user set it)."""
    if config.CACHE_DIR:  # type: ignore[attr-defined]
        return Path(config.CACHE_DIR)  # type: ignore[attr-defined]
    return cache_root() / "numba"


_PACKAGE = Path(__file__).resolve().parent


def source_hash(path: str | Path, package: Path = _PACKAGE) -> str:
    """The key of a kernel source file's cache entries: its content and, for a file inside ``package``,
    the content of every source of that package. A compiled kernel carries the code of the functions it
    calls from sibling modules (the plan's epilogue inlines :mod:`._numba_kernels`' activations), so an
    entry keyed by its own file alone would go on serving the old machine code after a sibling changed."""
    file = Path(path).resolve()
    digest = hashlib.sha256(file.read_bytes())
    if file.is_relative_to(package):
        for source in sorted(package.rglob("*.py")):
            digest.update(source.relative_to(package).as_posix().encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()[:20]


_content_hash = functools.cache(source_hash)


# numba offers no public base for a cache locator; these two are what its own locators derive from
class SharedCacheLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):  # noqa: SLF001
    """numba cache locator keyed by :func:`source_hash` (content), not by a path or a modification time."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        stem = Path(py_file).stem
        self._cache_path = str(kernel_cache_dir() / f"{stem}-{_content_hash(py_file)}")

    def get_cache_path(self) -> str:
        """``<kernel_cache_dir()>/<module>-<content hash>``: one folder per version of the kernel sources."""
        return self._cache_path

    def get_source_stamp(self) -> str:
        """The source's content hash: an entry stays valid wherever and whenever the same sources are installed."""
        return _content_hash(self._py_file)


@contextlib.contextmanager
def shared_cache() -> Iterator[None]:
    """While kernels are defined (their modules imported) in the block, their ``cache=True`` uses
    :class:`SharedCacheLocator`, falling back to numba's own places; other numba code is unaffected
    (numba picks a function's locator when it is decorated). A user's ``NUMBA_CACHE_DIR`` is left to numba."""
    if config.CACHE_DIR or not hasattr(config, "CACHE_LOCATOR_CLASSES"):  # type: ignore[attr-defined]
        yield  # the user's directory, or a numba without the setting: numba's own places
        return
    previous = config.CACHE_LOCATOR_CLASSES
    ours = f"{__name__}.{SharedCacheLocator.__name__}"
    config.CACHE_LOCATOR_CLASSES = ",".join((ours, *_NUMBA_FALLBACKS))
    try:
        yield
    finally:
        config.CACHE_LOCATOR_CLASSES = previous


def cache_counts(namespace: Any) -> tuple[int, int]:
    """(signatures compiled, signatures loaded from the disk cache) by the numba dispatchers in ``namespace``
    in this process: numba's own per-dispatcher cache statistics, summed."""
    misses = hits = 0
    for value in vars(namespace).values():
        stats = getattr(value, "stats", None)
        if stats is not None and hasattr(value, "py_func"):
            misses += sum(stats.cache_misses.values())
            hits += sum(stats.cache_hits.values())
    return misses, hits


def compiled_signatures(namespace: Any) -> dict[str, int]:
    """Name -> number of compiled signatures of every numba dispatcher in ``namespace`` (a module or
    the kernels' namespace), loaded from the cache or compiled in this process."""
    found = {}
    for name, value in vars(namespace).items():
        signatures = getattr(value, "signatures", None)
        if signatures is not None and hasattr(value, "py_func"):
            found[name] = len(signatures)
    return found


__all__ = [
    "SharedCacheLocator",
    "cache_counts",
    "cache_root",
    "compiled_signatures",
    "kernel_cache_dir",
    "shared_cache",
]
