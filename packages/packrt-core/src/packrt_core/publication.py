"""Publication: how a change to a model's weights reaches forwards running on other threads.

Every top-level module call is a *reader*: from the moment it starts until it returns, no change to
weights, packs or residencies lands on another thread. A change is *published*: it waits until the
calls in flight have left (they finish on the old weights), holds new calls off while it commits
(they start on the new weights), and then counts one :func:`generation`. So a forward sees one
version of every weight for its whole run, never a mixture, and never a state a change is halfway
through. Loads, residency changes, ``to()`` / casts, ``to_empty`` and in-place writes to any tensor
a module binds (a Parameter, a Buffer, or a view or alias sharing its lineage) publish.

What a call pays is a count on its own thread's :class:`Reader` (one up on entry, one down on
exit) and one read of :data:`GATE`'s ``pending`` flag. A publication finds the calls in flight by
reading every thread's count, polling until none is inside, and calls that find it pending park
until it ends (nested calls go on: their top-level call is one it waits for). The price is paid by
the publication: a wait for every call in flight in the process, of any model (one gate, not one
per model: a module does not know its root). A publication never walks another thread's stack:
CPython 3.11 can crash reading the frames of a thread that is running (cpython#111363).

A change made *inside* a call (a forward hook that loads, a forward writing a buffer) belongs to
that call: it is not held back, since the call's own thread could never leave to let it through,
and it is not published atomically to other threads' calls.

A call that hands work to another thread and waits for it there must not call modules on that
thread while a publication is pending (the worker's call would wait for the publication, which
waits for the caller). Writes that bypass packrt (through a numpy array sharing the storage, or to
a mapped file) are not published.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType


class Reader:
    """What a publication needs to know of one thread."""

    __slots__ = ("__weakref__", "depth", "parked", "write_begun")

    def __init__(self) -> None:
        self.depth = 0  # module calls and reading() blocks open on this thread
        self.parked = False  # a top-level call waiting for a publication to end: not in flight
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
PER_THREAD = threading.local()  # .reader: this thread's Reader, made when first needed (module calls read it)
_readers: weakref.WeakValueDictionary[int, Reader] = weakref.WeakValueDictionary()  # by thread ident
_changes = threading.Condition(threading.Lock())  # publications ending, parked calls waking
_serial = threading.Lock()  # one publication at a time
_POLL_FIRST, _POLL_MOST = 1e-5, 1e-3  # seconds between looks for calls in flight, doubling


def reader() -> Reader:
    """This thread's Reader (registered at first use; it goes with the thread)."""
    try:
        found: Reader = PER_THREAD.reader
        return found
    except AttributeError:
        made = Reader()
        with _changes:
            _readers[threading.get_ident()] = made
        PER_THREAD.reader = made
        return made


def inside_call() -> bool:
    """Whether this thread is inside a module call or a :func:`reading` block (a change it makes is
    that call's own)."""
    return reader().depth > 0


def _calls_in_flight(mine: int) -> bool:
    """Whether a thread other than ``mine`` is inside a module call or a reading block, not parked.
    The caller holds ``_changes``, under which threads register their readers."""
    return any(found.depth and not found.parked for ident, found in list(_readers.items()) if ident != mine)


def arrive(me: Reader) -> None:
    """A module call found a publication pending (``Module.__call__`` asks only then, after counting
    itself in ``me.depth``). A nested call goes on, as does a call on the publishing thread; a
    top-level call parks until the publication ends, and then sees all of it."""
    if me.depth > 1 or GATE.owner == threading.get_ident():
        return
    _park(me)


def _park(me: Reader) -> None:
    with _changes:
        me.parked = True
        try:
            while GATE.pending:
                _changes.wait()
        finally:
            me.parked = False  # under the lock: a publication starting now counts this call in flight


def generation() -> int:
    """A number that moves with every change to bound weights: each publication that commits, and
    each change made inside a call. No publication moves it while a call is in flight, so a cache of
    what the weights serve (a plan) validated at generation ``g`` holds for any call that starts by
    reading ``g``. Packing, which changes no value, does not move it."""
    return GATE.generation


def begin(exclusive: bool = True) -> bool:
    """Hold the gate: no other thread prepares or publishes a change until :func:`end`. With
    ``exclusive`` (a publication) also wait for calls on other threads to leave and hold new ones off
    until the block that asked ends. Blocks of one thread nest. Returns False, doing nothing, inside
    a module call (see the module doc)."""
    ident = threading.get_ident()
    if GATE.owner != ident:
        if reader().depth:
            return False
        _serial.acquire()
        GATE.owner = ident
    GATE.holds += 1
    if exclusive and not GATE.pending:
        try:
            with _changes:
                GATE.pending = True
                GATE.exclusive_at = GATE.holds
                delay = _POLL_FIRST
                while _calls_in_flight(ident):
                    _changes.wait(delay)  # lets parked calls take the lock and settle
                    delay = min(2 * delay, _POLL_MOST)
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


class reading:  # noqa: N801 - used as a function: ``with publication.reading():``
    """Read weights as a module call does: no publication lands while the block runs (for code that
    reads several weights outside a call and needs them of one version). Blocks nest."""

    def __enter__(self) -> None:
        me = reader()
        me.depth += 1
        if GATE.pending:
            try:
                arrive(me)  # parked readers are not in flight, whatever their depth
            except BaseException:  # interrupted while parked: the block never opened
                me.depth -= 1
                raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        reader().depth -= 1


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
        steps: list[Callable[[], None]] = PER_THREAD.joined
    except AttributeError:
        steps = PER_THREAD.joined = []
    return steps


def commit_joined() -> None:
    """Run the steps joined on this thread (a committing publication calls this as its last step).
    Only the block that made the publication exclusive runs them: a load nested in another's commit
    leaves them to the outer one, which may still fail and undo."""
    if GATE.owner == threading.get_ident() and GATE.exclusive_at != GATE.holds:
        return
    steps = _joined()
    while steps:
        steps.pop(0)()


__all__ = [
    "GATE",
    "PER_THREAD",
    "Gate",
    "Reader",
    "arrive",
    "begin",
    "commit_joined",
    "end",
    "generation",
    "inside_call",
    "joining",
    "publishing",
    "reader",
    "reading",
    "serialized",
]
