"""``check_finite``: stop at the first module whose output holds NaN or Inf."""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from packrt_hooks._tree import ModuleTree, display_name, dtype_name, install_everywhere, iter_leaves
from packrt_hooks.errors import NonFiniteError
from packrt_hooks.handle import RemovableHandle


def count_nonfinite(value: object) -> tuple[int, int, int] | None:
    """``(nan_count, inf_count, size)`` for a float scalar, array or tensor; None otherwise.

    Integer and boolean data, storage-free tensors and objects that are not numbers give
    None: they cannot hold a NaN, or hold no values to look at.
    """
    if isinstance(value, float):
        return int(math.isnan(value)), int(math.isinf(value)), 1
    if getattr(value, "has_storage", True) is False or not hasattr(value, "dtype"):
        return None
    array: Any = value
    if not isinstance(value, np.ndarray | np.generic):
        try:
            array = np.asarray(value)
        except (TypeError, ValueError, RuntimeError):
            # A device array that refuses implicit host copies: use its own namespace.
            return _count_with_namespace(value)
    kind = array.dtype.kind
    if kind in "biuSUOM":
        return None
    try:
        nan_count = int(np.count_nonzero(np.isnan(array)))
        inf_count = int(np.count_nonzero(np.isinf(array)))
    except TypeError:
        return None  # a custom dtype without isnan support cannot be checked
    return nan_count, inf_count, int(array.size)


def _count_with_namespace(value: Any) -> tuple[int, int, int] | None:
    namespace = getattr(value, "__array_namespace__", None)
    if namespace is None:
        return None
    xp = namespace()
    try:
        nan_count = int(xp.sum(xp.isnan(value)))
        inf_count = int(xp.sum(xp.isinf(value)))
    except TypeError:
        return None
    return nan_count, inf_count, int(math.prod(value.shape))


class FiniteCheck(RemovableHandle):
    """The handle :func:`check_finite` returns; ``checked_calls`` counts module calls checked."""

    def __init__(self) -> None:
        super().__init__()
        self.checked_calls = 0
        self._calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def _install(self, name: str, module: Any) -> None:
        self._calls[name] = 0

        def check(checked: Any, args: Any, output: Any) -> None:
            with self._lock:
                call_index = self._calls[name]
                self._calls[name] = call_index + 1
                self.checked_calls += 1
            for location, leaf in iter_leaves(output):
                counts = count_nonfinite(leaf)
                if counts is not None and (counts[0] or counts[1]):
                    raise _error(name, checked, location, leaf, counts, call_index, args)

        self._adopt(module.register_forward_hook(check))


def _error(
    name: str,
    module: Any,
    location: str,
    leaf: Any,
    counts: tuple[int, int, int],
    call_index: int,
    args: Any,
) -> NonFiniteError:
    nan_count, inf_count, size = counts
    found = " and ".join(text for text, n in ((f"{nan_count} NaN", nan_count), (f"{inf_count} Inf", inf_count)) if n)
    where = location
    if hasattr(leaf, "shape"):
        where += f" ({dtype_name(leaf.dtype)}, shape {tuple(leaf.shape)})"
    inputs_bad = any((c := count_nonfinite(x)) is not None and (c[0] or c[1]) for _, x in iter_leaves(args, "args"))
    cause = (
        "Its inputs already held non-finite values, so look at what the model was given."
        if inputs_bad
        else "Its inputs were finite, so the values went bad inside it: check its weights and "
        "its arithmetic (overflow in a low-precision dtype, a division by zero, log of 0)."
    )
    return NonFiniteError(
        f"module {display_name(name)} ({type(module).__name__}) is the first module in call order to "
        f"produce a non-finite output: {where} holds {found} among {size} values (call {call_index} "
        f"since check_finite was installed). {cause}",
        module=name,
        location=location,
        nan_count=nan_count,
        inf_count=inf_count,
        size=size,
        call_index=call_index,
    )


def check_finite(module: ModuleTree) -> FiniteCheck:
    """Raise :class:`~packrt_hooks.NonFiniteError` as soon as any module's output holds NaN/Inf.

    Every module of the tree gets a forward hook. Modules finish in call order, innermost
    first, so the error names the module that first produced a bad value rather than the
    ones that only passed it on. Float arrays, tensors and Python floats are checked, inside
    tuples, lists and dicts too; integer data is skipped. Returns one handle for all hooks.
    """
    result = FiniteCheck()
    install_everywhere(result, module)
    return result


__all__ = ["FiniteCheck", "check_finite", "count_nonfinite"]
