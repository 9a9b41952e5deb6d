"""``load_checkpoint`` / ``save_checkpoint``: a module's whole state to and from safetensors.

A checkpoint holds every tensor of ``module.state_dict()`` once. What is not a tensor travels in the
``__metadata__`` as JSON strings, never pickled: ``packrt.ties`` maps each other name of a tied tensor
to the name it was saved under, and ``packrt.extra_state.<module path>`` holds a module's
``get_extra_state()``. On load the tie's names receive the same Tensor object, so
``load_state_dict(assign=True)`` makes them one shared Parameter again, and each extra state value is
handed back under ``<module path>._extra_state``. The load itself is the module's transactional
``load_state_dict``: a missing key under ``strict`` or a shape that does not fit raises its
StateDictError and leaves the module as it was.
"""

from __future__ import annotations

import importlib
import json
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from packrt_core.errors import CheckpointError, DTypeError, PackrtError
from packrt_core.publication import joining, publishing
from packrt_io._arrays import as_array
from packrt_io._guard import FileGuard, MappedFile
from packrt_io._header import gc_paused
from packrt_io._layout import (
    EXTRA_STATE_PREFIX,
    RESERVED_PREFIX,
    TIES_KEY,
    CheckpointInfo,
    CheckpointLeftoverWarning,
    PathLike,
    describe_leftovers,
    survey,
)
from packrt_io._reader import LoadReport, load_with_header
from packrt_io._sharding import target_for, write_checkpoint

EXTRA_STATE_SUFFIX = "_extra_state"


class CheckpointModule(Protocol):
    """The calls checkpoints make on a module, each with the keywords it passes (``packrt.nn.Module``
    takes them all, as does any module that keeps the Module contract)."""

    def state_dict(self, *, keep_vars: bool) -> dict[str, Any]:
        """The module's flat tensor dict; saves call it with ``keep_vars=True`` to see ties."""

    def named_parameters(self, *, remove_duplicate: bool) -> Iterator[tuple[str, Any]]:
        """Every parameter by dotted name; saves call it with ``remove_duplicate=False`` to find ties."""

    def named_buffers(self, *, remove_duplicate: bool) -> Iterator[tuple[str, Any]]:
        """Every buffer by dotted name; saves call it with ``remove_duplicate=False`` to find ties."""

    def load_state_dict(
        self, state_dict: Mapping[str, Any], *, strict: bool, assign: bool, pack: bool, weight_residency: str | None
    ) -> Any:
        """Bind a flat dict of tensors by name; loads pass every keyword (``assign=True`` for zero-copy)."""


# -- progress ----------------------------------------------------------------------------------------


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def open_progress(progress: bool | None, total: int, description: str) -> Any:
    """A tqdm bar of ``total`` bytes, or None for quiet.

    ``progress=None`` shows one only when stderr is a terminal; ``True`` shows one wherever stderr goes;
    ``False`` never does. Without tqdm installed (the ``progress`` extra) loads are always quiet.
    """
    if progress is False or (progress is None and not _stderr_is_terminal()):
        return None
    try:
        tqdm_module = importlib.import_module("tqdm")
    except ImportError:
        return None
    return tqdm_module.tqdm(total=total, desc=description, unit="B", unit_scale=True, leave=False)


# -- loading -----------------------------------------------------------------------------------------


def load_checkpoint_arrays(
    path: PathLike, *, mmap: bool = True, progress: bool | None = None
) -> tuple[dict[str, np.ndarray[Any, Any]], CheckpointInfo, tuple[LoadReport, ...]]:
    """Every tensor of a checkpoint (file, index or directory) as numpy arrays, with its layout.

    All headers are validated, and every shard checked against the index, before any data is mapped;
    each header is read once. Returns the arrays (copy-on-write views with ``mmap=True``), the layout,
    and one LoadReport a file. Leftovers of an interrupted save beside the checkpoint are not loaded:
    a :class:`CheckpointLeftoverWarning` names them (and ``CheckpointInfo.ignored`` lists them).
    """
    info, headers = survey(path)
    if info.ignored:
        warnings.warn(describe_leftovers(info), CheckpointLeftoverWarning, stacklevel=2)
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    reports: list[LoadReport] = []
    bar = open_progress(progress, info.total_bytes, f"loading {info.path.name}")
    try:
        for shard in info.shards:
            shard_arrays, report = load_with_header(shard, headers[shard], mmap=mmap)
            arrays.update(shard_arrays)
            reports.append(report)
            if bar is not None:
                bar.update(report.data_bytes)
    finally:
        if bar is not None:
            bar.close()
    return arrays, info, tuple(reports)


