"""Every hand-written CUDA source compiles with nvcc for sm_90, and the Python side calls what it declares.

The compile runs wherever ``nvcc`` is on the PATH (it is in CI, which has no GPU), so a kernel
that does not compile fails CI rather than the first GPU run. The sources must stay
self-contained (no header beyond cuda_fp16.h / cuda_bf16.h, entry points ``extern "C"``) so that
NVRTC, which cupy compiles them with, and nvcc read them alike.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from packrt_kernels_cuda import compiled

_ALLOWED_INCLUDES = {"cuda_fp16.h", "cuda_bf16.h"}


@pytest.mark.parametrize("source", compiled.SOURCES)
def test_the_source_is_self_contained(source: str) -> None:
    text = compiled.source_text(source)
    includes = set(re.findall(r"#include\s*[<\"]([^>\"]+)[>\"]", text))
    assert includes <= _ALLOWED_INCLUDES, f"{source} includes {sorted(includes - _ALLOWED_INCLUDES)}"
    assert compiled.entry_points(text), f'{source} declares no extern "C" __global__ entry point'


@pytest.mark.parametrize("source", compiled.SOURCES)
def test_the_source_compiles_with_nvcc_for_sm_90(source: str, tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on the PATH: the CUDA compile check runs where the CUDA toolkit is installed")
    path = tmp_path / source
    path.write_text(compiled.source_text(source), encoding="utf-8")
    cmd = [nvcc, "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings", "-cubin", "-o", str(tmp_path / "out.cubin")]
    done = subprocess.run([*cmd, str(path)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"nvcc failed on {source}:\n{done.stdout}\n{done.stderr}"
    assert (tmp_path / "out.cubin").stat().st_size > 0
