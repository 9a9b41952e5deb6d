"""``capture``: keep the outputs of chosen submodules, one entry per call."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from packrt_hooks._tree import ModuleTree, pick_modules, walk_modules
from packrt_hooks.handle import RemovableHandle


class Capture(RemovableHandle, Mapping[str, list[Any]]):
    """The handle :func:`capture` returns; also a mapping ``path -> [output of each call]``.

    ``capture["encoder.0"][-1]`` is the output of the latest call of ``encoder.0``. The
    keys are the paths asked for, in that order, present from the start with an empty list.
    Removing the handle stops recording and keeps what was recorded.
    """

    def __init__(self, names: list[str], transform: Callable[[Any], Any] | None) -> None:
        super().__init__()
        self._outputs: dict[str, list[Any]] = {name: [] for name in names}
        self._transform = transform
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> list[Any]:
        return self._outputs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._outputs)

    def __len__(self) -> int:
        return len(self._outputs)

    # Mapping would make two captures equal when they recorded equal lists, and arrays do
    # not compare to a single bool; a capture is a handle first, equal only to itself.
    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = object.__hash__

    def clear(self) -> None:
        """Forget every recorded output (recording goes on)."""
        with self._lock:
            for outputs in self._outputs.values():
                outputs.clear()

    def _install(self, name: str, module: Any) -> None:
        outputs = self._outputs[name]
        transform = self._transform
        lock = self._lock

        def record(_module: Any, _args: Any, output: Any) -> None:
            kept = transform(output) if transform is not None else output
            with lock:
                outputs.append(kept)

        self._adopt(module.register_forward_hook(record))

    def __repr__(self) -> str:
        counts = ", ".join(f"{name!r}: {len(out)} call(s)" for name, out in self._outputs.items())
        state = "removed" if self.removed else "recording"
        return f"<Capture {state} {{{counts}}}>"


def capture(
    module: ModuleTree,
    names: str | Iterable[str],
    *,
    transform: Callable[[Any], Any] | None = None,
) -> Capture:
    """Record the output of each submodule named in ``names`` (dotted paths) on every call.

    Returns one handle for all the hooks; it maps each path to the list of outputs, one
    per call, in call order. Outputs are kept as the module returned them (after the
    module's earlier forward hooks); pass ``transform`` to store something else, such as
    ``transform=numpy.array`` for a copy that later in-place writes cannot change.

    Raises :class:`~packrt_hooks.UnknownModuleError` naming a path that is not in the tree
    (with the closest paths that are), and ValueError when ``names`` is empty.
    """
    wanted = [names] if isinstance(names, str) else list(dict.fromkeys(names))
    if not wanted:
        raise ValueError("capture() needs at least one module path; pass the dotted names whose outputs to record")
    chosen = pick_modules(walk_modules(module), wanted)
    result = Capture(wanted, transform)
    try:
        for name, submodule in chosen:
            result._install(name, submodule)  # noqa: SLF001 - this package's own installer
    except BaseException:
        result.remove()
        raise
    return result


__all__ = ["Capture", "capture"]
