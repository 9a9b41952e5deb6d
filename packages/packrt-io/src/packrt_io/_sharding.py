"""Writing a checkpoint as one file or as shards plus an index, so a crash never breaks the target.

The commit protocol (README: "Crash-safe saves"): when both a single file and an index sit at one
target, the **index wins**, and a load reports the single file as a leftover. A sharded save writes
its shards under names no file has yet (``<stem>-00001-of-00003.safetensors`` when free, else with a
fresh token: ``<stem>-<token>-00001-of-00003.safetensors``), then switches by one atomic rename of the
index (fsync of the file and of the directory), then removes the files the previous index named and
any single file. A single-file save writes the file atomically, then removes the index (the switch),
then the shards that index named. Killed at any step, the target loads as the previous checkpoint or
as the new one; the files of an unfinished save are leftovers a load names in a warning. Every shard
and the index carry one random ``packrt.save_id``, so a shard from another save is refused, never
mixed in. Shards fill greedily in key order up to ``max_shard_size`` (a tensor larger than the limit
gets a shard of its own).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from packrt_core.errors import CheckpointError
from packrt_io import _fs, _writer
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
    given = Path(_fs.path_text(path))
    try:
        return _target(given)
    except (OSError, ValueError) as err:
        _fs.write_failure(given, err, "preparing its directory")


def _target(given: Path) -> Target:
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


def shard_names(directory: Path, stem: str, count: int) -> list[str]:
    """Names for the ``count`` shards of a new save: names no file in ``directory`` has yet.

    The Hugging Face names (``<stem>-00001-of-00003.safetensors``) when all are free, as in a first
    save; else the same names with a fresh random token after the stem, so a re-save never writes over
    a shard the current index still names.
    """
    plain = [f"{stem}-{number:05d}-of-{count:05d}.safetensors" for number in range(1, count + 1)]
    while any((directory / name).exists() for name in plain):
        token = secrets.token_hex(4)
        plain = [f"{stem}-{token}-{number:05d}-of-{count:05d}.safetensors" for number in range(1, count + 1)]
    return plain


def _named_by(index: Path) -> set[str]:
    """The shard names a readable index at ``index`` lists (nothing is guessed from file names)."""
    try:
        if _fs.kind_of(index) != "file":
            return set()
        weight_map, _ = read_index(index)
    except CheckpointError:
        return set()
    return set(weight_map.values())


def _remove_all(directory: Path, names: set[str]) -> None:
    for name in sorted(names):
        try:
            _fs.remove(directory / name)
        except OSError as err:
            _fs.write_failure(
                directory / name,
                err,
                "removing a file of the previous checkpoint",
                fix="the new checkpoint is in place; delete the file by hand",
            )
    _fs.sync_directory(directory)


def _save_single(arrays: Mapping[str, np.ndarray[Any, Any]], target: Target, metadata: Mapping[str, str]) -> Path:
    # While an index exists it is what loads, so the previous checkpoint stays current until the
    # index is removed; only then are the shards it named (now unreferenced) removed.
    has_index = _fs.kind_of(target.index) == "file"
    mode = _fs.existing_mode(target.index) if has_index else None
    _writer.save_arrays(arrays, target.single, metadata, mode=mode)
    if has_index:
        old = _named_by(target.index)
        _remove_all(target.index.parent, {target.index.name})
        _remove_all(target.index.parent, old - {target.single.name})
    return target.single


def _save_sharded(
    arrays: Mapping[str, np.ndarray[Any, Any]], target: Target, metadata: Mapping[str, str], groups: list[list[str]]
) -> Path:
    directory = target.index.parent
    has_index = _fs.kind_of(target.index) == "file"
    mode = _fs.existing_mode(target.index if has_index else target.single)
    names = shard_names(directory, target.stem, len(groups))
    save_id = secrets.token_hex(8)
    shard_metadata = {**metadata, SAVE_ID_KEY: save_id}
    weight_map: dict[str, str] = {}
    total = 0
    # 1. New shards under new names: nothing the current checkpoint uses is touched.
    for name, keys in zip(names, groups, strict=True):
        _writer.save_arrays({key: arrays[key] for key in keys}, directory / name, shard_metadata, mode=mode)
        weight_map.update(dict.fromkeys(keys, name))
        total += sum(arrays[key].nbytes for key in keys)
    index = {
        "metadata": {"total_size": total, **shard_metadata},
        "weight_map": dict(sorted(weight_map.items())),
    }
    text = json.dumps(index, indent=2, ensure_ascii=False) + "\n"
    # 2. The switch: one atomic rename of the index (which wins over a single file beside it).
    old = _named_by(target.index)
    _writer.write_atomically(target.index, [text.encode("utf-8")], mode)
    # 3. What the previous checkpoint used, and nothing else, goes.
    _remove_all(directory, (old - set(weight_map.values())) | {target.single.name})
    return target.index


def write_checkpoint(
    arrays: Mapping[str, np.ndarray[Any, Any]],
    target: Target,
    metadata: Mapping[str, str],
    max_shard_size: int | str | None,
) -> Path:
    """Write ``arrays`` with ``metadata`` to ``target`` (sharded when over ``max_shard_size``).

    Returns the path to load from: the single file, or the index when the checkpoint was sharded. At
    every moment of the save the target loads as the previous checkpoint or as the new one.
    """
    limit = None if max_shard_size is None else parse_size(max_shard_size)
    groups = [list(arrays)] if limit is None else plan_shards({k: a.nbytes for k, a in arrays.items()}, limit)
    if len(groups) <= 1:
        return _save_single(arrays, target, metadata)
    return _save_sharded(arrays, target, metadata, groups)


__all__ = ["Target", "parse_size", "plan_shards", "shard_names", "target_for", "write_checkpoint"]
