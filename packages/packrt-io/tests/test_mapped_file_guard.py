"""A model serving from a memory-mapped checkpoint notices the file changing under it.

Truncating or rewriting the mapped file in place would end the process with SIGBUS or silently swap
the weights; instead the next call of the model raises a CheckpointError naming the file and the
change. Replacing the file by rename (what save_checkpoint does) is safe and raises nothing.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packrt_core as prt
import packrt_io
from packrt_core import nn
from packrt_core.errors import CheckpointError


def _served(tmp_path: Path, residency: str = "borrowed") -> tuple[nn.Module, Path]:
    prt.manual_seed(3)
    path = tmp_path / "model.safetensors"
    packrt_io.save_checkpoint(nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16)), path)
    with prt.meta_init():
        model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16))
    packrt_io.load_checkpoint(model, path, weight_residency=residency)
    model(prt.ones(2, 16))
    return model, path


def _served_with_a_second_file(tmp_path: Path) -> tuple[nn.Module, Path, Path, Any]:
    """:func:`_served`'s borrowed model and its file, a second checkpoint of the same weights to load
    next, and the guard watching the model's files."""
    model, path = _served(tmp_path)
    other = packrt_io.save_checkpoint(model, tmp_path / "other.safetensors")
    return model, path, other, model._packrt_io_mapped_files[0]


def test_a_file_rewritten_in_place_under_a_borrowed_model_is_named_at_the_next_call(tmp_path: Path) -> None:
    model, path = _served(tmp_path)
    with open(path, "r+b") as f:  # what `cp other.safetensors model.safetensors` does to the inode
        f.seek(-4, os.SEEK_END)
        f.write(b"\x00\x00\x80\x7f")
    os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 10**9))  # the write's new mtime, made unmistakable
    with pytest.raises(CheckpointError, match=r"model\.safetensors': the memory-mapped file .* modified in place"):
        model(prt.ones(2, 16))


def test_a_truncated_file_is_refused_before_a_forward_can_touch_a_vanished_page(tmp_path: Path) -> None:
    model, path = _served(tmp_path)
    os.truncate(path, 100)
    with pytest.raises(CheckpointError, match=r"it shrank from \d+ to 100 bytes"):
        model(prt.ones(2, 16))


def test_plain_parameters_stay_mapped_under_packed_and_are_guarded_too(tmp_path: Path) -> None:
    model, path = _served(tmp_path, "packed")  # Linear packs; LayerNorm's weight stays a view of the file
    os.truncate(path, 100)
    with pytest.raises(CheckpointError, match="shrank"):
        model(prt.ones(2, 16))


def test_a_checkpoint_replaced_by_rename_keeps_serving_the_weights_loaded(tmp_path: Path) -> None:
    model, path = _served(tmp_path)
    before = model(prt.ones(2, 16)).numpy().copy()
    packrt_io.save_checkpoint(nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16)), path)  # new inode, renamed in
    np.testing.assert_array_equal(model(prt.ones(2, 16)).numpy(), before)


def test_a_reload_replaces_the_previous_files_check(tmp_path: Path) -> None:
    model, path, other, _ = _served_with_a_second_file(tmp_path)
    packrt_io.load_checkpoint(model, other, weight_residency="borrowed")
    os.truncate(path, 100)  # the first file no longer serves this model
    model(prt.ones(2, 16))


def test_a_dropped_model_closes_the_files_it_held_open(tmp_path: Path) -> None:
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    gc.disable()
    try:
        model, _ = _served(tmp_path)
        assert len(os.listdir("/proc/self/fd")) > before  # the guard's descriptor (and the mapping's own)
        del model
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        gc.enable()


def test_memory_report_names_the_file_behind_mapped_weights_and_counts_them(tmp_path: Path) -> None:
    model, path = _served(tmp_path, "packed")
    report = nn.memory_report(model)
    rows = {row.path: row for row in report}
    assert rows["0"].packed > 0 and rows["0"].mapped == 0  # the Linear copied its weights into its pack
    assert rows["1"].mapped == rows["1"].raw == 2 * 16 * 4  # LayerNorm's weight and bias: pages of the file
    assert rows["1"].files == (str(path),) and report.files() == (str(path),)
    assert "mapped: raw or borrowed bytes that are pages of the checkpoint file(s)" in str(report)
    (tmp_path / "b").mkdir()
    borrowed, _ = _served(tmp_path / "b", "borrowed")
    totals = nn.memory_report(borrowed).totals()
    assert totals["mapped"] == totals["borrowed"] + 2 * 16 * 4 and totals["borrowed"] > 0


def test_load_checkpoint_switches_the_guard_to_the_new_file_inside_the_loads_own_publication(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packrt_core import publication
    from packrt_core.nn import state

    model, _, other, guard = _served_with_a_second_file(tmp_path)
    seen: list[tuple[bool, list[str]]] = []
    original = state.commit_joined

    def watched() -> None:  # the load's last step, as it runs: calls on other threads are held off
        original()
        seen.append((publication.GATE.pending, [mapped.path for mapped in guard.files]))

    monkeypatch.setattr(state, "commit_joined", watched)
    packrt_io.load_checkpoint(model, other, weight_residency="borrowed")
    assert seen == [(True, [str(other)])]


def test_a_load_that_fails_at_its_commit_leaves_the_guard_watching_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, path, other, guard = _served_with_a_second_file(tmp_path)

    class Stop(BaseException):  # plays KeyboardInterrupt, which pytest itself would act on
        pass

    def fail(*args: object) -> None:
        raise Stop("stopped at the commit")

    monkeypatch.setattr(nn.PackedLayer, "_release", fail)
    with pytest.raises(Stop, match="stopped at the commit"):
        packrt_io.load_checkpoint(model, other, weight_residency="borrowed")
    monkeypatch.undo()
    assert [mapped.path for mapped in guard.files] == [str(path)]
    os.truncate(path, 100)  # the file the model still serves from
    with pytest.raises(CheckpointError, match="shrank"):
        model(prt.ones(2, 16))


def test_mapped_files_lists_what_the_guard_checks_so_a_health_check_can_ask_without_a_forward(tmp_path: Path) -> None:
    model, path = _served(tmp_path)
    files = packrt_io.mapped_files(model)
    assert [Path(f.path).name for f in files] == ["model.safetensors"]
    for mapped in files:
        mapped.check()  # unchanged: nothing raised
    os.truncate(path, 100)
    with pytest.raises(CheckpointError, match=r"it shrank from \d+ to 100 bytes"):
        files[0].check()
    assert packrt_io.mapped_files(nn.Linear(2, 2)) == ()  # a module that maps no file


def test_a_same_size_rewrite_that_puts_the_old_mtime_back_is_still_named(tmp_path: Path) -> None:
    model, path = _served(tmp_path)
    before = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\x00\x00\x80\x7f")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # size and mtime as they were: only ctime moved
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    with pytest.raises(CheckpointError, match=r"model\.safetensors': the memory-mapped file .* modified in place"):
        model(prt.ones(2, 16))