def as_tensors(path: object, arrays: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, Any]:
    """The arrays as packrt Tensors; a dtype packrt-core refuses is a DTypeError naming file and tensor."""
    from packrt_core import from_numpy

    tensors: dict[str, Any] = {}
    with gc_paused():
        for key, array in arrays.items():
            try:
                tensors[key] = from_numpy(array)
            except DTypeError as err:
                raise DTypeError(
                    f"checkpoint {str(path)!r}, tensor {key!r}: {err}; load it with packrt_io.load_arrays "
                    "to read it as numpy"
                ) from err
    return tensors


def _capped(message: str, names: int = 20, lines: int = 40) -> str:
    """``message`` with each line's comma-separated list cut to ``names`` items and at most ``lines`` lines."""
    kept = []
    rows = message.split("\n")
    for row in rows[:lines]:
        items = row.split(", ")
        if len(items) > names:
            row = ", ".join(items[:names]) + f", ... and {len(items) - names} more"
        kept.append(row if len(row) <= 4000 else row[:4000] + f"... ({len(row) - 4000} more characters)")
    if len(rows) > lines:
        kept.append(f"  ... and {len(rows) - lines} more lines")
    return "\n".join(kept)


def _annotate(err: PackrtError, info: CheckpointInfo) -> None:
    """Name the checkpoint in a load error from the module, and cap its lists of names."""
    message = str(err.args[0]) if len(err.args) == 1 else str(err)
    err.args = (f"checkpoint {str(info.path)!r}: " + _capped(message),)


def load_checkpoint(
    module: CheckpointModule,
    path: PathLike,
    *,
    progress: bool | None = None,
    strict: bool = True,
    assign: bool = True,
    pack: bool = False,
    weight_residency: str | None = None,
) -> Any:
    """Load a checkpoint (file, index, or directory holding either) into ``module``; return its result.

    The tensors are copy-on-write views of the mapped files; with ``assign=True`` (the default) the
    module binds them without copying. Ties come back as one tensor under every name, extra state as
    the JSON value saved. The file layer is validated first (CheckpointError); then ``strict``,
    ``assign``, ``pack`` and ``weight_residency`` go to ``module.load_state_dict``, whose
    ``_IncompatibleKeys`` is returned and whose StateDictError leaves the module unchanged (its message
    then names the checkpoint too, with long lists of keys cut short).
    """
    arrays, info, reports = load_checkpoint_arrays(path, progress=progress)
    state = as_tensors(info.path, arrays)
    for alias, primary in info.ties().items():
        state[alias] = state[primary]
    state.update(info.extra_state())
    files = tuple(r.mapped_file for r in reports if r.mapped_file is not None) if assign else ()
    try:
        with guarding(module, files):
            return module.load_state_dict(
                state, strict=strict, assign=assign, pack=pack, weight_residency=weight_residency
            )
    except BaseException as err:
        if isinstance(err, PackrtError):
            _annotate(err, info)
        elif isinstance(err, Exception):
            err.add_note(f"while loading checkpoint {str(info.path)!r} into {type(module).__name__}")
        raise


@contextmanager
def guarding(module: Any, files: tuple[MappedFile, ...]) -> Iterator[None]:
    """The block loads ``module`` from ``files`` (mapped pages it binds); from the load's commit on,
    each call of the module first checks they are unchanged (:class:`FileGuard`).

    The guard hook is registered before the block (a registration can fail). The load's commit
    stores the new file list into it as its own last step (``packrt_core.publication.joining``), so
    a forward on another thread checks exactly the files of the weights it serves. A block that
    raises withdraws a registration made for it and leaves the guard's files as they were. A module
    keeps one guard across loads; a load that maps no file leaves it watching none.
    """
    file_guard, registered = _prepare_guard(module, files)
    if file_guard is None:
        yield
        return
    chosen = file_guard

    def store() -> None:
        chosen.files = files

    try:
        with joining(store) as ran:
            yield
    except BaseException:
        if registered:
            _withdraw_guard(module)
        raise
    if not ran[0]:  # a module whose load does not commit through packrt_core's publication
        with publishing():
            store()


_GUARD_HANDLE = "_packrt_io_mapped_files"


def _prepare_guard(module: Any, files: tuple[MappedFile, ...]) -> tuple[FileGuard | None, bool]:
    """The guard that will check, before each call of ``module``, the files it serves from after the
    load (an assign-load binds their mapped pages), and whether it was registered just now.

    A module keeps one guard across loads; a load that maps no file reuses it with no files.
    """
    held = getattr(module, _GUARD_HANDLE, None)
    if isinstance(held, tuple):
        return held[0], False
    register = getattr(module, "register_forward_pre_hook", None)
    if not files or register is None:
        return None, False
    file_guard = FileGuard()
    handle = register(file_guard)
    try:
        object.__setattr__(module, _GUARD_HANDLE, (file_guard, handle))
    except BaseException:
        handle.remove()
        raise
    return file_guard, True


