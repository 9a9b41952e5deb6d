"""One exception hierarchy: every packrt error is a PackrtError and the builtin a user catches."""

from __future__ import annotations

import pytest

import packrt_base
import packrt_hooks
from packrt_core import errors

BUILTIN_OF = {
    "DTypeError": TypeError,
    "DeviceError": ValueError,
    "DeviceUnavailableError": RuntimeError,
    "ShapeError": ValueError,
    "IndexingError": IndexError,
    "StorageFreeError": RuntimeError,
    "ReadOnlyError": RuntimeError,
    "RevisionError": ValueError,
    "DLPackError": TypeError,
    "RegistrationError": KeyError,
    "ModuleInitError": AttributeError,
    "ModuleCopyError": RuntimeError,  # what torch's Module.to raises for copy=; a TypeError too (packrt 0.2's)
    "ModulePathError": AttributeError,
    "StateDictError": RuntimeError,
    "ResidencyError": ValueError,
    "CheckpointError": ValueError,
    "HookResultError": TypeError,
    "UnknownModuleError": LookupError,
    "NonFiniteError": ArithmeticError,
}


@pytest.mark.parametrize(("name", "builtin"), sorted(BUILTIN_OF.items()))
def test_each_error_is_a_packrt_error_and_the_builtin_a_user_expects(name: str, builtin: type) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, errors.PackrtError) and issubclass(cls, builtin)
    assert name in errors.__all__


def test_every_exported_error_is_listed_here() -> None:
    exported = {n for n in errors.__all__ if n not in ("PackrtError", "HookError")}
    assert exported == set(BUILTIN_OF)


def test_a_registration_error_prints_its_message_unquoted() -> None:
    assert str(errors.RegistrationError("name 'a.b' cannot contain '.'")) == "name 'a.b' cannot contain '.'"


def test_one_root_class_whichever_package_a_user_imports_it_from() -> None:
    assert errors.PackrtError is packrt_base.PackrtError is packrt_hooks.PackrtError
    assert issubclass(packrt_hooks.HookError, packrt_base.PackrtError)
    # the kernels' errors keep their own root: core maps each, naming the public function
    assert not issubclass(packrt_base.KernelError, errors.PackrtError)
