"""``call_with_hooks``: one module call with its pre-hooks and forward hooks around it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from packrt_hooks.errors import HookResultError
from packrt_hooks.registry import HookEntry, HookRegistry, describe_hook

_unwinding = threading.local()


def unwinding_exception() -> BaseException | None:
    """The exception a call is propagating, when asked from an ``always_call`` forward hook
    that :func:`call_with_hooks` runs because of it; None otherwise.

    It lets such a hook tell a call that raised from a forward that returned None (both
    hand the hook ``output=None``).
    """
    return getattr(_unwinding, "error", None)


def call_with_hooks(
    module: object,
    forward: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    pre_hooks: HookRegistry,
    forward_hooks: HookRegistry,
) -> Any:
    """Run ``forward(*args, **kwargs)`` with the hooks of both registries around it.

    The rules a caller relies on:

    - Pre-hooks run first, in registry order. ``hook(module, args)`` returning None keeps
      the arguments; any other value replaces ``args`` (a non-tuple becomes a one-tuple).
      A ``with_kwargs`` pre-hook is ``hook(module, args, kwargs)`` and returns None or the
      pair ``(new_args, new_kwargs)``; anything else raises :class:`HookResultError`.
    - Forward hooks run after ``forward``, in registry order. ``hook(module, args, output)``
      (or ``hook(module, args, kwargs, output)`` with ``with_kwargs``) returning None keeps
      the output; any other value replaces it, and the next hook sees the replacement.
    - When a pre-hook, ``forward`` or a forward hook raises, the ``always_call`` forward
      hooks that have not run yet run with ``output=None`` and the original exception
      propagates. An exception raised by one of them meanwhile does not replace it: it is
      recorded as a note on the original. Hooks without ``always_call`` do not run then.
    - Both registries are read once, when the call starts, so hooks registered or removed
      while it runs take part from the next call on.
    """
    pre_entries = pre_hooks.entries
    forward_entries = forward_hooks.entries
    done = 0  # how many forward hooks have run (the ones before this index never rerun)
    try:
        for entry in pre_entries:
            if entry.with_kwargs:
                result = entry.hook(module, args, kwargs)
                if result is not None:
                    args, kwargs = _split_args_kwargs(result, entry, module)
            else:
                result = entry.hook(module, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        output = forward(*args, **kwargs)
        for entry in forward_entries:
            done += 1
            result = entry.hook(module, args, kwargs, output) if entry.with_kwargs else entry.hook(module, args, output)
            if result is not None:
                output = result
        return output
    except BaseException as err:
        # The forward hook that raised (if any) counts as run; the always_call hooks after
        # it still get their call, like the cleanup in a ``finally``.
        for entry in forward_entries[done:]:
            if entry.always_call:
                _run_while_unwinding(entry, module, args, kwargs, err)
        raise


def _run_while_unwinding(
    entry: HookEntry, module: object, args: tuple[Any, ...], kwargs: dict[str, Any], err: BaseException
) -> None:
    outer = getattr(_unwinding, "error", None)
    _unwinding.error = err
    try:
        if entry.with_kwargs:
            entry.hook(module, args, kwargs, None)
        else:
            entry.hook(module, args, None)
    except Exception as secondary:
        # Keep the exception the caller needs to see; say what else went wrong on it.
        err.add_note(
            f"While this exception propagated, the always_call forward hook "
            f"{describe_hook(entry.hook)} on {type(module).__name__} also raised "
            f"{type(secondary).__name__}: {secondary}"
        )
    finally:
        _unwinding.error = outer


def _split_args_kwargs(result: object, entry: HookEntry, module: object) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if (
        isinstance(result, tuple)
        and len(result) == 2
        and isinstance(result[0], tuple)
        and isinstance(result[1], Mapping)
    ):
        return result[0], dict(result[1])
    if isinstance(result, tuple):  # say what each item is: a pair of the wrong kinds is the usual slip
        shape = (
            f"a tuple of length {len(result)} ({', '.join(type(item).__name__ for item in result[:4])}"
            f"{', ...' if len(result) > 4 else ''})"
        )
    else:
        shape = type(result).__name__
    raise HookResultError(
        f"forward pre-hook {describe_hook(entry.hook)} (registered with with_kwargs=True) on "
        f"{type(module).__name__} returned {shape}: {result!r:.200}; expected None (keep the "
        "arguments) or a pair (new_args, new_kwargs) with new_args a tuple and new_kwargs a dict. "
        "Return (args, kwargs) with your changes applied."
    )


__all__ = ["call_with_hooks", "unwinding_exception"]
