"""from_pretrained failing at any of its steps leaves the model directory as it was and holds nothing open.

from_pretrained builds a new model, so "as before" means: the error reaches the caller, no model is
returned, every file of the directory keeps its bytes, inode and modification time, and no file
descriptor or memory mapping of the weights outlives the call.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import pytest
from checkpoints import LLAMA, write_checkpoint

import packrt
import packrt_io
from packrt import nn
from packrt.models import llama, pretrained


class Stop(BaseException):
    """Raised by the injected fault (a BaseException, as KeyboardInterrupt would be)."""


def directory_of(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path, LLAMA)


def files_of(directory: Path) -> dict[str, tuple[bytes, int, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in sorted(directory.iterdir())}


def opened_under(directory: Path) -> list[str]:
    """Descriptors and mappings of this process that point into ``directory``."""
    fds = [os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")]
    with open("/proc/self/maps") as maps:
        mapped = [line.split()[-1] for line in maps if len(line.split()) >= 6]
    return [path for path in fds + mapped if path.startswith(str(directory.resolve()))]


STEPS = [
    (pretrained, "read_config"),
    (pretrained, "find_family"),
    (pretrained, "validate"),
    (pretrained, "_dtype"),
    (packrt_io, "inspect_checkpoint"),
    (pretrained, "check_capacity"),
    (llama, "LlamaForCausalLM"),
    (pretrained, "plan_load"),
    (pretrained, "check_dtypes"),
    (packrt_io, "load_arrays"),
    (packrt_io, "guarding"),
    (nn.Module, "register_forward_pre_hook"),
    (nn.Module, "load_state_dict"),
    (nn.Module, "eval"),
]


@pytest.mark.parametrize(("owner", "name"), STEPS, ids=[name for _, name in STEPS])
@pytest.mark.parametrize("residency", ["borrowed", "packed"])
def test_from_pretrained_failing_at_each_step_changes_no_file_and_holds_nothing_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, residency: str
) -> None:
    directory = directory_of(tmp_path)
    before = files_of(directory)
    called: list[str] = []

    def fail(*args: Any, **kwargs: Any) -> Any:
        called.append(name)
        raise Stop(f"{name} failed")

    monkeypatch.setattr(owner, name, fail)
    with pytest.raises(Stop, match=f"{name} failed"):
        pretrained.from_pretrained(directory, weight_residency=residency)
    monkeypatch.undo()
    assert called == [name]
    gc.collect()
    assert files_of(directory) == before, f"a fault in {name} changed the model directory"
    assert opened_under(directory) == [], f"a fault in {name} left the weights open: {opened_under(directory)}"
    # The directory still loads afterwards.
    model = pretrained.from_pretrained(directory, weight_residency=residency)
    assert model(packrt.zeros(1, 2, dtype=packrt.int64)).shape == (1, 2, 50)
