"""Finding a checkpoint on disk and reading its layout from headers alone (no tensor data).

A checkpoint is one safetensors file, or a Hugging Face style index ``*.safetensors.index.json`` of
``{"metadata": {...}, "weight_map": {tensor: shard file}}`` beside its shards, or a directory holding
``model.safetensors`` or ``model.safetensors.index.json``. The index is trusted for nothing: every shard
it names must be a plain file name in its own directory that exists, and each shard must hold exactly
the tensors the index lists for it. Any disagreement is a CheckpointError naming the index, the shard
and the tensor, so a load never silently takes one tensor's value over another's.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NoReturn

from packrt_core.errors import CheckpointError
from packrt_io._header import Header
from packrt_io._reader import _read_header

SINGLE_NAME: Final = "model.safetensors"
INDEX_NAME: Final = "model.safetensors.index.json"
# Metadata keys packrt owns; users may not set keys under this prefix.
RESERVED_PREFIX: Final = "packrt."
TIES_KEY: Final = "packrt.ties"
EXTRA_STATE_PREFIX: Final = "packrt.extra_state."
SAVE_ID_KEY: Final = "packrt.save_id"

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its header describes it: safetensors dtype name, shape, bytes, and its file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint's layout read from its headers: what ``inspect`` shows and ``check`` compares.

    ``path`` is the file or index the user's path resolved to; ``index`` is set when it is sharded.
    ``metadata`` is the file's ``__metadata__`` (sharded: the string entries of the index's
    ``metadata``); ``index_metadata`` is the index's whole ``metadata`` object (e.g. ``total_size``).
    """

    path: Path
    index: Path | None
    tensors: dict[str, TensorInfo]
    shards: tuple[Path, ...]
    metadata: dict[str, str] = field(default_factory=dict)
    index_metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def sharded(self) -> bool:
        """True when the checkpoint is an index over shard files."""
        return self.index is not None

    @property
    def total_bytes(self) -> int:
        """Tensor bytes over every shard."""
        return sum(info.nbytes for info in self.tensors.values())

    def ties(self) -> dict[str, str]:
        """Tied names saved once: alias key -> the key whose tensor it shares (from ``packrt.ties``)."""
        raw = self.metadata.get(TIES_KEY)
        if raw is None:
            return {}
        try:
            ties = json.loads(raw)
        except ValueError as err:
            _fail(self.path, f"metadata {TIES_KEY!r} is not valid JSON ({err})")
        if not isinstance(ties, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in ties.items()):
            _fail(self.path, f"metadata {TIES_KEY!r} must be a JSON object of alias -> key strings")
        for alias, primary in ties.items():
            if primary not in self.tensors:
                _fail(self.path, f"tie {alias!r} -> {primary!r} names a tensor the checkpoint lacks")
            if alias in self.tensors:
                _fail(
                    self.path,
                    f"{alias!r} is both a saved tensor and a tie to {primary!r}; one key cannot be both",
                )
        return dict(ties)

    def extra_state(self) -> dict[str, Any]:
        """Module extra state, decoded from JSON: state_dict key (``<path>._extra_state``) -> value."""
        states: dict[str, Any] = {}
        for key, raw in self.metadata.items():
            if not key.startswith(EXTRA_STATE_PREFIX):
                continue
            module_path = key[len(EXTRA_STATE_PREFIX) :]
            try:
                value = json.loads(raw)
            except ValueError as err:
                _fail(self.path, f"extra state of module {module_path!r} is not valid JSON ({err})")
            states[f"{module_path}._extra_state" if module_path else "_extra_state"] = value
        return states


def _fail(path: Path, problem: str, *, shard: str | None = None, key: str | None = None, fix: str = "") -> NoReturn:
    kind = "checkpoint index" if path.name.endswith(".json") else "checkpoint"
    where = f"{kind} {str(path)!r}"
    if shard is not None:
        where += f", shard {shard!r}"
    if key is not None:
        where += f", tensor {key!r}"
    raise CheckpointError(f"{where}: {problem}" + (f"; {fix}" if fix else ""))


def resolve(path: PathLike) -> tuple[Path, bool]:
    """The file a checkpoint path names, and whether it is an index.

    A directory must hold exactly one of ``model.safetensors`` and ``model.safetensors.index.json``. A
    ``.json`` path is an index. A missing ``x.safetensors`` falls back to ``x.safetensors.index.json``.
    """
    target = Path(os.fspath(path))
    if target.is_dir():
        single, index = target / SINGLE_NAME, target / INDEX_NAME
        if single.is_file() and index.is_file():
            raise CheckpointError(
                f"checkpoint directory {str(target)!r} holds both {SINGLE_NAME!r} and {INDEX_NAME!r}, so "
                "which one is current is ambiguous (an interrupted save leaves both); delete the stale one "
                "or pass the file you mean"
            )
        if single.is_file():
            return single, False
        if index.is_file():
            return index, True
        raise CheckpointError(
            f"checkpoint directory {str(target)!r} holds no checkpoint: looked for {SINGLE_NAME!r} and "
            f"{INDEX_NAME!r}; pass the checkpoint file or index itself if it is named differently"
        )
    if target.name.endswith(".json"):
        if not target.is_file():
            _fail(target, "does not exist", fix="check the path")
        return target, True
    if not target.exists():
        fallback = target.with_name(target.name + ".index.json")
        if fallback.is_file():
            return fallback, True
    return target, False


