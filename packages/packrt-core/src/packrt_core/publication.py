"""Publication: how a change to a model's weights reaches forwards running on other threads.

Every top-level module call is a *reader*: from the moment it starts until it returns, no change to
weights, packs or residencies lands on another thread. A change is *published*: it waits until the
calls in flight have left (they finish on the old weights), holds new calls off while it commits
(they start on the new weights), and then counts one :func:`generation`. So a forward sees one
version of every weight for its whole run, never a mixture, and never a state a change is halfway
through. Loads, residency changes, ``to()`` / casts, ``to_empty`` and in-place writes to any tensor
a module binds (a Parameter, a Buffer, or a view or alias sharing its lineage) publish.

The reader's cost is what a call pays: one thread-local read, two stores of a counter and two
reads of :data:`GATE`'s ``pending`` flag; a reader only touches a lock when a publication is
pending. A publication waits for every call in flight in the process, of any model (one gate,
not one per model: a module does not know its root), and calls wait while it commits.

A change made *inside* a call (a forward hook that loads, a forward writing a buffer) belongs to
that call: it is not held back, since the call's own thread could never leave to let it through,
and it is not published atomically to other threads' calls.

Nested calls of one thread are part of their top-level call. A call that hands work to another
thread and waits for it there must not call modules on that thread while a publication is
pending (the worker's call would wait for the publication, which waits for the caller).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Reader:
    """A thread's depth of module calls: nonzero while the thread is inside one."""

    __slots__ = ("__weakref__", "depth", "write_begun")

    def __init__(self) -> None:
        self.depth = 0
        self.write_begun = False  # whether the in-place write under way on this thread publishes


class Gate:
    """The process's one publication gate (:data:`GATE`)."""

    __slots__ = ("exclusive_at", "generation", "holds", "owner", "pending")

    def __init__(self) -> None:
        self.pending = False  # a publication waits for calls to leave, or is committing: calls wait
        self.generation = 0  # publications committed so far
        self.owner: int | None = None  # the thread holding the gate (preparing or publishing)
        self.holds = 0  # how many blocks of the owner hold it (they nest)
        self.exclusive_at = 0  # the owner's block that made it exclusive (its end commits)


GATE = Gate()
THREAD = threading.local()  # THREAD.reader: this thread's Reader, made at its first call
_readers: weakref.WeakSet[Reader] = weakref.WeakSet()  # every live thread's Reader
_changes = threading.Condition(threading.Lock())  # calls leaving, publications ending
_serial = threading.Lock()  # one publication at a time


def reader() -> Reader:
    """This thread's Reader (registered at first use; it goes with the thread)."""
    try:
        found: Reader = THREAD.reader
        return found
    except AttributeError:
        made = Reader()
        with _changes:
            _readers.add(made)
        THREAD.reader = made
        return made


def wait_turn(me: Reader) -> None:
    """A top-level call found a publication pending (its depth already says it is inside): step
    back out, wait for the publication to end, and come back in. The publishing thread's own calls
    go straight through."""
    if GATE.owner == threading.get_ident():
        return
    depth = me.depth
    me.depth = 0
    with _changes:
        _changes.notify_all()  # the publication may have counted this call in flight
        while GATE.pending:
            _changes.wait()
        me.depth = depth  # under the lock: a publication starting now counts this call


def left() -> None:
    """A top-level call ended while a publication was pending: let it look again."""
    with _changes:
        _changes.notify_all()


def generation() -> int:
    """A number that moves with every change to bound weights: each publication that commits, and
    each change made inside a call. No publication moves it while a call is in flight, so a cache of
    what the weights serve (a plan) validated at generation ``g`` holds for any call that starts by
    reading ``g``. Packing, which changes no value, does not move it."""
    return GATE.generation


def inside_call() -> bool:
    """Whether this thread is inside a module call (a change it makes is that call's own)."""
    return reader().depth > 0


def begin(exclusive: bool = True) -> bool:
    """Hold the gate: no other thread prepares or publishes a change until :func:`end`. With
    ``exclusive`` (a publication) also wait for calls on other threads to leave and hold new ones off
    until the block that asked ends. Blocks of one thread nest. Returns False, doing nothing, inside
    a module call (see the module doc)."""
    me = reader()
    if me.depth:
        return False
    ident = threading.get_ident()
    if GATE.owner != ident:
        _serial.acquire()
        GATE.owner = ident
    GATE.holds += 1
    if exclusive and not GATE.pending:
        try:
            with _changes:
                GATE.pending = True
                GATE.exclusive_at = GATE.holds
                while any(r.depth for r in list(_readers) if r is not me):
                    _changes.wait()
        except BaseException:  # interrupted while waiting: nothing was changed, let the calls in
            _release(committed=False)
            raise
    return True


def end(begun: bool) -> None:
    """End the block :func:`begin` started (``begun`` is its result): an exclusive block commits
    (counts a generation and lets calls in); the outermost block lets the gate go. A change made
    inside a call (``begun`` False) counts a generation too."""
    if begun:
        _release(committed=True)
    else:
        GATE.generation += 1


def _release(committed: bool) -> None:
    if GATE.pending and GATE.exclusive_at == GATE.holds:
        with _changes:
            if committed:
                GATE.generation += 1
            GATE.pending = False
            GATE.exclusive_at = 0
            _changes.notify_all()
    GATE.holds -= 1
    if not GATE.holds:
        GATE.owner = None
        _serial.release()


@contextmanager
def serialized() -> Iterator[None]:
    """The block prepares a change: no other thread prepares or publishes one meanwhile (calls go on);
    a :func:`publishing` block inside it commits the change."""
    begun = begin(exclusive=False)
    try:
        yield
    finally:
        end(begun)


@contextmanager
def publishing() -> Iterator[None]:
    """The block publishes: no call on another thread is inside while it runs; a call that started
    before it has finished, a call that starts after it sees all of its changes."""
    begun = begin()
    try:
        yield
    finally:
        end(begun)


@contextmanager
def reading() -> Iterator[None]:
    """Read weights as a module call does: no publication lands while the block runs (what a top-level
    call does for its forward; for code that reads several weights outside a call and needs one version)."""
    me = reader()
    depth = me.depth
    try:
        me.depth = depth + 1
        if GATE.pending and not depth:
            wait_turn(me)
        yield
    finally:
        me.depth = depth
        if GATE.pending and not depth:
            left()


@contextmanager
def joining(step: Callable[[], None]) -> Iterator[list[bool]]:
    """Run ``step`` (which must not fail: an attribute store) inside the next publication this thread
    commits with :func:`commit_joined`, so the caller's change lands with it. Yields a one-item list
    that says whether it ran; the caller runs ``step`` itself under :func:`publishing` when it did not."""
    ran = [False]

    def tracked() -> None:
        step()
        ran[0] = True

    joined = _joined()
    joined.append(tracked)
    try:
        yield ran
    finally:
        if tracked in joined:
            joined.remove(tracked)


def _joined() -> list[Callable[[], None]]:
    try:
        steps: list[Callable[[], None]] = THREAD.joined
    except AttributeError:
        steps = THREAD.joined = []
    return steps


def commit_joined() -> None:
    """Run the steps joined on this thread (a committing publication calls this as its last step)."""
    steps = _joined()
    while steps:
        steps.pop(0)()


__all__ = [
    "GATE",
    "THREAD",
    "Gate",
    "Reader",
    "begin",
    "commit_joined",
    "end",
    "generation",
    "inside_call",
    "joining",
    "left",
    "publishing",
    "reader",
    "reading",
    "serialized",
    "wait_turn",
]
