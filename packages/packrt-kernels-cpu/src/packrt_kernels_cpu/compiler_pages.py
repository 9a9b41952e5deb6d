"""The JIT compiler's pages, handed back once the kernels it made are in place.

numba's kernels and the IR tiles are compiled (or loaded from the disk cache) by LLVM, whose library
(``libllvmlite``, ~150 MiB of code and read-only data) is read into the resident set while it works: ~67 MiB of
it after a SmolLM2-135M generation's kernels, as much as the model's own quantized weights. Nothing reads it while
the kernels run. So the first kernel launch :data:`QUIET_S` after the compiler last ran drops those pages
(:func:`packrt_base.pages.release_library_pages`: only pages that still hold the file's bytes, so nothing LLVM
holds in memory is lost); a later compile reads back the pages it needs from the page cache. SmolLM2-135M Q4_1
after a 64-token generation: 295 MiB resident before, 228 after, ~3.5 MiB read back by the next generation.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Final

from packrt_base.pages import release_library_pages

QUIET_S: Final = 1.0  # how long the compiler must have been idle before its pages go
LIBRARY: Final = "libllvmlite"  # the mapped file the compiler's code is in
_lock = threading.Lock()
_state = {"ran": False, "last": 0.0}


def compiler_ran() -> None:
    """Note that LLVM just compiled or loaded something (a numba signature, a module of tiles)."""
    _state["ran"], _state["last"] = True, time.monotonic()


def settle() -> None:
    """Hand the compiler's pages back when it ran and has been idle for :data:`QUIET_S`: asked at each kernel
    launch, so it reads one flag while nothing compiles."""
    if _state["ran"] and time.monotonic() - float(_state["last"]) >= QUIET_S:
        hand_back()


def hand_back() -> int:
    """Drop the compiler's pages from the resident set now (see the module docstring); the bytes dropped."""
    with _lock:
        _state["ran"] = False
        return release_library_pages(LIBRARY)


def listen_to_numba() -> None:
    """Note each of numba's compiles and cache loads (they hold its compiler lock), from now on."""
    from numba.core import event

    class _CompilerLock(event.Listener):  # type: ignore[misc,unused-ignore]
        def on_start(self, _: Any) -> None:
            compiler_ran()

        def on_end(self, _: Any) -> None:
            compiler_ran()

    register: Any = event.register  # untyped in numba
    register("numba:compiler_lock", _CompilerLock())


__all__ = ["LIBRARY", "QUIET_S", "compiler_ran", "hand_back", "listen_to_numba", "settle"]
