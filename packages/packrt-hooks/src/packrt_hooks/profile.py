"""``profile``: wall time and call counts per module, with self time beside total time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from packrt_hooks._tree import ModuleTree, display_name, install_everywhere
from packrt_hooks.call import unwinding_exception
from packrt_hooks.handle import RemovableHandle


@dataclass
class ModuleTiming:
    """The numbers :func:`profile` keeps for one module (all times in seconds).

    ``total_s`` is the wall time of its calls; ``children_s`` the part of that spent inside
    profiled modules it called directly; ``self_s`` what remains, the module's own work.
    ``calls`` counts every call, ``errors`` the ones among them that raised.
    """

    name: str
    module_type: str
    calls: int = 0
    errors: int = 0
    total_s: float = 0.0
    children_s: float = 0.0

    @property
    def self_s(self) -> float:
        """Seconds spent in this module itself: its total minus the time of profiled modules it called directly."""
        return self.total_s - self.children_s

    @property
    def mean_s(self) -> float:
        """Total time per call (0.0 when it was never called)."""
        return self.total_s / self.calls if self.calls else 0.0


class _Frame:
    __slots__ = ("children_s", "name", "start")

    def __init__(self, name: str, start: float) -> None:
        self.name = name
        self.start = start
        self.children_s = 0.0


class Profile(RemovableHandle):
    """The handle :func:`profile` returns, and the numbers it collects.

    ``timings`` maps each module's dotted path (the root is ``""``) to its
    :class:`ModuleTiming`; ``str(profile)`` is a table sorted by total time. Removing the
    handle stops the measuring and keeps the numbers.
    """

    def __init__(self) -> None:
        super().__init__()
        self.timings: dict[str, ModuleTiming] = {}
        self._wall_s = 0.0
        self._lock = threading.Lock()
        # Each thread runs its own call stack; the totals they add to are shared.
        self._local = threading.local()

    @property
    def total_s(self) -> float:
        """Wall time of the outermost profiled calls, summed (the 100% of the table)."""
        return self._wall_s

    def rows(self) -> list[ModuleTiming]:
        """The timings of the modules that ran, longest total time first."""
        ran = [timing for timing in self.timings.values() if timing.calls]
        return sorted(ran, key=lambda timing: timing.total_s, reverse=True)

    def reset(self) -> None:
        """Zero every number (the hooks stay installed)."""
        with self._lock:
            for timing in self.timings.values():
                timing.calls, timing.errors, timing.total_s, timing.children_s = 0, 0, 0.0, 0.0
            self._wall_s = 0.0

    def table(self, limit: int | None = None) -> str:
        """The timings as a text table, longest total first; ``limit`` keeps the top rows."""
        rows = self.rows()[:limit]
        # The errors column only appears when some profiled call raised.
        show_errors = any(t.errors for t in rows)
        header = ["module", "type", "calls", "total ms", "self ms", "mean ms", "% total"]
        if show_errors:
            header.append("errors")
        lines = []
        for t in rows:
            share = f"{100.0 * t.total_s / self._wall_s:.1f}%" if self._wall_s else "-"
            line = [display_name(t.name, quote=False), t.module_type, str(t.calls)]
            line += [f"{t.total_s * 1e3:.3f}", f"{t.self_s * 1e3:.3f}", f"{t.mean_s * 1e3:.3f}", share]
            if show_errors:
                line.append(str(t.errors))
            lines.append(line)
        widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
        out = []
        for row in [header, *lines]:
            left = [row[i].ljust(widths[i]) for i in range(2)]
            right = [row[i].rjust(widths[i]) for i in range(2, len(row))]
            out.append("  ".join(left + right).rstrip())
        if not lines:
            out.append("(no profiled module has been called yet)")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()

    def _stack(self) -> list[_Frame]:
        stack: list[_Frame] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _enter(self, name: str) -> None:
        self._stack().append(_Frame(name, time.perf_counter()))

    def _exit(self, name: str, raised: bool) -> None:
        end = time.perf_counter()
        stack = self._stack()
        # A pre-hook that ran before ours and raised means our frame was never pushed:
        # the top then belongs to a caller, and must stay.
        if not stack or stack[-1].name != name:
            return
        frame = stack.pop()
        elapsed = end - frame.start
        if stack:
            stack[-1].children_s += elapsed
        with self._lock:
            timing = self.timings[name]
            timing.calls += 1
            timing.errors += int(raised)
            timing.total_s += elapsed
            timing.children_s += frame.children_s
            if not stack:
                self._wall_s += elapsed

    def _install(self, name: str, module: Any) -> None:
        self.timings[name] = ModuleTiming(name, type(module).__name__)

        # Closures rather than bound methods: deep-copying a profiled model then shares this
        # result object instead of trying to copy its lock.
        def before(_module: Any, _args: Any) -> None:
            self._enter(name)

        def after(_module: Any, _args: Any, _output: Any) -> None:
            self._exit(name, unwinding_exception() is not None)

        # First in, last out: the timer brackets the module's other hooks as well, and
        # always_call keeps the stack balanced when the forward raises.
        self._adopt(module.register_forward_pre_hook(before, prepend=True))
        self._adopt(module.register_forward_hook(after, always_call=True))


def profile(module: ModuleTree) -> Profile:
    """Time every module of the tree rooted at ``module``; returns one handle for all hooks.

    Each module's total time runs from its first pre-hook to its last forward hook; its
    self time is the total minus the time spent in the profiled modules it called. Calls
    that raise are counted too. Use it as a context manager, or call ``.remove()``::

        with profile(model) as prof:
            model(x)
        print(prof)
    """
    result = Profile()
    install_everywhere(result, module)
    return result


__all__ = ["ModuleTiming", "Profile", "profile"]
