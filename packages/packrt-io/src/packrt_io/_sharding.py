"""Writing a checkpoint as one file or as shards plus an index, each file replaced atomically.

Shards are named ``<stem>-00001-of-00003.safetensors`` after the Hugging Face convention and filled
greedily in key order up to ``max_shard_size`` (a tensor larger than the limit gets a shard of its own).
Each shard is written with the atomic single-file writer; the index is written last, so until it lands
the previous index still describes the previous shards. Every shard and the index carry one random
``packrt.save_id``: a load that finds a shard from another save (an interrupted overwrite) refuses it.
After the new checkpoint is in place, the files of the other form at the same target (a previous single
file, or a previous index and its shards that the new one no longer names) are removed, so a directory
never keeps a stale checkpoint beside the current one for long.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from packrt_core.errors import CheckpointError
from packrt_io import _writer
from packrt_io._layout import INDEX_NAME, SAVE_ID_KEY, SINGLE_NAME, PathLike, read_index

_UNITS: Final = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*")


def parse_size(size: int | str) -> int:
    """Bytes for ``size``: a positive int, or a string such as ``"500MB"`` (10**6) or ``"2GiB"`` (2**30)."""
    if isinstance(size, int) and not isinstance(size, bool):
        if size > 0:
            return size
    elif isinstance(size, str):
        match = _SIZE.fullmatch(size)
        if match and match.group(2).lower() in _UNITS:
            count = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
            if count > 0:
                return count
    raise CheckpointError(
        f"max_shard_size {size!r} is not a positive size: give bytes as an int, or a string such as "
        f"'500MB' or '2GiB' (units: {', '.join(unit.upper() for unit in _UNITS if unit)})"
    )


@dataclass(frozen=True)
class Target:
    """Where a save goes: the single-file path, the index path, and the shards' name stem."""

    single: Path
    index: Path
    stem: str


def target_for(path: PathLike) -> Target:
    """The target of a save to ``path``: a ``.safetensors`` file, an ``.index.json``, or a directory.

    Any other path is a directory (created when missing) that receives ``model.safetensors`` or
    ``model.safetensors.index.json`` with its shards.
    """
    given = Path(os.fspath(path))
    name = given.name
    if name.endswith(".index.json"):
        base = name[: -len(".index.json")]
        single = given.with_name(base if base.endswith(".safetensors") else base + ".safetensors")
        return Target(single, given, single.name[: -len(".safetensors")])
    if name.endswith(".safetensors") and not given.is_dir():
        return Target(given, given.with_name(name + ".index.json"), name[: -len(".safetensors")])
    given.mkdir(parents=True, exist_ok=True)
    return Target(given / SINGLE_NAME, given / INDEX_NAME, SINGLE_NAME[: -len(".safetensors")])


def plan_shards(sizes: Mapping[str, int], limit: int) -> list[list[str]]:
    """Keys grouped into shards of at most ``limit`` bytes each, in order (an oversize tensor alone)."""
    shards: list[list[str]] = []
    used = limit + 1
    for key, nbytes in sizes.items():
        if shards and used + nbytes <= limit:
            shards[-1].append(key)
            used += nbytes
        else:
            shards.append([key])
            used = nbytes
    return shards


def _write_text_atomically(path: Path, text: str) -> None:
    temporary = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        try:
            data = memoryview(text.encode("utf-8"))
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if _writer.before_replace is not None:
            _writer.before_replace(temporary, path)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _writer._fsync_directory(path.parent)


def _previous_shards(index: Path) -> set[str]:
    # Only shards a readable index names are ever deleted: nothing is guessed from file names.
    if not index.is_file():
        return set()
    try:
        weight_map, _ = read_index(index)
    except CheckpointError:
        return set()
    return set(weight_map.values())


def _remove(directory: Path, names: set[str]) -> None:
    for name in sorted(names):
        (directory / name).unlink(missing_ok=True)


def write_checkpoint(
    arrays: Mapping[str, np.ndarray[Any, Any]],
    target: Target,
    metadata: Mapping[str, str],
    max_shard_size: int | str | None,
) -> Path:
    """Write ``arrays`` with ``metadata`` to ``target`` (sharded when over ``max_shard_size``).

    Returns the path to load from: the single file, or the index when the checkpoint was sharded.
    """
    limit = None if max_shard_size is None else parse_size(max_shard_size)
    groups = [list(arrays)] if limit is None else plan_shards({k: a.nbytes for k, a in arrays.items()}, limit)
    directory = target.index.parent
    stale = _previous_shards(target.index)
    if len(groups) <= 1:
        _writer.save_arrays(arrays, target.single, metadata)
        if target.index.is_file():
            target.index.unlink()
        _remove(directory, stale - {target.single.name})
        return target.single
    save_id = secrets.token_hex(8)
    shard_metadata = {**metadata, SAVE_ID_KEY: save_id}
    count = len(groups)
    weight_map: dict[str, str] = {}
    total = 0
    for number, keys in enumerate(groups, start=1):
        name = f"{target.stem}-{number:05d}-of-{count:05d}.safetensors"
        _writer.save_arrays({key: arrays[key] for key in keys}, directory / name, shard_metadata)
        weight_map.update(dict.fromkeys(keys, name))
        total += sum(arrays[key].nbytes for key in keys)
    index = {
        "metadata": {"total_size": total, **shard_metadata},
        "weight_map": dict(sorted(weight_map.items())),
    }
    _write_text_atomically(target.index, json.dumps(index, indent=2, ensure_ascii=False) + "\n")
    _remove(directory, stale - set(weight_map.values()))
    target.single.unlink(missing_ok=True)
    return target.index


__all__ = ["Target", "parse_size", "plan_shards", "target_for", "write_checkpoint"]
