"""An in-place edit through a packed layer's Parameter is never lost to a repack running beside it."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

import packrt_core as prt
from packrt_core import nn


def _packed_ones(n: int = 4) -> nn.Linear:
    layer = nn.Linear(n, n, bias=False)
    layer.weight.fill_(1.0)
    layer(prt.ones(1, n))  # packs; the raw weight is dropped
    assert layer.is_packed and layer.weight.storage_nbytes == 0
    return layer


def test_a_repack_waits_for_an_edit_that_has_fetched_its_storage() -> None:
    layer = _packed_ones()
    layer.weight.add_(1.0)  # the pack is stale now: the next forward repacks
    fetched, go = threading.Event(), threading.Event()
    weight = layer.weight
    original = type(weight)._write_target

    def paused(self: Any = weight) -> Any:
        storage = original(self)
        fetched.set()  # the edit holds its storage...
        assert go.wait(5)  # ...and stays halfway until the repack has had every chance to land
        return storage

    weight._write_target = paused  # type: ignore[method-assign]
    editor = threading.Thread(target=lambda: weight.add_(1.0))
    editor.start()
    assert fetched.wait(5)
    outputs: list[np.ndarray] = []
    forward = threading.Thread(target=lambda: outputs.append(layer(prt.ones(1, 4)).numpy()))
    forward.start()
    forward.join(0.3)  # the repack builds, then waits for the write to finish before it swaps in
    go.set()
    editor.join(5)
    forward.join(5)
    del weight._write_target
    assert weight.tolist() == [[3.0] * 4] * 4  # both edits kept
    assert outputs[0].tolist() == [[12.0] * 4]  # the forward served a pack with both edits
    assert layer(prt.ones(1, 4)).tolist() == [[12.0] * 4]


def _race(edits: int) -> nn.Linear:
    """One editor adding 1.0 ``edits`` times while two threads serve forwards."""
    layer = _packed_ones()

    def edit() -> None:
        for _ in range(edits):
            layer.weight.add_(1.0)

    def serve() -> None:
        for _ in range(edits):
            layer(prt.ones(1, 4))

    threads = [threading.Thread(target=edit), threading.Thread(target=serve), threading.Thread(target=serve)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return layer


def test_edits_and_forwards_on_many_threads_lose_no_edit() -> None:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        for _ in range(20):
            layer = _race(edits=50)
            assert layer.weight.numpy().min() == layer.weight.numpy().max() == 51.0
            assert layer(prt.ones(1, 4)).tolist() == [[4.0 * 51] * 4]
    finally:
        sys.setswitchinterval(previous)
