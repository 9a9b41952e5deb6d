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
from faults import Stop, fail_at, files_of, steps

import packrt
import packrt_io
from packrt import nn
from packrt.models import kinds, llama, loading, pretrained


def directory_of(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path, LLAMA)


def opened_under(directory: Path) -> list[str]:
    """Descriptors and mappings of this process that point into ``directory``."""
    fds = [os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")]
    with open("/proc/self/maps") as maps:
        mapped = [line.split()[-1] for line in maps if len(line.split()) >= 6]
    return [path for path in fds + mapped if path.startswith(str(directory.resolve()))]


# each step is failed on its own, in its own test: grouped by owner, not in the order the load takes them
STEPS = steps(
    {
        kinds: ("read_config", "find_family"),  # describe: what the directory holds, asked first
        pretrained: ("read_config", "_dtype", "plan_load", "check_dtypes"),
        loading: ("validate", "check_capacity"),
        packrt_io: ("inspect_checkpoint", "load_arrays", "guarding"),
        llama.LlamaForCausalLM: ("__init__",),  # the model declared
        nn.Module: ("register_forward_pre_hook", "load_state_dict", "eval"),
    }
)


@pytest.mark.parametrize(("owner", "name"), STEPS, ids=[name for _, name in STEPS])
@pytest.mark.parametrize("residency", ["borrowed", "packed"])
def test_from_pretrained_failing_at_each_step_changes_no_file_and_holds_nothing_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, residency: str
) -> None:
    directory = directory_of(tmp_path)
    before = files_of(directory)
    called = fail_at(monkeypatch, owner, name)
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
