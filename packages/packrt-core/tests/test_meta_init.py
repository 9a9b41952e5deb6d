"""Meta init: declared tensors keep their geometry and allocate nothing."""

from __future__ import annotations

import tracemalloc

import pytest

import packrt_core as prt
from packrt_core.errors import IndexingError, ShapeError, StorageFreeError


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


@pytest.mark.parametrize("read", ["numpy", "tolist", "item", "sum", "add", "slice-then-read", "dlpack"])
def test_reading_a_storage_free_tensor_raises_instead_of_returning_garbage(read: str) -> None:
    with prt.meta_init():
        t = prt.zeros(1)
    actions = {
        "numpy": t.numpy,
        "tolist": t.tolist,
        "item": t.item,
        "sum": t.sum,
        "add": lambda: t + 1,
        "slice-then-read": lambda: t[0].item(),
        "dlpack": t.__dlpack__,
    }
    with pytest.raises(StorageFreeError, match="storage-free"):
        actions[read]()


def test_casting_a_storage_free_tensor_re_declares_it() -> None:
    with prt.meta_init():
        t = prt.zeros(2, 3)
    h = t.half()
    assert not h.has_storage and h.dtype is prt.float16 and h.shape == (2, 3)


SHAPE_OPS = {
    "reshape": (lambda t: t.reshape(1, 512), (1, 512)),
    "reshape(-1)": (lambda t: t.reshape(-1, 2), (256, 2)),
    "view": (lambda t: t.view(8, 64), (8, 64)),
    "flatten": (lambda t: t.reshape(8, 64).flatten(), (512,)),
    "unsqueeze": (lambda t: t.unsqueeze(0), (1, 512)),
    "squeeze": (lambda t: t.reshape(1, 512, 1).squeeze(), (512,)),
    "transpose": (lambda t: t.reshape(8, 64).transpose(0, 1), (64, 8)),
    "permute": (lambda t: t.reshape(2, 4, 64).permute(2, 0, 1), (64, 2, 4)),
    "T": (lambda t: t.reshape(8, 64).T, (64, 8)),
    "expand": (lambda t: t.reshape(1, 512).expand(4, -1), (4, 512)),
    "slice": (lambda t: t[:, None][10:20:2], (5, 1)),
    "contiguous": (lambda t: t.contiguous(), (512,)),
    "to(dtype)": (lambda t: t.to("float16"), (512,)),
    "new_empty": (lambda t: t.new_empty(3, 4), (3, 4)),
    "empty_like": (lambda t: prt.empty_like(t), (512,)),
    "zeros_like": (lambda t: prt.zeros_like(t, dtype="float32"), (512,)),
}


@pytest.mark.parametrize("op", sorted(SHAPE_OPS))
def test_shape_only_operations_work_on_storage_free_tensors_and_stay_storage_free(op: str) -> None:
    with prt.meta_init():
        positions = prt.arange(512)  # how a Hugging Face BERT declares position_ids
    make, shape = SHAPE_OPS[op]
    out = make(positions)
    assert out.shape == shape and not out.has_storage and out.storage_nbytes == 0
    with pytest.raises(StorageFreeError, match="storage-free"):
        out.numpy()


def test_arange_reshape_under_meta_init_declares_what_bert_declares() -> None:
    with prt.meta_init():
        ids = prt.arange(512).reshape(1, 512)
    assert ids.shape == (1, 512) and ids.dtype is prt.int64 and not ids.has_storage


def test_shape_errors_on_storage_free_tensors_are_the_same_as_with_storage() -> None:
    with prt.meta_init():
        t = prt.zeros(6)
    with pytest.raises(ShapeError, match=r"cannot reshape a tensor of shape \(6,\) \(6 elements\) into \(4,\)"):
        t.reshape(4)
    with pytest.raises(ShapeError, match=r"cannot expand shape \(6,\) to \(4, 5\)"):
        t.expand(4, 5)
    with pytest.raises(IndexingError, match=r"index 7 is out of range for a tensor of shape \(6,\)"):
        t[7]


def test_new_tensors_from_a_tensor_with_storage_have_storage_and_its_dtype() -> None:
    base = prt.ones(2, dtype="float16")
    fresh = base.new_zeros(3)
    assert fresh.has_storage and fresh.dtype is prt.float16 and fresh.tolist() == [0.0, 0.0, 0.0]
    assert base.new_full((2,), 7, dtype="int32").tolist() == [7, 7]
    assert prt.ones_like(base).tolist() == [1.0, 1.0] and prt.full_like(base, 2.5).dtype is prt.float16
    with prt.meta_init():
        assert not base.new_ones(2).has_storage  # inside meta_init every factory declares
    with pytest.raises(ShapeError, match="negative sizes"):
        base.new_empty(-1)
