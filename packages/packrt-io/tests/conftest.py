"""Shared fixtures: hand-built safetensors files, sample arrays of every dtype, and the torch rule."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

# safetensors name -> numpy dtype, for every dtype packrt promises to load and save bit-exactly.
DTYPES: dict[str, np.dtype[Any]] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "I8": np.dtype(np.int8),
    "I16": np.dtype(np.int16),
    "I32": np.dtype(np.int32),
    "I64": np.dtype(np.int64),
    "U8": np.dtype(np.uint8),
    "U16": np.dtype(np.uint16),
    "U32": np.dtype(np.uint32),
    "U64": np.dtype(np.uint64),
    "BOOL": np.dtype(np.bool_),
}

RawWriter = Callable[..., Path]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test asking for ``dtype_name`` runs once per supported safetensors dtype."""
    if "dtype_name" in metafunc.fixturenames:
        metafunc.parametrize("dtype_name", list(DTYPES))


@pytest.fixture
def file_dtypes() -> dict[str, np.dtype[Any]]:
    """safetensors dtype name -> numpy dtype, written out independently of packrt_io's own table."""
    return dict(DTYPES)


@pytest.fixture
def sample() -> Callable[..., np.ndarray[Any, Any]]:
    """``sample(dtype, shape=(3, 5), seed=0)``: random bit patterns of a dtype."""
    return sample_array


@pytest.fixture
def as_bytes() -> Callable[[np.ndarray[Any, Any]], bytes]:
    """``as_bytes(array)``: an array's raw bytes in C order, for bit-exact comparisons."""
    return raw_bytes


def sample_array(
    dtype: np.dtype[Any], shape: tuple[int, ...] = (3, 5), seed: int = 0
) -> np.ndarray[Any, Any]:
    """Random bit patterns of ``dtype`` (for floats: NaN payloads, infinities, -0.0, subnormals too)."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    raw = rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
    array = raw.view(dtype).reshape(shape).copy()
    if dtype.kind == "f" or dtype.kind == "V":
        # Pin the classic troublemakers at the front so every float sample holds them.
        flat = array.reshape(-1)
        bits = flat.view(f"u{dtype.itemsize}")
        top = 1 << (8 * dtype.itemsize - 1)
        bits[0] = top  # -0.0
        bits[1] = top - 1  # exponent and mantissa all ones: a NaN in every supported float format
        bits[2] = top | (top - 3)  # a negative NaN with a different payload
    return array


def raw_bytes(array: np.ndarray[Any, Any]) -> bytes:
    """The array's bytes in C order, whatever its dtype."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).tobytes()


@pytest.fixture
def write_raw(tmp_path: Path) -> RawWriter:
    """Write a safetensors-shaped file from a header (object, str or bytes) and data, no checks."""

    def write(
        header: Any,
        data: bytes = b"",
        *,
        length: int | None = None,
        pad: bool = True,
        name: str = "raw.safetensors",
    ) -> Path:
        if isinstance(header, dict):
            header = json.dumps(header, separators=(",", ":"))
        body = header.encode("utf-8") if isinstance(header, str) else bytes(header)
        if pad:
            body += b" " * (-len(body) % 8)
        prefix = (len(body) if length is None else length).to_bytes(8, "little")
        path = tmp_path / name
        path.write_bytes(prefix + body + data)
        return path

    return write


@pytest.fixture
def torch() -> ModuleType:
    """torch, or a skip when it is missing; PACKRT_REQUIRE_TORCH=1 (as in CI) makes that a failure."""
    try:
        import torch as torch_module
    except ImportError:
        if os.environ.get("PACKRT_REQUIRE_TORCH") == "1":
            pytest.fail("torch is required (PACKRT_REQUIRE_TORCH=1) but cannot be imported")
        pytest.skip("torch is not installed")
    return torch_module
