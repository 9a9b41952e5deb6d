"""The meta-package: one import name for the public API, and a demo that runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

import packrt

ARCHITECTURE_NAMES = [
    "Tensor",
    "tensor",
    "from_numpy",
    "from_dlpack",
    "zeros",
    "ones",
    "empty",
    "full",
    "arange",
    "randn",
    "rand",
    "manual_seed",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "uint8",
    "int16",
    "int32",
    "int64",
    "bool",
    "half",
    "float",
    "double",
    "long",
    "DataType",
    "Device",
    "meta_init",
    "contract_revision",
    "set_num_threads",
    "get_num_threads",
]


@pytest.mark.parametrize("name", ARCHITECTURE_NAMES)
def test_each_documented_top_level_name_is_exported(name: str) -> None:
    assert hasattr(packrt, name) and name in packrt.__all__


@pytest.mark.parametrize(
    "name", ["Module", "Parameter", "Buffer", "Sequential", "ModuleList", "ModuleDict", "Identity"]
)
def test_nn_exports_the_module_classes(name: str) -> None:
    assert getattr(packrt.nn, name) is not None


def test_submodules_import_by_their_dotted_names() -> None:
    import packrt.cuda
    import packrt.errors
    import packrt.hooks
    import packrt.nn

    assert issubclass(packrt.errors.StateDictError, packrt.errors.PackrtError)
    assert callable(packrt.hooks.profile) and isinstance(packrt.cuda.is_available(), bool)


def test_the_aliases_are_the_dtype_objects() -> None:
    assert packrt.half is packrt.float16 and packrt.long is packrt.int64 and packrt.float is packrt.float32


def test_the_demo_runs_in_smoke_mode() -> None:
    done = subprocess.run([sys.executable, "-m", "packrt.demo", "--smoke"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "bfloat16" in done.stdout and "not exportable" in done.stdout
    assert "0 bytes of weight storage" in done.stdout  # the model is declared under meta_init
    for residency in ("packed", "borrowed", "auto", "per_call"):
        assert f"\n{residency} " in done.stdout, f"no summary row for {residency}"
