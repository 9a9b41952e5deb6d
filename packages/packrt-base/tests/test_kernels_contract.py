"""The kernels contract is checked by the type checker: a backend's table with a kernel of the wrong
signature is a mypy --strict error at the line that builds it, naming the field."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

import packrt_base
from packrt_base import Kernels, PlanKernels

FIXTURES = Path(__file__).parent / "typing_fixtures"


def _mypy(fixture: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy", reason="mypy is not installed (pip install packrt-base[test])")
    # mypy finds packrt_base (py.typed) on this interpreter's path, installed or editable; a MYPYPATH
    # inherited from a lint run would point elsewhere
    env = {key: value for key, value in os.environ.items() if key != "MYPYPATH"}
    command = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull]
    return subprocess.run(
        [*command, "--python-version", "3.11", str(FIXTURES / fixture)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_a_table_of_kernels_with_the_contracts_signatures_type_checks() -> None:
    result = _mypy("good_table.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


def test_a_kernel_of_the_wrong_signature_is_a_type_error_naming_its_field() -> None:  # Kernels and PlanKernels
    result = _mypy("wrong_signatures.py")
    assert result.returncode == 1, result.stdout + result.stderr
    rejected = re.findall(r'error: Argument "(\w+)" to "replace" of "Kernels" has incompatible type', result.stdout)
    # a missing argument, a renamed one, a wrong argument type, a pack without unpack(): each refused
    assert sorted(rejected) == ["layer_norm", "linear", "pack_linear", "softmax"], result.stdout
    planned = re.findall(r'error: Argument "(\w+)" to "replace" of "PlanKernels" has incompatible type', result.stdout)
    assert planned == ["residual_norm"], result.stdout  # the serving plan's kernels are checked alike
    assert "Found 5 errors in 1 file" in result.stdout


def test_every_field_of_the_record_is_typed_by_a_callable_protocol() -> None:
    for field in fields(Kernels):  # an optional kernel (a device may serve none) is its Protocol or None
        kind = getattr(packrt_base.kernels, str(field.type).removesuffix(" | None"))
        assert "__call__" in vars(kind), f"{field.name}'s type {field.type} declares no call signature"
        assert getattr(kind, "_is_protocol", False), f"{field.name} is typed {field.type}, not a Protocol"


def test_every_field_of_the_plan_record_is_typed_by_a_callable_protocol() -> None:
    for field in fields(PlanKernels):  # an optional kernel (decode_attention) is its Protocol or None
        kind = getattr(packrt_base.plan, str(field.type).removesuffix(" | None"))
        assert "__call__" in vars(kind), f"{field.name}'s type {field.type} declares no call signature"
        assert getattr(kind, "_is_protocol", False), f"{field.name} is typed {field.type}, not a Protocol"
