"""Saving refuses what the format cannot hold, and replaces a file only once the new one is complete."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packrt_io
from packrt_core.errors import CheckpointError, DTypeError
from packrt_io import _writer


@pytest.mark.parametrize(
    "array",
    [np.zeros(2, np.complex64), np.zeros(2, np.longdouble), np.array(["a"]), np.array([object()])],
    ids=["complex64", "longdouble", "str", "object"],
)
def test_a_dtype_the_format_cannot_hold_is_refused_by_name(tmp_path: Path, array: np.ndarray[Any, Any]) -> None:
    path = tmp_path / "bad.safetensors"
    with pytest.raises(DTypeError, match=f"tensor 'x' has dtype {array.dtype} which safetensors cannot store"):
        packrt_io.save_file({"x": array}, path)
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_the_metadata_key_cannot_name_a_tensor(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="'__metadata__' is reserved for metadata"):
        packrt_io.save_file({"__metadata__": np.zeros(1, np.float32)}, tmp_path / "m.safetensors")


def test_tensor_keys_must_be_strings(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="tensor keys must be strings, found int 3"):
        packrt_io.save_file({3: np.zeros(1, np.float32)}, tmp_path / "k.safetensors")  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("metadata", "pattern"),
    [({"v": 3}, "metadata entry 'v': 3 is not str -> str"), ([("a", "b")], "metadata must be a mapping")],
    ids=["integer-value", "list"],
)
def test_metadata_must_map_strings_to_strings(tmp_path: Path, metadata: Any, pattern: str) -> None:
    with pytest.raises(CheckpointError, match=pattern):
        packrt_io.save_file({"w": np.zeros(1, np.float32)}, tmp_path / "meta.safetensors", metadata=metadata)
    assert list(tmp_path.iterdir()) == []


def test_values_must_be_arrays_or_tensors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="tensor 'w' is a list; save_file takes packrt Tensors or numpy"):
        packrt_io.save_file({"w": [1.0, 2.0]}, tmp_path / "list.safetensors")  # type: ignore[dict-item]


def test_anything_with_a_numpy_view_is_saved_through_it(tmp_path: Path) -> None:
    class Holder:
        def numpy(self) -> np.ndarray[Any, Any]:
            return np.arange(3, dtype=np.int32)

    path = tmp_path / "holder.safetensors"
    packrt_io.save_file({"h": Holder()}, path)
    np.testing.assert_array_equal(packrt_io.load_arrays(path)[0]["h"], [0, 1, 2])


def test_a_new_file_gets_ordinary_permissions(tmp_path: Path) -> None:
    path = tmp_path / "mode.safetensors"
    umask = os.umask(0o022)
    os.umask(umask)
    packrt_io.save_file({"w": np.zeros(1, np.float32)}, path)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_failure_before_the_rename_keeps_the_old_file_and_removes_the_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keep.safetensors"
    packrt_io.save_file({"w": np.ones(4, np.float32)}, path)
    before = path.read_bytes()
    seen: list[Path] = []

    def crash(temporary: Path, final: Path) -> None:
        seen.append(temporary)
        assert temporary.parent == final.parent == tmp_path
        assert temporary.stat().st_size > 8
        raise OSError("disk went away")

    monkeypatch.setattr(_writer, "before_replace", crash)
    with pytest.raises(OSError, match="disk went away"):
        packrt_io.save_file({"w": np.zeros(4, np.float32)}, path)
    assert path.read_bytes() == before
    assert len(seen) == 1
    assert not seen[0].exists()
    assert [p.name for p in tmp_path.iterdir()] == ["keep.safetensors"]


_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import numpy as np
    import packrt_io
    from packrt_io import _writer

    def stop_here(temporary, final):
        Path(sys.argv[2]).write_text(str(temporary))
        time.sleep(120)

    _writer.before_replace = stop_here
    packrt_io.save_file({"w": np.full(1024, 2.0, np.float32), "extra": np.ones(3, np.int8)}, sys.argv[1])
    """
)


def test_a_writer_killed_before_the_rename_leaves_the_previous_checkpoint_loadable(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    packrt_io.save_file({"w": np.full(1024, 1.0, np.float32)}, path)
    before = path.read_bytes()
    marker = tmp_path / "writer-paused"
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(marker)])
    try:
        deadline = time.monotonic() + 600  # a hang guard: the writer imports packrt-io first, slow under load
        while not marker.exists() or not marker.read_text():
            assert writer.poll() is None, "the writer exited before reaching the rename"
            assert time.monotonic() < deadline, "the writer never reached the rename"
            time.sleep(0.02)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    assert path.read_bytes() == before
    arrays, _ = packrt_io.load_arrays(path)
    assert list(arrays) == ["w"]
    assert (arrays["w"] == 1.0).all()
    # The new file was complete on disk, just never renamed into place.
    temporary = Path(marker.read_text())
    pending, _ = packrt_io.load_arrays(temporary)
    assert (pending["w"] == 2.0).all()
    assert set(pending) == {"w", "extra"}
