"""Saves that cannot break a loadable checkpoint: stopped at every step, on a full disk, and modes kept.

Every file-system step of a save (create, write, fsync, rename, remove) goes through ``packrt_io._fs``,
whose ``os`` these tests replace with one that stops at step ``k``: by raising (cleanup handlers run)
or by ``os._exit`` in a forked child (nothing runs: a kill). For every ``k`` the target must then load
as the previous checkpoint or as the new one, bit for bit. A safetensors file's bytes are written by
the safetensors library, not through ``os``: its failures are the library's own, given to it directly.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import signal
import stat
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors

import packrt_core
import packrt_io
from packrt_core.errors import CheckpointError
from packrt_io import _fs

_KILLED = 17


class _InjectedCrashError(Exception):
    """The injected failure."""


class _StoppingOS:
    """``os`` with a counter on every step a save takes; at step ``stop`` it raises or exits."""

    def __init__(self, stop: int, *, kill: bool = False, error: OSError | None = None) -> None:
        self.stop, self.kill, self.error, self.steps = stop, kill, error, 0
        self.kinds: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def _step(self, kind: str) -> None:
        self.steps += 1
        self.kinds.append(kind)
        if self.steps == self.stop:
            if self.kill:
                os._exit(_KILLED)
            if self.error is not None and kind == "write":
                raise self.error
            raise _InjectedCrashError(f"stopped at step {self.steps} ({kind})")

    def open(self, path: Any, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_CREAT:
            self._step("create")
        return os.open(path, flags, mode)

    def write(self, fd: int, data: Any) -> int:
        self._step("write")
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        self._step("fsync")
        os.fsync(fd)

    def replace(self, source: Any, target: Any) -> None:
        self._step("rename")
        os.replace(source, target)

    def unlink(self, path: Any) -> None:
        self._step("remove")
        os.unlink(path)


def _module(fake: type[Any], count: int, value: float) -> Any:
    return fake({f"w{i}": packrt_core.from_numpy(np.full(8, value + i, np.float32)) for i in range(count)})


# (name, previous save's shard limit, new save's shard limit); 32 bytes is one tensor a shard.
_SCENARIOS = [
    pytest.param(None, None, id="single-to-single"),
    pytest.param(32, 64, id="sharded-to-sharded"),
    pytest.param(None, 32, id="single-to-sharded"),
    pytest.param(32, None, id="sharded-to-single"),
]


def _state(directory: Path) -> dict[str, bytes]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", packrt_io.CheckpointLeftoverWarning)
        arrays, _, _ = packrt_io.load_checkpoint_arrays(directory)
    return {key: array.tobytes() for key, array in arrays.items()}


def _save(fake: type[Any], directory: Path, limit: int | None, value: float) -> None:
    packrt_io.save_checkpoint(_module(fake, 4, value), directory, max_shard_size=limit)


def _steps_of_a_save(tmp_path: Path, fake: type[Any], before: int | None, after: int | None) -> int:
    directory = tmp_path / "count"
    _save(fake, directory, before, 1.0)
    counter = _StoppingOS(stop=-1)
    real = _fs.os
    _fs.os = counter  # type: ignore[assignment]
    try:
        _save(fake, directory, after, 5.0)
    finally:
        _fs.os = real
    return counter.steps


def _forked_save(fake: type[Any], directory: Path, limit: int | None, stop: int) -> int:
    pid = os.fork()
    if pid == 0:  # the child: save with a kill at step `stop`, never return into pytest
        code = 0
        try:
            _fs.os = _StoppingOS(stop, kill=True)  # type: ignore[assignment]
            _save(fake, directory, limit, 5.0)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the kill test forks")
@pytest.mark.parametrize(("before", "after"), _SCENARIOS)
def test_a_save_stopped_at_any_step_leaves_the_previous_or_the_new_checkpoint(
    tmp_path: Path, fake_module: type[Any], before: int | None, after: int | None
) -> None:
    total = _steps_of_a_save(tmp_path, fake_module, before, after)
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    _save(fake_module, old_dir, before, 1.0)
    _save(fake_module, new_dir, after, 5.0)
    old, new = _state(old_dir), _state(new_dir)
    outcomes = []
    for stop in range(1, total + 1):
        for kill in (False, True):
            directory = tmp_path / f"{'kill' if kill else 'raise'}-{stop}"
            _save(fake_module, directory, before, 1.0)
            if kill:
                assert _forked_save(fake_module, directory, after, stop) == _KILLED
            else:
                real = _fs.os
                _fs.os = _StoppingOS(stop)  # type: ignore[assignment]
                try:
                    with pytest.raises(_InjectedCrashError, match=f"stopped at step {stop} "):
                        _save(fake_module, directory, after, 5.0)
                finally:
                    _fs.os = real
            loaded = _state(directory)
            assert loaded in (old, new), f"stopped at step {stop} of {total} (kill={kill}): neither checkpoint"
            outcomes.append(loaded == new)
    # The switch is one step: before it every stop loads the old checkpoint, after it the new one.
    assert outcomes[0] is False
    assert outcomes == sorted(outcomes)
    # A save that finishes leaves exactly the new checkpoint, with nothing to warn about.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        arrays, info, _ = packrt_io.load_checkpoint_arrays(new_dir)
    assert info.ignored == ()
    assert {key: array.tobytes() for key, array in arrays.items()} == new


def _full_disk(tensors: Any, filename: Any, metadata: Any = None) -> None:
    """The safetensors library's ``serialize_file`` on a full disk: what it raises (its I/O error's text)."""
    raise safetensors.SafetensorError(
        f'Error while serializing: I/O error: No space left on device (os error 28) at path "{filename}"'
    )


def test_a_full_disk_keeps_the_previous_checkpoint_and_names_the_path(
    tmp_path: Path, fake_module: type[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for limit in (None, 32):
        directory = tmp_path / f"limit-{limit}"
        _save(fake_module, directory, limit, 1.0)
        before = _state(directory)
        listing = sorted(p.name for p in directory.iterdir())
        with monkeypatch.context() as patch:
            patch.setattr(safetensors, "serialize_file", _full_disk)
            with pytest.raises(
                CheckpointError, match=r"saving checkpoint '.*limit-.*' failed.*No space left"
            ) as caught:
                _save(fake_module, directory, limit, 5.0)
        assert isinstance(caught.value, OSError)
        assert caught.value.errno == errno.ENOSPC
        assert str(directory) in str(caught.value)
        assert _state(directory) == before
        assert sorted(p.name for p in directory.iterdir()) == listing


def test_a_full_disk_while_writing_the_index_keeps_the_previous_checkpoint(
    tmp_path: Path, fake_module: type[Any]
) -> None:
    directory = tmp_path / "sharded"
    _save(fake_module, directory, 32, 1.0)
    before = _state(directory)
    real, counter = _fs.os, _StoppingOS(-1)
    _fs.os = counter  # type: ignore[assignment]
    try:
        _save(fake_module, tmp_path / "count", 32, 5.0)
    finally:
        _fs.os = real
    index_write = counter.kinds.index("write") + 1  # the shards' bytes are the library's: the first os write
    _fs.os = _StoppingOS(index_write, error=OSError(errno.ENOSPC, "No space left on device"))  # type: ignore[assignment]
    try:
        with pytest.raises(CheckpointError, match=r"index\.json' failed while writing it \(No space left") as caught:
            _save(fake_module, directory, 32, 5.0)
    finally:
        _fs.os = real
    assert isinstance(caught.value, OSError) and caught.value.errno == errno.ENOSPC
    assert _state(directory) == before  # the new shards stay as leftovers a load names, never loads


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the file-size limit is set in a forked child")
def test_a_write_the_file_system_refuses_keeps_the_previous_file_and_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    packrt_io.save_file({"w": np.ones(4, np.float32)}, path)
    before = path.read_bytes()
    pid = os.fork()
    if pid == 0:  # the child: a file-size limit makes the library's own write fail (EFBIG), for real
        code = 1
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
            packrt_io.save_file({"w": np.zeros(1 << 16, np.float32)}, path)
        except CheckpointError as err:
            refused = isinstance(err, OSError) and err.errno == errno.EFBIG
            code = 0 if refused and str(path) in str(err) and "File too large" in str(err) else 2
        except BaseException:
            code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the refused write was not a CheckpointWriteError naming the path"
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the kill happens in a forked child")
def test_a_save_killed_inside_the_librarys_write_keeps_the_previous_checkpoint_and_names_its_leftover(
    tmp_path: Path, fake_module: type[Any]
) -> None:
    directory = tmp_path / "ckpt"
    _save(fake_module, directory, None, 1.0)
    before = _state(directory)
    pid = os.fork()
    if pid == 0:  # the child: over a file-size limit the kernel kills it (SIGXFSZ) in the library's write
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python starts with it ignored
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
            packrt_io.save_checkpoint(
                fake_module({"w0": packrt_core.from_numpy(np.ones(1 << 16, np.float32))}), directory
            )
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXFSZ
    library_temporaries = [p.name for p in directory.iterdir() if p.name.startswith(".tmp")]
    assert len(library_temporaries) == 1, sorted(p.name for p in directory.iterdir())
    with pytest.warns(packrt_io.CheckpointLeftoverWarning, match=re.escape(library_temporaries[0])):
        arrays, info, _ = packrt_io.load_checkpoint_arrays(directory)
    assert {key: array.tobytes() for key, array in arrays.items()} == before
    assert library_temporaries[0] in {path.name for path in info.ignored}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_resaved_file_keeps_its_mode(tmp_path: Path, fake_module: type[Any]) -> None:
    path = tmp_path / "one.safetensors"
    packrt_io.save_file({"w": np.ones(3, np.float32)}, path)
    path.chmod(0o600)
    packrt_io.save_file({"w": np.zeros(3, np.float32)}, path)
    assert _mode(path) == 0o600
    directory = tmp_path / "ckpt"
    _save(fake_module, directory, None, 1.0)
    (directory / "model.safetensors").chmod(0o640)
    _save(fake_module, directory, None, 2.0)
    assert _mode(directory / "model.safetensors") == 0o640
    _save(fake_module, directory, 32, 3.0)  # to shards: every new file takes the checkpoint's mode
    assert {_mode(p) for p in directory.iterdir()} == {0o640}
    _save(fake_module, directory, 64, 4.0)
    assert {_mode(p) for p in directory.iterdir()} == {0o640}


def test_only_the_fs_module_changes_the_file_system() -> None:
    # The seam the tests above rely on: every write, rename and removal goes through packrt_io._fs.
    package = Path(str(packrt_io.__file__)).parent
    for source in package.glob("*.py"):
        if source.name == "_fs.py":
            continue
        text = source.read_text()
        for call in ("os.replace(", "os.rename(", "os.unlink(", "os.remove(", "os.write(", ".unlink(", "os.fsync("):
            assert call not in text, f"{source.name} calls {call} outside packrt_io._fs"
