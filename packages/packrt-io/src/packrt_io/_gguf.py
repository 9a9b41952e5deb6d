"""GGUF files (llama.cpp's format): metadata, tensor layout and tensors as numpy arrays.

The file is parsed by the ``gguf`` package (llama.cpp's own reader, the ``gguf`` extra) over a
copy-on-write mapping, so writing to an array never reaches the file. What a tensor becomes
depends on its GGML type, by the two tables below:

- ``STORED_TYPES`` (F32, F16, BF16) are served as they are: the array is a view of the file's
  pages (``memory_report`` counts them as mapped);
- ``DEQUANTISED_TYPES`` (the block types llama.cpp writes in its common mixes: Q8_0, Q4_0, Q4_1,
  Q5_0, Q5_1, the K-quants Q2_K..Q6_K, IQ4_NL and IQ4_XS) are block-quantised; they are dequantised to
  float32 with ``gguf.quants.dequantize`` when asked for, into fresh memory that ``memory_report``
  counts as converted and names ("Q4_1 dequantised to float32 from <file>").

Any other type is refused by name (:meth:`GGUFFile.check_types`) before a tensor is read. Shapes
are given in numpy order (rows first), the reverse of GGML's ``ne`` order the header stores.
"""

from __future__ import annotations

import importlib
import mmap as _mmap
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import ml_dtypes
import numpy as np

from packrt_base.pages import mapping_under
from packrt_core.errors import CheckpointError
from packrt_core.nn.memory import name_converted_array, name_mapped_file
from packrt_io._checkpoint import _guard_mapped_files
from packrt_io._fs import identity
from packrt_io._gguf_bounds import check_header, find_architecture
from packrt_io._guard import MappedFile
from packrt_io._layout import CheckpointInfo, TensorInfo

STORED_TYPES: Final[dict[str, np.dtype[Any]]] = {
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
}
# Every type a Q4_K_M/Q5_K_M/Q3_K_*/IQ4 mix can hold (llama-quantize falls back to Q5_0/Q5_1/Q8_0 for rows
# whose width is not a multiple of 256); the i-quants below 4 bits and the ternary types are not among them.
DEQUANTISED_TYPES: Final[tuple[str, ...]] = (
    "Q8_0",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
    "IQ4_NL",
    "IQ4_XS",
)
SUPPORTED_TYPES: Final[tuple[str, ...]] = (*STORED_TYPES, *DEQUANTISED_TYPES)
MAGIC: Final = b"GGUF"


