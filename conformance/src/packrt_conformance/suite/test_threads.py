"""Loads and calls on several threads (capability 'threads'): what a load that commits while module calls
run on other threads lets those calls see.

The pages describe no threads; an implementation that promises these rules declares 'threads' (packrt
does: a load is published to the calls on other threads as one change). Every check is on values, never
on time: a call held at a known point by an event sees the load or not, and its result must be one
version of the weights. The only bounded waits are the ones below: ``WAIT`` turns a hang into a failure,
and ``LAND`` is how long a load that does not wait for a call in flight is given to land before the call
goes on (a load that does wait is simply still waiting; either way the result is checked).
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import numpy as np
import pytest

from packrt_conformance.adapter import Adapter

WAIT = 10.0  # seconds of running time an event or a thread may take before the test calls it a hang
LAND = 0.25  # seconds a load that ignores the call in flight is given to land (the result is what is checked)
X = np.array([[1.0, -2.0]])
KEYS = ("0.weight", "0.bias", "2.weight", "2.bias")


def _within_wait(step: Callable[[float], bool]) -> bool:
    """Call ``step(slice)`` (a wait of at most ``slice`` seconds that says whether it is done) until it is
    done or ``WAIT`` seconds of running time have passed. A slice that took far longer than asked (the
    process was stopped meanwhile, as a suspended job is) counts as asked, so a pause never reads as a hang."""
    spent = 0.0
    while spent < WAIT:
        start = time.monotonic()
        if step(0.05):
            return True
        spent += min(time.monotonic() - start, 0.1)
    return False


def _version(seed: int) -> dict[str, np.ndarray]:
    """One version of the four weights of ``_model``'s two layers: small integers (exact in float32),
    different in every entry from every other seed's."""
    base = np.arange(1.0, 5.0)
    return {
        "0.weight": (base * seed).reshape(2, 2),
        "0.bias": np.array([seed, -seed], dtype=np.float64),
        "2.weight": (base[::-1] * (seed + 10)).reshape(2, 2),
        "2.bias": np.array([3 * seed, seed + 7], dtype=np.float64),
    }


def _result(weights: Mapping[str, np.ndarray]) -> np.ndarray:
    hidden = X @ weights["0.weight"].T + weights["0.bias"]
    return np.asarray(hidden @ weights["2.weight"].T + weights["2.bias"])


class _Hold:
    """Where a call waits when armed: it says it arrived, then waits to be let go (one call per arming)."""

    def __init__(self) -> None:
        self.armed = False
        self.arrived, self.go = threading.Event(), threading.Event()

    def arm(self) -> None:
        self.arrived.clear()
        self.go.clear()
        self.armed = True

    def pass_through(self) -> None:
        if not self.armed:
            return
        self.armed = False
        self.arrived.set()
        if not _within_wait(self.go.wait):
            raise AssertionError("a call held between the two layers was never let go")


def _model(impl: Adapter, seed: int = 1, **load: Any) -> tuple[Any, _Hold]:
    """Sequential(Linear(2, 2), a pass-through module that can hold a call, Linear(2, 2)), loaded with
    version ``seed`` (``load``: load_state_dict's keywords)."""
    hold = _Hold()

    class Between(impl.nn.Module):  # type: ignore[name-defined,misc]
        def forward(self, x: Any) -> Any:
            hold.pass_through()
            time.sleep(0)  # hands the interpreter to another thread between the layers (a yield, not a wait)
            return x

    model = impl.nn.Sequential(impl.linear(2, 2), Between(), impl.linear(2, 2))
    model.load_state_dict(_checkpoint(impl, seed), **load)
    return model, hold


def _checkpoint(impl: Adapter, seed: int) -> dict[str, Any]:
    return {key: impl.tensor(value) for key, value in _version(seed).items()}