def mapped_files(module: Any) -> tuple[MappedFile, ...]:
    """The memory-mapped checkpoint files ``module`` serves from, as its guard checks them before each
    call (empty for a module that maps none). ``file.check()`` on each raises a CheckpointError naming
    a file that changed since the load: a server's health check asks this without running the model."""
    held = getattr(module, _GUARD_HANDLE, None)
    return held[0].files if isinstance(held, tuple) else ()


def _guard_mapped_files(module: Any, files: Iterable[MappedFile]) -> None:
    """Check, before each call of ``module``, that ``files`` (which it now serves from) are unchanged;
    for a model built from them (a GGUF file's), where no load needs undoing."""
    chosen = tuple(files)
    file_guard, _ = _prepare_guard(module, chosen)
    if file_guard is not None:
        file_guard.files = chosen


def _withdraw_guard(module: Any) -> None:
    """Undo :func:`_prepare_guard`'s registration (the load it was for failed)."""
    _, handle = getattr(module, _GUARD_HANDLE)
    handle.remove()
    object.__delattr__(module, _GUARD_HANDLE)


# -- saving ------------------------------------------------------------------------------------------


def _module_path(key: str) -> str:
    return key[: -len(EXTRA_STATE_SUFFIX)].rstrip(".")


def _is_extra_state(key: str) -> bool:
    return key == EXTRA_STATE_SUFFIX or key.endswith("." + EXTRA_STATE_SUFFIX)


def _encode_extra_state(module_path: str, value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as err:
        shown = repr(module_path) if module_path else "'' (the root module)"
        raise TypeError(
            f"extra state of module {shown} is a {type(value).__name__} that is not JSON ({err}); "
            "checkpoints carry extra state as JSON only (no pickle): return dicts, lists, strings, "
            "finite numbers, booleans or None from get_extra_state"
        ) from err


def _tensor_array(key: str, value: Any) -> np.ndarray[Any, Any]:
    if getattr(value, "has_storage", True) is False:
        raise CheckpointError(
            f"tensor {key!r} has no storage (declared under meta_init and never loaded), so there is "
            "nothing to save; load or initialize its values first"
        )
    try:
        return as_array(key, value)
    except PackrtError:
        raise
    except Exception as err:
        raise CheckpointError(f"tensor {key!r} could not be read for saving ({err})") from err


def _named_tensors(module: CheckpointModule) -> Iterator[tuple[str, Any]]:
    yield from module.named_parameters(remove_duplicate=False)
    yield from module.named_buffers(remove_duplicate=False)


def _user_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    merged = {"format": "pt"}
    for name, value in (metadata or {}).items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise CheckpointError(
                f"metadata entry {name!r}: {value!r} is not str -> str; serialize other values first "
                "(for example with json.dumps)"
            )
        if name.startswith(RESERVED_PREFIX):
            raise CheckpointError(
                f"metadata key {name!r} uses the prefix {RESERVED_PREFIX!r}, which packrt reserves for "
                "ties and extra state; choose another name"
            )
        merged[name] = value
    return merged


def save_checkpoint(
    module: CheckpointModule,
    path: PathLike,
    *,
    max_shard_size: int | str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """Save ``module.state_dict()`` to ``path`` and return the file (or index) to load it from.

    ``path`` is a ``.safetensors`` file, an ``.index.json``, or a directory (``model.safetensors``
    inside). With ``max_shard_size`` (bytes, or ``"500MB"``, ``"2GiB"``) a larger state is split into
    ``<stem>-00001-of-0000N.safetensors`` shards plus an index, written last. A tensor tied under
    several names is saved once; extra state must be JSON (TypeError naming the module otherwise).
    ``metadata`` (str -> str, ``format`` defaults to ``"pt"``) is stored in every file written.
    """
    user_metadata = _user_metadata(metadata)
    state = module.state_dict(keep_vars=True)
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    extra: dict[str, str] = {}
    saved_as: dict[int, str] = {}
    ties: dict[str, str] = {}
    for key, value in state.items():
        if _is_extra_state(key):
            module_path = _module_path(key)
            extra[EXTRA_STATE_PREFIX + module_path] = _encode_extra_state(module_path, value)
        elif id(value) in saved_as:
            ties[key] = saved_as[id(value)]
        else:
            arrays[key] = _tensor_array(key, value)
            saved_as[id(value)] = key
    for name, tensor in _named_tensors(module):
        if name not in state and id(tensor) in saved_as:
            ties[name] = saved_as[id(tensor)]
    checkpoint_metadata = {**user_metadata, **extra}
    if ties:
        checkpoint_metadata[TIES_KEY] = json.dumps(dict(sorted(ties.items())), separators=(",", ":"))
    return write_checkpoint(arrays, target_for(path), checkpoint_metadata, max_shard_size)


__all__ = [
    "CheckpointModule",
    "as_tensors",
    "guarding",
    "load_checkpoint",
    "load_checkpoint_arrays",
    "open_progress",
    "save_checkpoint",
]