def _duplicate_tracker() -> tuple[list[tuple[str, Any, Any]], Any]:
    duplicates: list[tuple[str, Any, Any]] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for name, value in pairs:
            if name in result:
                duplicates.append((name, result[name], value))
                continue
            result[name] = value
        return result

    return duplicates, hook


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def check_shard_name(index: Path, key: str, shard: object) -> str:
    """``shard`` if it is a plain file name in the index's directory, else a CheckpointError."""
    if not isinstance(shard, str):
        _fail(index, f"weight_map value must be a shard file name string, found {shard!r}", key=key)
    separators = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if shard in ("", ".", "..") or any(sep in shard for sep in separators) or "\0" in shard:
        _fail(
            index,
            f"shard name {shard!r} is not a plain file name: shards must sit in the index's own "
            "directory (no path separators, no '..', not absolute)",
            key=key,
            fix="the index is damaged or was crafted to read files outside its directory",
        )
    return shard


def read_index(index: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """Parse and validate an index file: its weight_map (tensor -> shard name) and metadata."""
    try:
        raw = index.read_bytes()
    except OSError as err:
        _fail(index, f"cannot be read ({err.strerror})", fix="check the path and its permissions")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        _fail(index, f"is not valid UTF-8 ({err.reason} at byte {err.start})")
    duplicates, hook = _duplicate_tracker()
    try:
        parsed = json.loads(text, object_pairs_hook=hook, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:
        _fail(index, f"is not valid JSON ({err})", fix="re-save the checkpoint from its source")
    if not isinstance(parsed, dict):
        _fail(index, f"must be a JSON object with a 'weight_map', found {type(parsed).__name__}")
    weight_map = parsed.get("weight_map")
    if not isinstance(weight_map, dict):
        found = "none" if weight_map is None else type(weight_map).__name__
        _fail(index, f"needs a 'weight_map' object of tensor -> shard file, found {found}")
    for name, first, second in duplicates:
        if weight_map.get(name) is first:
            _fail(
                index,
                f"is listed twice in weight_map (shard {first!r}, then {second!r}); a tensor must "
                "come from exactly one shard",
                key=name,
            )
        _fail(index, f"key {name!r} appears twice in one JSON object")
    for key, shard in weight_map.items():
        check_shard_name(index, key, shard)
    metadata = parsed.get("metadata", {})
    if not isinstance(metadata, dict):
        _fail(index, f"'metadata' must be a JSON object, found {type(metadata).__name__}")
    return dict(weight_map), dict(metadata)


def read_header(path: Path) -> Header:
    """The validated header of one safetensors file (reads the header bytes only)."""
    where = os.fspath(path)
    try:
        fd = os.open(where, os.O_RDONLY)
    except OSError as err:
        _fail(path, f"cannot be opened ({err.strerror})", fix="check the path and its permissions")
    try:
        return _read_header(where, fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _infos(header: Header, name: str) -> dict[str, TensorInfo]:
    return {e.key: TensorInfo(e.key, e.dtype.name, e.shape, e.nbytes, name) for e in header.tensors}


def _check_shard(index: Path, shard: str, header: Header, weight_map: dict[str, str], save_id: object) -> None:
    listed = {key for key, name in weight_map.items() if name == shard}
    held = {entry.key for entry in header.tensors}
    for key in sorted(held - listed):
        elsewhere = weight_map.get(key)
        if elsewhere is None:
            _fail(index, "is in the shard but the index does not list it", shard=shard, key=key)
        _fail(index, f"is in the shard but the index lists it under shard {elsewhere!r}", shard=shard, key=key)
    for key in sorted(listed - held):
        _fail(index, "is listed for this shard by the index, but the shard lacks it", shard=shard, key=key)
    if isinstance(save_id, str) and header.metadata.get(SAVE_ID_KEY) != save_id:
        _fail(
            index,
            f"was written by a different save than the index ({SAVE_ID_KEY} "
            f"{header.metadata.get(SAVE_ID_KEY)!r}, index has {save_id!r})",
            shard=shard,
            fix="a save into this location was interrupted; save the checkpoint again",
        )


def inspect_checkpoint(path: PathLike) -> CheckpointInfo:
    """Read a checkpoint's layout (tensors, dtypes, shapes, metadata, shard map) without its data.

    ``path`` is a safetensors file, an index, or a directory holding either. Every header is validated
    in full and, when sharded, every shard is checked against the index; a defect is a CheckpointError.
    """
    resolved, is_index = resolve(path)
    if not is_index:
        header = read_header(resolved)
        return CheckpointInfo(resolved, None, _infos(header, resolved.name), (resolved,), dict(header.metadata))
    weight_map, index_metadata = read_index(resolved)
    # Shard names sort in file order (model-00001-of-..., model-00002-of-...).
    order = sorted(set(weight_map.values()))
    for shard in order:
        if not (resolved.parent / shard).is_file():
            first = next(key for key, name in weight_map.items() if name == shard)
            _fail(
                resolved,
                f"the shard does not exist in {str(resolved.parent)!r}",
                shard=shard,
                key=first,
                fix="copy the missing shard next to the index",
            )
    tensors: dict[str, TensorInfo] = {}
    for shard in order:
        header = read_header(resolved.parent / shard)
        _check_shard(resolved, shard, header, weight_map, index_metadata.get(SAVE_ID_KEY))
        tensors.update(_infos(header, shard))
    metadata = {key: value for key, value in index_metadata.items() if isinstance(value, str)}
    shards = tuple(resolved.parent / shard for shard in order)
    return CheckpointInfo(resolved, resolved, tensors, shards, metadata, index_metadata)


__all__ = [
    "EXTRA_STATE_PREFIX",
    "INDEX_NAME",
    "RESERVED_PREFIX",
    "SAVE_ID_KEY",
    "SINGLE_NAME",
    "TIES_KEY",
    "CheckpointInfo",
    "TensorInfo",
    "check_shard_name",
    "inspect_checkpoint",
    "read_header",
    "read_index",
    "resolve",
]
