"""A header of very many tensors is read about as fast as the safetensors library reads it.

The rule (issue 13, item 8): a header of 10**6 empty tensors is accepted or refused within 1.5x the
time of ``safetensors.safe_open`` on the same file. The test uses 10**5 tensors to stay quick, and CPU
time (best of several alternating runs) so other processes on the machine do not decide it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import safetensors

import packrt_io
from packrt_core.errors import StateDictError

_COUNT = 100_000


def _many_empty_tensors(path: Path, count: int) -> Path:
    header = {f"layers.{i}.weight": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(count)}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text)
    return path


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _many_empty_tensors(tmp_path_factory.mktemp("huge") / "many.safetensors", _COUNT)


def _safe_open(path: Path) -> None:
    with safetensors.safe_open(str(path), framework="numpy") as handle:
        handle.keys()


def _best_cpu_seconds(calls: dict[str, Callable[[], Any]], rounds: int = 3) -> dict[str, float]:
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.process_time()
            call()
            best[name] = min(best[name], time.process_time() - start)
    return best


def test_a_header_of_many_tensors_is_accepted_within_1_5x_of_safe_open(huge: Path) -> None:
    # read_metadata validates the whole header, as safe_open does, and builds nothing else.
    seconds = _best_cpu_seconds(
        {"safe_open": lambda: _safe_open(huge), "packrt": lambda: packrt_io.read_metadata(huge)}
    )
    assert seconds["packrt"] <= 1.5 * seconds["safe_open"], seconds


@pytest.mark.parametrize("reader", ["load_arrays", "inspect_checkpoint"])
def test_many_tensors_are_built_within_2x_of_safe_open(huge: Path, reader: str) -> None:
    # These also build one array (or one TensorInfo) per tensor, which safe_open does not.
    call = getattr(packrt_io, reader)
    seconds = _best_cpu_seconds({"safe_open": lambda: _safe_open(huge), reader: lambda: call(huge)})
    assert seconds[reader] <= 2.0 * seconds["safe_open"], seconds


def test_a_header_of_many_tensors_loads_every_tensor(huge: Path) -> None:
    arrays, report = packrt_io.load_arrays(huge)
    assert report.tensor_count == _COUNT
    assert arrays["layers.99999.weight"].shape == (0,)


def test_a_load_error_about_many_keys_stays_short(huge: Path, fake_module: type[Any]) -> None:
    with pytest.raises(StateDictError, match=r"many\.safetensors': .*\.\.\. and \d+ more") as caught:
        packrt_io.load_checkpoint(fake_module({}), huge)
    assert len(str(caught.value)) < 5000
