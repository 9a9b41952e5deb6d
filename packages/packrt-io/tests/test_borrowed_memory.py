"""Borrowed weights cost no copy: the mapped checkpoint is the only one, even while serving.

The measure is the process's anonymous memory (``Anonymous:`` in /proc/self/smaps_rollup): pages a
copy would occupy. Pages of the copy-on-write file mapping that are only read stay file-backed page
cache, shared and reclaimable, and do not count. A packed load of the same file is the contrast that
shows the measure does see a copy when one is made.
"""

from __future__ import annotations

import gc
import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packrt_core
import packrt_io
from packrt_core import nn

_ROLLUP = Path("/proc/self/smaps_rollup")
# Four 4096x4096 float32 weights: 256 MiB plus biases. Each weight (64 MiB) is above glibc's largest
# mmap threshold (32 MiB), so each allocation is its own mapping and is returned on free: a freed
# array never hides a later copy from the measure, nor inflates it.
_WIDTH = 4096
_LAYERS = 4
_ROWS_PER_CHUNK = 512


def _anonymous_bytes() -> int:
    for line in _ROLLUP.read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"{_ROLLUP} has no 'Anonymous:' line")


def _write_checkpoint(path: Path) -> None:
    """Linear weights uniform in +-1/sqrt(width), generated in place chunk by chunk: one copy at most."""
    rng = np.random.default_rng(0)
    bound = np.float32(1.0 / np.sqrt(_WIDTH))
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    for layer in range(_LAYERS):
        weight = np.empty((_WIDTH, _WIDTH), np.float32)
        for row in range(0, _WIDTH, _ROWS_PER_CHUNK):
            chunk = weight[row : row + _ROWS_PER_CHUNK]
            rng.random(out=chunk, dtype=np.float32)
            chunk -= np.float32(0.5)
            chunk *= 2 * bound
        arrays[f"{layer}.weight"] = weight
        arrays[f"{layer}.bias"] = rng.random(_WIDTH, dtype=np.float32) * bound
    packrt_io.save_file(arrays, path)


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One ~256 MiB checkpoint shared by this module's tests, deleted afterwards."""
    if not _ROLLUP.exists():
        pytest.skip(f"{_ROLLUP} does not exist (not Linux, or /proc not mounted): no anonymous-memory measure")
    path = tmp_path_factory.mktemp("borrowed") / "big.safetensors"
    _write_checkpoint(path)
    gc.collect()
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def _model() -> nn.Sequential:
    with packrt_core.meta_init():
        return nn.Sequential(*[nn.Linear(_WIDTH, _WIDTH) for _ in range(_LAYERS)])


def _inputs() -> list[packrt_core.Tensor]:
    rng = np.random.default_rng(1)
    return [packrt_core.from_numpy(rng.standard_normal((batch, _WIDTH), dtype=np.float32)) for batch in (1, 2, 4)]


def _warm_up_kernels(inputs: list[packrt_core.Tensor]) -> None:
    """Run the forwards' kernels once on a throwaway weight, so what they load on first use (the BLAS
    library's per-thread work buffers, sized by the core count; numba and its compiled kernels, which a
    one-row product on two threads runs on) exists before the measure starts. np.zeros pages are the
    shared zero page until written, so the weight itself costs nothing."""
    scratch = np.zeros((_WIDTH, _WIDTH), np.float32)
    weight = packrt_core.from_numpy(scratch)
    for x in inputs:
        x.numpy() @ scratch.T
        nn.functional.linear(x, weight)
    del scratch, weight


def _load_and_serve(path: Path, residency: str) -> tuple[nn.Sequential, list[np.ndarray[Any, Any]], int]:
    """Build, load with ``residency``, serve every input; return the model, outputs and anonymous growth."""
    model = _model()
    inputs = _inputs()
    _warm_up_kernels(inputs)
    gc.collect()
    before = _anonymous_bytes()
    packrt_io.load_checkpoint(model, path, assign=True, weight_residency=residency)
    outputs = [model(x).numpy() for x in inputs]
    growth = _anonymous_bytes() - before
    return model, outputs, growth


def _views_a_mapping(array: np.ndarray[Any, Any]) -> bool:
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, mmap.mmap) or (isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap))


def _reference(model: nn.Sequential, x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    for layer in model:
        x = x @ layer.weight.numpy().T + layer.bias.numpy()
    return x


def test_borrowed_weights_grow_anonymous_memory_by_under_5_percent_of_the_file(big_checkpoint: Path) -> None:
    file_bytes = os.path.getsize(big_checkpoint)
    assert file_bytes >= 256 << 20
    model, outputs, growth = _load_and_serve(big_checkpoint, "borrowed")
    print(f"borrowed: anonymous memory grew {growth / 2**20:.2f} MiB = {100 * growth / file_bytes:.2f}% of the file")
    assert growth < 0.05 * file_bytes, (
        f"loading and serving {file_bytes} mapped bytes under 'borrowed' grew anonymous memory by {growth} "
        f"bytes ({100 * growth / file_bytes:.1f}%): something on the load or forward path copies the weights"
    )
    for layer in model:
        assert layer.weight_residency == "borrowed"
        assert not layer.is_packed
        assert _views_a_mapping(layer.weight.numpy()), "the bound weight is not a view of the mapped file"
    # The forwards computed from the mapped weights are the real ones.
    for x, out in zip(_inputs(), outputs, strict=True):
        np.testing.assert_allclose(out, _reference(model, x.numpy()), rtol=1e-4, atol=1e-5)


def test_the_measure_sees_a_packed_copy_of_roughly_the_file_size(big_checkpoint: Path) -> None:
    file_bytes = os.path.getsize(big_checkpoint)
    model, _outputs, growth = _load_and_serve(big_checkpoint, "packed")
    print(f"packed: anonymous memory grew {growth / 2**20:.2f} MiB = {100 * growth / file_bytes:.2f}% of the file")
    assert all(layer.is_packed for layer in model)
    assert growth >= 0.8 * file_bytes, (
        f"a packed load of {file_bytes} bytes grew anonymous memory by only {growth} bytes: the measure "
        "cannot see a copy, so the borrowed test proves nothing"
    )
