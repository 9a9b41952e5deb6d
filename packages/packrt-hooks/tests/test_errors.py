"""The hook errors' places in packrt's hierarchy, as the README states them."""

from __future__ import annotations

import pytest

import packrt_hooks
from packrt_base.errors import PackrtError
from packrt_hooks import errors


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (errors.HookResultError, TypeError),
        (errors.UnknownModuleError, LookupError),
        (errors.NonFiniteError, ArithmeticError),
    ],
)
def test_every_hook_error_is_a_packrt_error_and_the_builtin_a_user_catches(
    error: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error, errors.HookError)
    assert issubclass(error, errors.PackrtError)  # what `except packrt.errors.PackrtError` catches
    assert issubclass(error, builtin)


def test_packrt_error_is_the_one_class_packrt_base_defines() -> None:
    # the README's promise: hooks re-exports packrt-base's root, so one `except PackrtError` catches both
    assert errors.PackrtError is PackrtError
    assert packrt_hooks.PackrtError is PackrtError
