"""The exceptions packrt-hooks raises on purpose.

They derive from :class:`PackrtError`, the root of packrt's hierarchy, which lives in
packrt-base (the bottom of the stack) and is re-exported here, so ``packrt_hooks.PackrtError``
and ``packrt.errors.PackrtError`` are one class: one ``except PackrtError`` catches the hooks'
errors and core's alike. Like every packrt error, each also derives from the builtin exception
a Python user would catch for that kind of failure.
"""

from __future__ import annotations

import functools
from typing import Any

from packrt_base.errors import PackrtError


class HookError(PackrtError):
    """Base class of every error packrt-hooks raises on purpose."""


class HookResultError(HookError, TypeError):
    """A hook returned a value of a form its kind of hook may not return.

    A ``with_kwargs=True`` forward pre-hook may return ``None`` or the pair
    ``(new_args, new_kwargs)``; anything else raises this error naming the hook.
    """


class UnknownModuleError(HookError, LookupError):
    """A dotted module path names no module of the tree a ready-made hook was given."""


class NonFiniteError(HookError, ArithmeticError):
    """A module's output held NaN or infinite values (raised by :func:`check_finite`).

    The attributes say where and what: ``module`` is the dotted path of the first module
    (in call order, so the innermost one) whose output was not finite, ``location`` the
    place inside that output (``"output"``, ``"output[0]"``, ``"output['logits']"``),
    ``nan_count`` / ``inf_count`` how many values of each kind it held, ``size`` the
    number of values checked there and ``call_index`` which call of that module it was
    (0 for the first call after the check was installed).
    """

    def __init__(
        self,
        message: str,
        *,
        module: str,
        location: str,
        nan_count: int,
        inf_count: int,
        size: int,
        call_index: int,
    ) -> None:
        super().__init__(message)
        self.module = module
        self.location = location
        self.nan_count = nan_count
        self.inf_count = inf_count
        self.size = size
        self.call_index = call_index

    def __reduce__(self) -> tuple[Any, ...]:
        # The keyword-only fields are not in ``args``; rebuild through them so the error
        # survives pickling (a worker process reporting it to its parent).
        rebuild = functools.partial(
            type(self),
            module=self.module,
            location=self.location,
            nan_count=self.nan_count,
            inf_count=self.inf_count,
            size=self.size,
            call_index=self.call_index,
        )
        return (rebuild, self.args)

    @property
    def kinds(self) -> tuple[str, ...]:
        """Which non-finite kinds were found: a subset of ``("nan", "inf")``, in that order."""
        found: list[str] = []
        if self.nan_count:
            found.append("nan")
        if self.inf_count:
            found.append("inf")
        return tuple(found)


__all__ = ["HookError", "HookResultError", "NonFiniteError", "PackrtError", "UnknownModuleError"]