class _Thread:
    """``target`` run on a thread of its own; :meth:`result` gives its value or raises what it raised."""

    def __init__(self, target: Callable[[], Any]) -> None:
        self._out: list[Any] = []
        self._err: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(target,), daemon=True)
        self._thread.start()

    def _run(self, target: Callable[[], Any]) -> None:
        try:
            self._out.append(target())
        except BaseException as err:  # handed to the test's thread by result()
            self._err.append(err)

    def _finished(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def result(self) -> Any:
        if not _within_wait(self._finished):
            raise AssertionError(f"a thread did not finish within {WAIT} s (a hang)")
        if self._err:
            raise self._err[0]
        return self._out[0]


def _versions_seen(out: np.ndarray, old: int, new: int) -> list[str]:
    """Which tensors of the old and the new version ``out`` was computed from (every mixture tried)."""
    found = []
    old_w, new_w = _version(old), _version(new)
    for picks in itertools.product((old, new), repeat=len(KEYS)):
        mixed = {key: (old_w if pick == old else new_w)[key] for key, pick in zip(KEYS, picks, strict=True)}
        if np.allclose(out, _result(mixed), rtol=1e-6, atol=1e-6):
            named = zip(KEYS, picks, strict=True)
            found.append(", ".join(f"{key} of {'old' if pick == old else 'new'}" for key, pick in named))
    return found


def _one_version(out: np.ndarray, old: int, new: int) -> bool:
    return any(np.allclose(out, _result(_version(seed)), rtol=1e-6) for seed in (old, new))


def _assert_one_version(out: np.ndarray, old: int, new: int, what: str) -> None:
    if _one_version(out, old, new):
        return
    seen = _versions_seen(out, old, new)
    raise AssertionError(
        f"{what} mixed two versions of the weights: got {out.tolist()}, "
        f"old {_result(_version(old)).tolist()}, new {_result(_version(new)).tolist()}"
        + (f"; it matches {seen[0]}" if seen else "")
    )


def _call_held_across(impl: Adapter, model: Any, hold: _Hold, load: Callable[[], Any]) -> np.ndarray:
    """A call on another thread runs the first layer and is held; ``load`` runs on a third thread and
    is given ``LAND`` to commit; the call is let go. Returns the call's result (the load is finished)."""
    hold.arm()
    call = _Thread(lambda: impl.to_numpy(model(impl.tensor(X))))
    if not _within_wait(hold.arrived.wait):
        call.result()  # raises what the call raised, or says it hung
        raise AssertionError("the call never reached the module between the layers")
    loader = _Thread(load)
    loader.join(LAND)  # a load that waits for the call is still waiting here; one that does not has landed
    hold.go.set()
    out: np.ndarray = call.result()
    loader.result()
    return out


@pytest.mark.clause("load_state_dict.threads.call-in-flight-sees-one-version")
@pytest.mark.parametrize("assign", [False, True], ids=["copy", "assign"])
def test_a_call_in_flight_while_a_load_commits_computes_from_one_version(impl: Adapter, assign: bool) -> None:
    model, hold = _model(impl, 1)
    out = _call_held_across(impl, model, hold, lambda: model.load_state_dict(_checkpoint(impl, 2), assign=assign))
    _assert_one_version(out, 1, 2, "a call in flight while a load committed")
    np.testing.assert_allclose(impl.to_numpy(model(impl.tensor(X))), _result(_version(2)), rtol=1e-6)


#: (the first load, the load made while a call is in flight): the roads a packing runtime serves by.
PACKED_ROADS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "pack-true": ({"assign": True, "pack": True}, {"assign": True, "pack": True}),
    "packed": ({"assign": True, "weight_residency": "packed"}, {"assign": True, "weight_residency": "packed"}),
    "borrowed-copy": ({"assign": True, "weight_residency": "borrowed"}, {"weight_residency": "borrowed"}),
    "per-call": ({"assign": True, "weight_residency": "per_call"}, {"assign": True, "weight_residency": "per_call"}),
}


@pytest.mark.clause("load_state_dict.threads.packed-call-in-flight-sees-one-version")
@pytest.mark.parametrize("road", list(PACKED_ROADS))
def test_a_call_in_flight_on_packed_or_borrowed_weights_computes_from_one_version(impl: Adapter, road: str) -> None:
    first, second = PACKED_ROADS[road]
    model, hold = _model(impl, 1, **first)
    np.testing.assert_allclose(impl.to_numpy(model(impl.tensor(X))), _result(_version(1)), rtol=1e-6)  # packs
    out = _call_held_across(impl, model, hold, lambda: model.load_state_dict(_checkpoint(impl, 2), **second))
    _assert_one_version(out, 1, 2, f"a call in flight while a {road} load committed")
    np.testing.assert_allclose(impl.to_numpy(model(impl.tensor(X))), _result(_version(2)), rtol=1e-6)


class _HeldCheckpoint(Mapping[str, Any]):
    """A checkpoint whose second value lookup says so and waits (up to ``LAND``) for ``other_done``."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values
        self.lookups = 0
        self.reading, self.other_done = threading.Event(), threading.Event()

    def __getitem__(self, key: str) -> Any:
        self.lookups += 1
        if self.lookups == 2:
            self.reading.set()
            self.other_done.wait(LAND)
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


class _YieldingCheckpoint(Mapping[str, Any]):
    """A checkpoint that hands the interpreter to other threads on every value lookup (as a lazily read
    file may), so calls on other threads run while a load reads it."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        time.sleep(0)  # a yield, not a wait
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _held_version(impl: Adapter, model: Any, old: int, new: int) -> int:
    """The version every weight of ``model`` holds (one of ``old`` / ``new``), or an AssertionError naming
    the mixture."""
    state = model.state_dict()
    got = {key: impl.to_numpy(state[key]).astype(np.float64) for key in KEYS}
    for seed in (old, new):
        if all(np.array_equal(got[key], value) for key, value in _version(seed).items()):
            return seed
    picks = {key: [s for s in (old, new) if np.array_equal(got[key], _version(s)[key])] for key in KEYS}
    raise AssertionError(f"two loads from two threads left a mixture of their checkpoints: {picks} (key: seeds)")


