"""Meta init: declared tensors keep their geometry and allocate nothing."""

from __future__ import annotations

import tracemalloc

import pytest

import packrt_core as prt
from packrt_core.errors import StorageFreeError


def test_factories_declare_storage_free_tensors_inside_meta_init() -> None:
    with prt.meta_init():
        tensors = [
            prt.zeros(3, 4, dtype="half"),
            prt.ones(2),
            prt.empty(5),
            prt.randn(2, 2),
            prt.rand(1),
            prt.full((2,), 3),
            prt.arange(10),
        ]
    for t in tensors:
        assert not t.has_storage and t.storage_nbytes == 0
    assert tensors[0].shape == (3, 4) and tensors[0].dtype is prt.float16
    assert tensors[0].nbytes == 24  # logical size, as numpy reports it
    assert tensors[-1].shape == (10,)


def test_meta_init_keeps_the_target_device() -> None:
    with prt.meta_init():
        t = prt.zeros(2, device="cuda:1")
    assert t.device == prt.Device("cuda:1") and not t.has_storage


def test_data_given_by_the_user_keeps_its_storage_inside_meta_init() -> None:
    with prt.meta_init():
        t = prt.tensor([1.0, 2.0])
    assert t.has_storage and t.tolist() == [1.0, 2.0]


def test_meta_init_ends_with_its_block() -> None:
    with prt.meta_init():
        pass
    assert prt.zeros(1).has_storage


def test_declaring_ten_gigabytes_allocates_under_a_megabyte() -> None:
    tracemalloc.start()
    try:
        with prt.meta_init():
            layers = [prt.empty(16384, 16384) for _ in range(10)]  # 10 x 1 GiB of float32
            for w in layers:
                w.normal_(0.0, 0.02)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(t.nbytes for t in layers) >= 10 * 2**30
    assert peak < 2**20


@pytest.mark.parametrize("read", ["numpy", "tolist", "item", "sum", "add", "getitem", "dlpack"])
def test_reading_a_storage_free_tensor_raises_instead_of_returning_garbage(read: str) -> None:
    with prt.meta_init():
        t = prt.zeros(1)
    actions = {
        "numpy": t.numpy,
        "tolist": t.tolist,
        "item": t.item,
        "sum": t.sum,
        "add": lambda: t + 1,
        "getitem": lambda: t[0],
        "dlpack": t.__dlpack__,
    }
    with pytest.raises(StorageFreeError, match="storage-free"):
        actions[read]()


def test_casting_a_storage_free_tensor_re_declares_it() -> None:
    with prt.meta_init():
        t = prt.zeros(2, 3)
    h = t.half()
    assert not h.has_storage and h.dtype is prt.float16 and h.shape == (2, 3)
