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


def test_the_demo_runs_in_smoke_mode_with_speeds_as_ratios_and_no_progress_bars_off_a_terminal() -> None:
    done = subprocess.run([sys.executable, "-m", "packrt.demo", "--smoke"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "bfloat16" in done.stdout and "not exportable" in done.stdout
    assert "0 bytes of weight storage" in done.stdout  # the model is declared under meta_init
    for residency in ("packed", "borrowed", "auto", "per_call"):
        assert f"\n{residency} " in done.stdout, f"no summary row for {residency}"
    # every speed is a ratio measured side by side, printed with its threads and load; no speed alone
    assert "ms/forward" not in done.stdout and "tok/s" not in done.stdout
    assert "thread(s) each, 1-minute load" in done.stdout
    # the pipe is not a terminal: transformers' progress bars ("Loading weights", ...) stay off
    assert "it/s]" not in done.stderr and "it/s]" not in done.stdout, done.stderr[-2000:]


def _fresh(code: str) -> str:
    """stdout of ``code`` run in a new interpreter (nothing imported yet)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_packrt_binds_every_public_submodule() -> None:
    code = (
        "import packrt\n"
        "print(callable(packrt.io.save_checkpoint), callable(packrt.models.BertEncoder), "
        "callable(packrt.hooks.profile), callable(packrt.nn.Linear), callable(packrt.cuda.is_available), "
        "issubclass(packrt.errors.StateDictError, packrt.errors.PackrtError))"
    )
    assert _fresh(code) == "True True True True True True"


def test_io_and_models_are_imported_on_first_use_not_by_import_packrt() -> None:
    code = (
        "import sys, packrt\n"
        "print('packrt_io' in sys.modules, 'packrt.models' in sys.modules)\n"
        "packrt.io\n"
        "print('packrt_io' in sys.modules, packrt.io is sys.modules['packrt.io'])"
    )
    assert _fresh(code).splitlines() == ["False False", "True True"]


@pytest.mark.parametrize("name", ["io", "models", "nn", "hooks", "errors", "cuda"])
def test_every_submodule_is_listed_by_dir_and_all(name: str) -> None:
    assert name in dir(packrt) and name in packrt.__all__


def test_an_unknown_attribute_of_packrt_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'packrt' has no attribute 'no_such_thing'"):
        packrt.no_such_thing  # noqa: B018


def test_nn_functional_imports_as_a_module_of_the_nn_package() -> None:
    import packrt.nn.functional as F  # noqa: N812 - PyTorch users' spelling
    from packrt.nn import functional
    from packrt_core.nn import functional as core_functional

    assert F is functional is packrt.nn.functional
    assert F.__all__ == core_functional.__all__
    assert all(getattr(F, name) is getattr(core_functional, name) for name in F.__all__)


@pytest.mark.parametrize("name", ["PackedLayer", "memory_report", "ParameterList", "ParameterDict", "Conv2d"])
def test_the_nn_package_keeps_packrt_core_nn_names(name: str) -> None:
    import packrt_core.nn

    assert getattr(packrt.nn, name) is getattr(packrt_core.nn, name) and name in packrt.nn.__all__


@pytest.mark.parametrize("name", ["empty_like", "zeros_like", "ones_like", "full_like"])
def test_the_like_creation_functions_are_exported(name: str) -> None:
    import packrt_core

    assert getattr(packrt, name) is getattr(packrt_core, name) and name in packrt.__all__
    assert packrt.zeros_like(packrt.ones(2, 3)).tolist() == [[0.0] * 3] * 2