@pytest.mark.clause("load_state_dict.threads.loads-land-whole")
def test_two_loads_from_two_threads_leave_every_weight_of_one_checkpoint(impl: Adapter) -> None:
    model, _ = _model(impl, 1)
    # One load is caught reading its checkpoint (after its first value) while another load runs whole.
    held = _HeldCheckpoint(_checkpoint(impl, 2))
    first = _Thread(lambda: model.load_state_dict(held))
    if not _within_wait(held.reading.wait):
        first.result()
        raise AssertionError("the load never read a second value of its checkpoint")
    second = _Thread(lambda: model.load_state_dict(_checkpoint(impl, 3), assign=True))
    second.join(LAND)  # a load that waits for the first is still waiting here
    held.other_done.set()
    first.result()
    second.result()
    _held_version(impl, model, 2, 3)
    # And loads started together, many rounds over: each round ends on one whole checkpoint.
    for round_ in range(20):
        start = threading.Barrier(2)
        seeds = (4, 5) if round_ % 2 else (5, 4)

        def load(seed: int, start: threading.Barrier = start) -> None:
            start.wait()
            model.load_state_dict(_checkpoint(impl, seed), assign=seed == 5)

        loads = [_Thread(functools.partial(load, seed)) for seed in seeds]
        for thread in loads:
            thread.result()
        _held_version(impl, model, 4, 5)


@pytest.mark.clause("load_state_dict.threads.call-after-load-sees-new")
def test_a_call_on_another_thread_after_a_load_returned_computes_from_the_new_weights(impl: Adapter) -> None:
    model, _ = _model(impl, 1)
    with ThreadPoolExecutor(max_workers=1) as worker:  # one thread that calls the model before and after

        def call() -> np.ndarray:
            future = worker.submit(lambda: impl.to_numpy(model(impl.tensor(X))))
            if not _within_wait(lambda timeout: bool(wait([future], timeout).done)):
                raise AssertionError(f"a call on the worker thread did not finish within {WAIT} s (a hang)")
            out: np.ndarray = future.result()
            return out

        np.testing.assert_allclose(call(), _result(_version(1)), rtol=1e-6)
        model.load_state_dict(_checkpoint(impl, 2))  # a copy load on this thread
        np.testing.assert_allclose(call(), _result(_version(2)), rtol=1e-6)
        _Thread(lambda: model.load_state_dict(_checkpoint(impl, 3), assign=True)).result()  # on a third thread
        np.testing.assert_allclose(call(), _result(_version(3)), rtol=1e-6)


@pytest.mark.clause("load_state_dict.threads.racing-calls-see-one-version")
def test_calls_racing_many_loads_each_compute_from_one_version(impl: Adapter) -> None:
    model, _ = _model(impl, 1)
    stop = threading.Event()
    calls = [0, 0]

    def keep_calling(me: int) -> list[np.ndarray]:
        seen: list[np.ndarray] = []
        while not stop.is_set() and len(seen) < 5000:
            seen.append(impl.to_numpy(model(impl.tensor(X))))
            calls[me] += 1
        return seen

    callers = [_Thread(functools.partial(keep_calling, me)) for me in range(2)]
    loads, spent = 0, 0.0  # at least 100 loads and 200 calls, unless that takes WAIT seconds of running time
    try:
        while (loads < 100 or sum(calls) < 200) and spent < WAIT:
            start = time.monotonic()
            checkpoint = _YieldingCheckpoint(_checkpoint(impl, 1 + loads % 2))
            model.load_state_dict(checkpoint, assign=loads % 4 >= 2)  # versions 1, 2 by copy, then by assign
            loads += 1
            time.sleep(0)  # lets the callers in between loads
            spent += min(time.monotonic() - start, 0.1)  # a stopped process's pause does not count
    finally:
        stop.set()
    results = [out for caller in callers for out in caller.result()]
    mixed = [out for out in results if not _one_version(out, 1, 2)]
    if mixed:
        what = f"{len(mixed)} of {len(results)} calls racing {loads} loads; the first"
        _assert_one_version(mixed[0], 1, 2, what)
