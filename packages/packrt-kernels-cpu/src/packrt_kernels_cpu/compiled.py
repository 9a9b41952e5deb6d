"""numba's compiled kernels: loaded on the first call only, run on numba's pool under the thread cap.

numba is imported, and the kernels compiled, on the first call (``cache=True`` keeps the machine
code on disk for the next process, in the per-user directory :mod:`.kernel_cache` names, shared by
every venv with the same kernel sources), so ``import packrt`` never pays for either. With
``numba=False`` in the settings (``PACKRT_NUMBA=0``), or where numba cannot load, :func:`enabled` is
False and every caller takes numpy's reference road. The compiled loops live in
:mod:`._numba_kernels`, :mod:`._numba_int8` and :mod:`.conv._numba`, the only modules that import numba.

The pool's size follows the settings' thread cap. numba keeps its thread count per calling thread,
and a thread that never set one runs on the whole pool, so each thread takes the cap at its next
kernel call (:func:`kernels` compares a generation number: one attribute read per call).
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from packrt_kernels_cpu import compiler_pages, openmp, settings, threads

PARALLEL_MIN = 1 << 18  # elements below which a kernel runs on the calling thread only

_state: dict[str, Any] = {}  # "kernels": the namespace, or None where numba cannot load; "pool": its size
_generation = [0]  # bumped at each new thread cap; a thread whose _local.generation differs follows it
_local = threading.local()
_UNLOADED = object()
_load_lock = threading.Lock()


def enabled() -> bool:
    """Whether the compiled road is on: the settings allow numba and it loads."""
    return settings.current().numba and kernels() is not None


def kernels() -> Any:
    """The compiled kernels' namespace (:mod:`._numba_kernels`), loading it on first use; None where numba
    cannot load. The calling thread follows the current thread cap."""
    loaded = _state.get("kernels", _UNLOADED)
    if loaded is _UNLOADED:
        loaded = _load()
    if loaded is not None and getattr(_local, "generation", None) != _generation[0]:
        _follow_cap(loaded)
    return loaded


def pool_size() -> int:
    """Threads in numba's pool under the cap (1 where numba cannot load)."""
    kernels()
    return int(_state["pool"])


def launch(name: str, work: int, *args: Any, loops: Any = None, least: int = PARALLEL_MIN) -> None:
    """Run compiled kernel ``name`` (of :func:`kernels`, or of ``loops``, a :func:`module`) over ``work``
    units: on the pool when the work is ``least`` or more and the pool has two threads or more; else on
    the calling thread (``name_serial``), as always inside :func:`threads.on_this_thread`. A parallel
    region waits for every thread it wakes, and on a busy machine one of them is often descheduled, so
    a small kernel costs less on one thread than on two; a pool of one only adds the region's cost."""
    compiler_pages.settle()  # the JIT compiler's pages go once it has been idle a while
    loaded = kernels() if loops is None else loops
    parallel = work >= least and int(_state["pool"]) > 1 and not threads.serial()
    getattr(loaded, name if parallel else name + "_serial")(*args)


def module(name: str) -> Any:
    """Another module of compiled loops (``packrt_kernels_cpu.conv._numba``, ``._numba_int8``), imported
    once numba is loaded and set up as :func:`kernels` is (OpenMP spin, pool started, the calling
    thread on the thread cap) and under the shared kernel cache. ImportError where numba cannot load:
    those roads have no numpy twin, and their callers choose them only where it does.

    Threads of a pool may ask at once on first use: the import runs once, under a lock, and no
    caller sees the module before it has finished importing."""
    if kernels() is None:
        raise ImportError(f"{name} needs numba, which cannot load here")
    found = _modules.get(name)
    if found is None:
        with _load_lock:
            found = _modules.get(name)
            if found is None:
                from packrt_kernels_cpu import kernel_cache

                with kernel_cache.shared_cache():
                    found = importlib.import_module(name)
                _modules[name] = found
    return found


_modules: dict[str, Any] = {}  # module()'s imports, each complete


def _follow_cap(loaded: Any) -> None:
    """Give the calling thread the current cap (numba's count is per thread; no cap: the whole pool)."""
    cap = settings.current().threads
    loaded.set_num_threads(cap if cap is not None else 1 << 30)  # numba clamps to its pool's size
    _local.generation = _generation[0]
    _state["pool"] = loaded.num_threads()


def _new_cap(before: settings.Settings, after: settings.Settings) -> None:
    if before.threads != after.threads:
        _generation[0] += 1
        loaded = _state.get("kernels")
        if loaded is not None:
            _follow_cap(loaded)


settings.on_change(_new_cap)


def _load() -> Any:
    """Import numba and the kernels (no compilation: each kernel compiles, or loads from the cache, on
    its first call) and start numba's pool, keeping the OpenMP thread counts as they were."""
    with _load_lock:
        if "kernels" in _state:
            return _state["kernels"]
        # numba's pool is OpenMP (libgomp), whose idle workers spin long by default; libgomp reads the
        # waiting policy when it loads, which is below.
        openmp.prefer_short_openmp_spin()
        loaded: Any = None
        try:
            from packrt_kernels_cpu import kernel_cache  # imports numba: only now, on first use

            with kernel_cache.shared_cache():  # cache=True keys on the kernels' source (kernel_cache)
                loaded = importlib.import_module("packrt_kernels_cpu._numba_kernels")
        except (ImportError, OSError):  # no numba here (or its LLVM cannot load): numpy's road only
            loaded = None
        if loaded is not None:
            compiler_pages.listen_to_numba()
            with openmp.thread_counts_kept():
                loaded.num_threads()  # starts numba's pool now, inside the guard
        _state["pool"] = 1 if loaded is None else loaded.num_threads()
        _state["kernels"] = loaded
        return loaded


__all__ = ["PARALLEL_MIN", "enabled", "kernels", "launch", "module", "pool_size"]
