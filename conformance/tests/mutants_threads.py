"""Per-sentence mutants of the concurrency clauses (capability 'threads', issue 45).

Each is packrt with one rule of a load committing beside calls on other threads broken, through the module
classes its adapter hands out (see ``mutants.py``): a call that does not count itself in flight, a load that
commits key by key, a layer that serves another thread from a copy it never refreshes. Single-threaded, each
behaves as packrt does. Load one with ``--impl mutants_threads:<Name>`` with this directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from mutants import Mutant, mutant


@mutant(
    "call-not-in-flight",
    {
        "load_state_dict.threads.call-in-flight-sees-one-version",
        "load_state_dict.threads.packed-call-in-flight-sees-one-version",
        "load_state_dict.threads.racing-calls-see-one-version",
    },
    "test_threads",
)
class CallNotInFlight:
    """A top-level module call does not count itself as running, so a load on another thread commits
    while the call is between its layers (it then finishes on the new weights)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from packrt_core import publication

        me = publication.reader()
        if me.depth:  # a nested call: its top-level call decides
            return super().__call__(*args, **kwargs)  # type: ignore[misc]
        me.parked = True  # the fault: a publication looks past a parked call
        try:
            return super().__call__(*args, **kwargs)  # type: ignore[misc]
        finally:
            me.parked = False


@mutant(
    "load-commits-key-by-key",
    {"load_state_dict.threads.loads-land-whole", "load_state_dict.threads.racing-calls-see-one-version"},
    "test_threads",
)
class LoadCommitsKeyByKey:
    """A load binds its checkpoint one key at a time, each key a load of its own: two loads from two threads
    interleave, and a call that starts between two keys sees some of each version (a call already in flight
    is still waited for)."""

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False, **kw: Any
    ) -> Any:
        result = None
        for key in list(state_dict):  # the fault: one publication per key
            result = super().load_state_dict({key: state_dict[key]}, False, assign, **kw)  # type: ignore[misc]
        return result


@mutant("stale-copy-per-thread", {"load_state_dict.threads.call-after-load-sees-new"}, "test_threads")
class StaleCopyPerThread:
    """A Linear called on a thread other than the main one serves from a copy of its weights taken at its
    first call there, which no later load refreshes."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        import numpy as np

        import packrt

        if not isinstance(self, packrt.nn.Linear) or threading.current_thread() is threading.main_thread():
            return super().forward(*args, **kwargs)  # type: ignore[misc]
        copies = self.__dict__.setdefault("_copies_per_thread", {})
        mine = copies.setdefault(  # the fault: taken once per thread, never refreshed
            threading.current_thread(),
            (self.weight.numpy().copy(), None if self.bias is None else self.bias.numpy().copy()),
        )
        out = args[0].numpy() @ mine[0].T
        return packrt.from_numpy((out if mine[1] is None else out + mine[1]).astype(np.float32))


MUTANTS: tuple[type[Mutant], ...] = (CallNotInFlight, LoadCommitsKeyByKey, StaleCopyPerThread)
