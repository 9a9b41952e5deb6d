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


def sample_array(dtype: np.dtype[Any], shape: tuple[int, ...] = (3, 5), seed: int = 0) -> np.ndarray[Any, Any]:
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


class IncompatibleKeys:
    """What a fake load returns, shaped like the contract's ``_IncompatibleKeys``."""

    def __init__(self, missing_keys: list[str], unexpected_keys: list[str]) -> None:
        self.missing_keys = missing_keys
        self.unexpected_keys = unexpected_keys


class FakeModule:
    """A flat stand-in for ``packrt.nn.Module``'s state contract, for checkpoint tests.

    ``tensors`` maps dotted names to packrt Tensors; ``ties`` adds alias -> name slots that hold the
    same object; ``extra`` maps a module path ('' for the root) to its extra state. state_dict lists a
    tied tensor once (under its first name); load_state_dict is transactional and binds the incoming
    objects with ``assign=True``, so one object under two keys becomes a tie.
    """

    def __init__(
        self,
        tensors: dict[str, Any],
        ties: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.slots: dict[str, Any] = dict(tensors)
        for alias, primary in (ties or {}).items():
            self.slots[alias] = self.slots[primary]
        self.extra: dict[str, Any] = dict(extra or {})
        self.load_calls: list[dict[str, Any]] = []

    @staticmethod
    def _extra_key(path: str) -> str:
        return f"{path}._extra_state" if path else "_extra_state"

    def state_dict(
        self, *, destination: dict[str, Any] | None = None, prefix: str = "", keep_vars: bool = False
    ) -> dict[str, Any]:
        out: dict[str, Any] = {} if destination is None else destination
        seen: set[int] = set()
        for name, tensor in self.slots.items():
            if id(tensor) not in seen:
                seen.add(id(tensor))
                out[prefix + name] = tensor
        for path, value in self.extra.items():
            out[prefix + self._extra_key(path)] = value
        return out

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True) -> Any:
        seen: set[int] = set()
        for name, tensor in self.slots.items():
            if remove_duplicate and id(tensor) in seen:
                continue
            seen.add(id(tensor))
            yield prefix + name, tensor

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True) -> Any:
        yield from ()

    def load_state_dict(
        self, state_dict: Any, strict: bool = True, assign: bool = False, **options: Any
    ) -> IncompatibleKeys:
        from packrt_core.errors import StateDictError

        self.load_calls.append({"strict": strict, "assign": assign, **options})  # pack, weight_residency
        own = self.state_dict()
        accepted = set(self.slots) | set(own)
        missing = [key for key in own if key not in state_dict]
        unexpected = sorted(key for key in state_dict if key not in accepted)
        if strict and (missing or unexpected):
            raise StateDictError(f"missing keys {missing}, unexpected keys {unexpected}")
        for key, value in state_dict.items():
            if key in self.slots and tuple(value.shape) != tuple(self.slots[key].shape):
                raise StateDictError(
                    f"size mismatch for {key!r}: checkpoint {tuple(value.shape)}, module {tuple(self.slots[key].shape)}"
                )
        # Validated: now commit.
        for path in list(self.extra):
            if self._extra_key(path) in state_dict:
                self.extra[path] = state_dict[self._extra_key(path)]
        for name in list(self.slots):
            if name not in state_dict:
                continue
            if assign:
                old = self.slots[name]
                for other, tensor in self.slots.items():
                    if tensor is old and other not in state_dict:
                        self.slots[other] = state_dict[name]
                self.slots[name] = state_dict[name]
            else:
                self.slots[name].numpy()[...] = state_dict[name].numpy()
        return IncompatibleKeys(missing, unexpected)


@pytest.fixture
def fake_module() -> type[FakeModule]:
    """The FakeModule class (a stand-in for packrt.nn.Module's state contract)."""
    return FakeModule