def is_gguf(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a regular file that starts with the GGUF magic."""
    try:
        if not Path(path).is_file():  # before opening: a FIFO or device would block the open
            return False
        with open(path, "rb") as handle:
            return handle.read(4) == MAGIC
    except OSError:
        return False


def named_gguf(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is meant as a GGUF file: it starts with the magic, or it is a regular file named
    ``*.gguf`` (whose :func:`open_gguf` then says what is wrong with it, instead of a directory's error)."""
    where = Path(path)
    return is_gguf(where) or (where.suffix.lower() == ".gguf" and where.is_file())


def _gguf_package() -> Any:
    try:
        return importlib.import_module("gguf")
    except ImportError as err:
        raise CheckpointError(
            "reading a GGUF file needs the gguf package (llama.cpp's reader): pip install 'packrt-io[gguf]' "
            "(or 'packrt[gguf]')"
        ) from err


_READERS: dict[int, Any] = {}
_ARRAY, _STRING = 9, 8  # GGUF value types


def _fast_reader(package: Any) -> Any:
    """``gguf.GGUFReader`` parsing over a plain ndarray view of its memmap, arrays read whole.

    The reader slices its ``data`` once per metadata value; slicing an ``np.memmap`` runs a Python
    ``__array_finalize__`` each time, which made a 49k-token vocabulary take ~15 s to parse. A
    plain view of the same pages (its ``base`` is the memmap, whose base is the mapping) parses the
    same bytes in a fraction of that and keeps every tensor a view of the file.

    It also reads each array of scalars (a vocabulary's scores and token types) as one part, and the strings
    of an array by their lengths (one view each), where the reader builds several arrays per item: SmolLM2's
    load spent two thirds of its time there. The fields' :meth:`contents` give the same values (a test
    compares every field with the plain reader's); nested arrays and non-native byte orders are left to it.
    """
    cached = _READERS.get(id(package))
    if cached is not None:
        return cached
    scalars = package.GGUFReader.gguf_scalar_to_np
    value_type = package.GGUFValueType

    class PlainViewReader(package.GGUFReader):  # type: ignore[misc]
        @property
        def data(self) -> np.ndarray[Any, Any]:
            return self._plain_data

        @data.setter
        def data(self, value: np.ndarray[Any, Any]) -> None:
            self._plain_data = value.view(np.ndarray)

        def _get_field_parts(self, orig_offs: int, raw_type: int) -> tuple[int, list[Any], list[int], list[Any]]:
            if raw_type != _ARRAY or self.byte_order != "I":
                return super()._get_field_parts(orig_offs, raw_type)  # type: ignore[no-any-return]
            head = self.data[orig_offs : orig_offs + 12]
            item, count = int(head[:4].view("<u4")[0]), int(head[4:].view("<u8")[0])
            parts: list[Any] = [head[:4].view(np.uint32), head[4:].view(np.uint64)]
            dtype = scalars.get(value_type(item)) if item != _ARRAY else None
            if dtype is not None:
                size = np.dtype(dtype).itemsize * count
                parts.append(self.data[orig_offs + 12 : orig_offs + 12 + size].view(dtype))
                return 12 + size, parts, [2], [value_type.ARRAY, value_type(item)]
            if item != _STRING:
                return super()._get_field_parts(orig_offs, raw_type)  # type: ignore[no-any-return]
            data, at = self.data, orig_offs + 12
            unpack = struct.unpack_from
            with data.data as raw:  # released before the mapping can close
                for _ in range(count):
                    length = unpack("<Q", raw, at)[0]
                    parts.append(data[at + 8 : at + 8 + length])
                    at += 8 + length
            return at - orig_offs, parts, list(range(2, 2 + count)), [value_type.ARRAY, value_type.STRING]

    _READERS[id(package)] = PlainViewReader
    return PlainViewReader


def _value(field: Any) -> Any:
    """A metadata field as Python: str, int, float, bool, or a list of them."""
    value = field.contents()
    return value.tolist() if isinstance(value, np.ndarray) else value


class GGUFMetadata(Mapping[str, Any]):
    """A GGUF file's metadata, key -> value (str, int, float, bool, or a list of them), each value decoded from
    the file on first access and kept. A load reads a few dozen numbers; the vocabulary (151,936 strings for
    Qwen2.5) is decoded only when a tokenizer asks for it (it was a third of a 0.5B file's load time).
    :meth:`length` gives an array's item count without decoding it."""

    def __init__(self, fields: Mapping[str, Any]) -> None:
        self._fields = fields
        self._values: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key not in self._values:
            self._values[key] = _value(self._fields[key])
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __contains__(self, key: object) -> bool:
        return key in self._fields

    def length(self, key: str) -> int | None:
        """How many items the array under ``key`` holds (None for a key that is not an array)."""
        field = self._fields[key]
        return len(field.data) if field.types and field.types[0] == _ARRAY else None

    def __repr__(self) -> str:
        return f"GGUFMetadata({len(self)} keys: {', '.join(list(self)[:4])}...)"


@dataclass(frozen=True)
class GGUFTensor(TensorInfo):
    """One tensor as the GGUF header describes it: a :class:`TensorInfo` whose ``dtype`` is the GGML type
    name, with its numpy-order shape and stored bytes."""

    @property
    def type(self) -> str:
        """The GGML type name (``"F32"``, ``"Q4_K"``...), the same as ``dtype``."""
        return self.dtype

    @property
    def stored_as_served(self) -> bool:
        """True for F32/F16/BF16, which load as views of the file; False for quantised types."""
        return self.dtype in STORED_TYPES


class GGUFFile:
    """An open GGUF file: ``metadata`` (key -> value), ``tensors`` (name -> :class:`GGUFTensor`).

    Open one with :func:`open_gguf`. ``array(name)`` gives a tensor as numpy (a view of the
    mapped file, or float32 dequantised for a quantised type). ``mapped_file`` keeps the file
    open with its identity at open time, so a model serving from it can check that it is unchanged.
    """

    def __init__(self, path: Path, reader: Any, mapped_file: MappedFile) -> None:
        self.path = path
        self._reader = reader
        self.mapped_file = mapped_file
        self.metadata = GGUFMetadata(reader.fields)
        self._raw = {t.name: t for t in reader.tensors}
        self.tensors: dict[str, GGUFTensor] = {
            t.name: GGUFTensor(
                t.name, t.tensor_type.name, tuple(int(n) for n in reversed(t.shape)), int(t.n_bytes), path.name
            )
            for t in reader.tensors
        }

    @property
    def architecture(self) -> str:
        """``general.architecture`` (``"llama"``, ``"qwen2"``...), which names the keys of the metadata."""
        value = self.metadata.get("general.architecture")
        if not isinstance(value, str):
            raise CheckpointError(f"GGUF file {str(self.path)!r} has no general.architecture string in its metadata")
        return value

    def check_types(self, names: Iterable[str]) -> None:
        """CheckpointError naming the first of ``names`` whose GGML type packrt cannot serve."""
        for name in names:
            kind = self.tensors[name].dtype
            if kind not in SUPPORTED_TYPES:
                raise CheckpointError(
                    f"GGUF file {str(self.path)!r}: tensor {name!r} is stored as {kind}, which packrt does not "
                    f"read; supported: {', '.join(STORED_TYPES)} (served as stored) and "
                    f"{', '.join(DEQUANTISED_TYPES)} (dequantised to float32 at load). Convert the file with "
                    "llama.cpp's llama-quantize to one of these"
                )

    def guard(self, module: Any) -> None:
        """Check, before each call of ``module`` (which now serves from this file's pages), that the
        file is still what was opened: a truncation or in-place rewrite raises a CheckpointError
        instead of ending the process or silently changing the weights."""
        _guard_mapped_files(module, [self.mapped_file])

    def info(self) -> CheckpointInfo:
        """The layout as a :class:`CheckpointInfo` (dtype is the GGML type name), for inspect/check."""
        return CheckpointInfo(self.path, None, dict[str, TensorInfo](self.tensors), (self.path,))

    def array(self, name: str) -> np.ndarray[Any, Any]:
        """Tensor ``name`` in numpy order: a copy-on-write view of the file for a stored type, a fresh
        float32 array (named as converted for ``memory_report``) for a quantised one."""
        tensor = self.tensors.get(name)
        if tensor is None:
            raise CheckpointError(f"GGUF file {str(self.path)!r} has no tensor {name!r}")
        self.check_types([name])
        raw = self._raw[name]
        stored = STORED_TYPES.get(tensor.type)
        if stored is not None:
            view: np.ndarray[Any, Any] = np.asarray(raw.data).reshape(-1).view(np.uint8).view(stored)
            return view.reshape(tensor.shape)
        try:
            values = _gguf_package().quants.dequantize(np.asarray(raw.data), raw.tensor_type)
        except (ValueError, NotImplementedError) as err:
            raise CheckpointError(
                f"GGUF file {str(self.path)!r}: tensor {name!r} ({tensor.type}, shape {tensor.shape}) cannot be "
                f"dequantised: {err}"
            ) from err
        out = np.ascontiguousarray(values, dtype=np.float32).reshape(tensor.shape)
        name_converted_array(out, f"{tensor.type} dequantised to float32 from {self.path.name}")
        return out

    def blocks(self, name: str) -> np.ndarray[Any, Any]:
        """Tensor ``name`` of a quantised type as the file stores it: a copy-on-write uint8 view of the file,
        (rows, bytes a row), each row the blocks of one row of weights; CheckpointError for a stored type."""
        tensor = self.tensors.get(name)
        if tensor is None:
            raise CheckpointError(f"GGUF file {str(self.path)!r} has no tensor {name!r}")
        self.check_types([name])
        if tensor.stored_as_served:
            raise CheckpointError(
                f"GGUF file {str(self.path)!r}: tensor {name!r} is stored as {tensor.type}, not in quantised "
                "blocks; read it with array()"
            )
        rows = int(np.prod(tensor.shape[:-1], dtype=np.int64)) if len(tensor.shape) > 1 else 1
        raw = np.asarray(self._raw[name].data).reshape(-1).view(np.uint8)
        return raw.reshape(rows, tensor.nbytes // rows)


def _gguf_file(path: str | os.PathLike[str]) -> Path:
    """``path`` as a Path, after checking it is a regular file that starts with the GGUF magic."""
    where = Path(os.fspath(path))
    if not where.is_file():
        raise CheckpointError(f"GGUF file {str(where)!r} does not exist or is not a regular file")
    if not is_gguf(where):
        raise CheckpointError(
            f"{str(where)!r} does not start with the GGUF magic b'GGUF'; it is not a GGUF file (a Hugging Face "
            "model is a directory with config.json and safetensors)"
        )
    return where


def gguf_architecture(path: str | os.PathLike[str]) -> str:
    """``general.architecture`` of the GGUF file at ``path``, read from the start of its header only (a 262,144-token
    vocabulary after it is not parsed; :func:`open_gguf` reads the whole header). CheckpointError as
    :func:`open_gguf` raises it for a file that is missing, not GGUF, damaged before that key, or without it."""
    where = _gguf_file(path)
    with open(where, "rb") as handle, _mmap.mmap(handle.fileno(), 0, access=_mmap.ACCESS_READ) as pages:
        found = find_architecture(pages, where)
    if found is None:
        raise CheckpointError(f"GGUF file {str(where)!r} has no general.architecture string in its metadata")
    return found


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """The GGUF file at ``path``, parsed by the ``gguf`` package over a copy-on-write mapping.

    A missing file, a file that is not GGUF, a header that cannot be read within the file (a count, a length
    or an offset past its end, arrays nested too deep, tensors out of order or overlapping:
    :mod:`packrt_io._gguf_bounds`), or one the reader rejects raises
    :class:`~packrt_core.errors.CheckpointError` naming the path and the key or tensor.
    """
    where = _gguf_file(path)
    package = _gguf_package()
    reader_class = _fast_reader(package)
    fd = os.open(where, os.O_RDONLY)
    try:
        mapped = MappedFile(str(where), fd, identity(fd))
    except BaseException:
        os.close(fd)
        raise
    with _mmap.mmap(fd, 0, access=_mmap.ACCESS_READ) as pages:  # the fd closes with ``mapped``
        check_header(
            pages, where, package.GGML_QUANT_SIZES
        )  # every count and offset within the file, before the reader trusts them
    try:
        reader = reader_class(where, "c")  # "c": copy-on-write, a write never reaches the file
    except (ValueError, KeyError, IndexError, OSError) as err:
        raise CheckpointError(f"GGUF file {str(where)!r} cannot be read by the gguf package: {err}") from err
    mapping = mapping_under(reader.data)
    if mapping is not None:
        name_mapped_file(mapping, str(where))  # so memory_report names the file a weight's pages come from
    if len(reader.data) != mapped.identity[2]:
        raise CheckpointError(f"GGUF file {str(where)!r} changed size while it was opened; open it again")
    return GGUFFile(where, reader, mapped)


__all__ = [
    "DEQUANTISED_TYPES",
    "STORED_TYPES",
    "SUPPORTED_TYPES",
    "GGUFFile",
    "GGUFTensor",
    "gguf_architecture",
    "is_gguf",
    "open_gguf",
]
