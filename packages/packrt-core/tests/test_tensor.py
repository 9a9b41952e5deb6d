"""Tensor: creation, geometry, conversion, repr, and the errors bad input gets."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import packrt_core as prt
from packrt_core.dtypes import ALL_DTYPES
from packrt_core.errors import DeviceError, DTypeError, IndexingError, ShapeError, StorageFreeError


def test_tensor_infers_float32_int64_and_bool_from_python_data() -> None:
    assert prt.tensor([1.5, 2.0]).dtype is prt.float32
    assert prt.tensor([1, 2]).dtype is prt.int64
    assert prt.tensor([True, False]).dtype is prt.bool
    assert prt.tensor(np.arange(3, dtype=np.int16)).dtype is prt.int16


def test_tensor_copies_its_data() -> None:
    source = np.zeros(3, dtype=np.float32)
    t = prt.tensor(source)
    source[0] = 5
    assert t.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=lambda d: d.name)
def test_every_dtype_makes_tensors_with_its_itemsize(dt: prt.dtype) -> None:
    t = prt.zeros(2, 3, dtype=dt)
    assert t.dtype is dt
    assert t.nbytes == t.storage_nbytes == 6 * dt.itemsize
    assert t.numpy().dtype == dt.numpy
    assert t.to(prt.float32).tolist() == [[0.0] * 3] * 2


def test_geometry_reads_as_numpy_would() -> None:
    t = prt.ones(2, 3, 4)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.dim() == 3
    assert t.numel() == 24 and t.size() == (2, 3, 4) and t.size(-1) == 4
    assert len(t) == 2 and t.element_size() == 4


def test_item_and_tolist_return_python_values() -> None:
    assert prt.tensor([[2.5]]).item() == 2.5
    assert prt.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]


def test_item_of_many_elements_is_a_shape_error() -> None:
    with pytest.raises(ShapeError, match=r"exactly one element.*\(2,\)"):
        prt.tensor([1.0, 2.0]).item()


def test_truth_of_many_elements_is_ambiguous() -> None:
    with pytest.raises(ShapeError, match="ambiguous"):
        bool(prt.tensor([1.0, 2.0]))
    assert bool(prt.tensor([3.0]))


def test_factories_fill_as_named() -> None:
    assert prt.zeros(2).tolist() == [0.0, 0.0]
    assert prt.ones((2,), dtype="half").tolist() == [1.0, 1.0]
    assert prt.full((2,), 7).dtype is prt.int64
    assert prt.full((2,), 7.5).tolist() == [7.5, 7.5]
    assert prt.full((1,), True).dtype is prt.bool
    assert prt.empty(3, 2).shape == (3, 2)
    assert prt.arange(4).tolist() == [0, 1, 2, 3]
    assert prt.arange(1, 2, 0.5).tolist() == [1.0, 1.5]
    assert prt.arange(0, 1, 0.5).dtype is prt.float32


def test_a_negative_size_is_a_shape_error() -> None:
    with pytest.raises(ShapeError, match="negative sizes"):
        prt.zeros(2, -1)


def test_random_factories_refuse_integer_dtypes() -> None:
    with pytest.raises(DTypeError, match="randn draws floating-point samples; int32"):
        prt.randn(2, dtype=prt.int32)


def test_manual_seed_makes_draws_reproducible() -> None:
    prt.manual_seed(123)
    a = prt.randn(4, 4).numpy().copy()
    b = prt.rand(3).numpy().copy()
    prt.manual_seed(123)
    np.testing.assert_array_equal(prt.randn(4, 4).numpy(), a)
    np.testing.assert_array_equal(prt.rand(3).numpy(), b)
    assert b.min() >= 0.0 and b.max() < 1.0


def test_normal_and_uniform_fill_in_place_and_bump_the_version() -> None:
    t = prt.zeros(1000)
    t.normal_(2.0, 0.5)
    assert abs(t.mean().item() - 2.0) < 0.1
    t.uniform_(-1.0, 1.0)
    assert t.min().item() >= -1.0 and t.max().item() < 1.0
    assert t._version == 2


def test_thread_count_can_be_capped_and_read_back() -> None:
    before = prt.get_num_threads()
    try:
        prt.set_num_threads(1)
        assert prt.get_num_threads() == 1
    finally:
        prt.set_num_threads(before)
    with pytest.raises(ValueError, match="at least 1 thread"):
        prt.set_num_threads(0)


def test_to_reads_every_documented_form() -> None:
    t = prt.tensor([1.0, 2.0])
    assert t.to(prt.float16).dtype is prt.float16
    assert t.to("half").dtype is prt.float16
    assert t.to(prt.DataType.BFLOAT16).dtype is prt.bfloat16
    assert t.to("cpu", "double").dtype is prt.float64
    assert t.to(device="cpu", dtype=prt.int32).tolist() == [1, 2]
    assert t.to(prt.zeros(1, dtype=prt.int8)).dtype is prt.int8
    assert t.to(prt.Device("cpu"), non_blocking=True) is t


def test_to_returns_self_when_nothing_changes_unless_a_copy_is_asked() -> None:
    t = prt.tensor([1.0])
    assert t.to("cpu") is t and t.to(prt.float32) is t
    c = t.to("cpu", copy=True)
    assert c is not t and c.data_ptr() != t.data_ptr()


def test_to_with_an_unreadable_argument_says_what_it_takes() -> None:
    with pytest.raises(TypeError, match="cannot read the argument"):
        prt.tensor([1.0]).to("cpu", "half", 3)


def test_casts_by_method_name() -> None:
    t = prt.tensor([1, 2])
    assert (t.float().dtype, t.half().dtype, t.bfloat16().dtype, t.double().dtype) == (
        prt.float32,
        prt.float16,
        prt.bfloat16,
        prt.float64,
    )


def test_clone_has_its_own_storage_and_lineage() -> None:
    t = prt.tensor([1.0, 2.0])
    c = t.clone()
    c.add_(1)
    assert t.tolist() == [1.0, 2.0] and t._version == 0


def test_deepcopy_copies_values_and_keeps_the_class() -> None:
    t = prt.tensor([1.0])
    c = copy.deepcopy(t)
    assert type(c) is prt.Tensor and c.tolist() == [1.0] and c.data_ptr() != t.data_ptr()


def test_repr_reads_like_torch_and_shows_non_default_dtypes() -> None:
    assert repr(prt.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(prt.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(prt.tensor([1.0], dtype="half")) == "tensor([1.], dtype=packrt.float16)"
    with prt.meta_init():
        declared = prt.zeros(2, 3, dtype="bfloat16")
    assert repr(declared) == "tensor(..., size=(2, 3), dtype=packrt.bfloat16, storage_free=True)"


def test_indexing_out_of_range_names_the_index_and_the_shape() -> None:
    with pytest.raises(IndexingError, match=r"index 5 is out of range for a tensor of shape \(3,\)"):
        prt.zeros(3)[5]


def test_a_dimension_out_of_range_is_an_index_error() -> None:
    with pytest.raises(IndexError, match=r"dimension 2 is out of range for a 2-d tensor \(expected -2..1\)"):
        prt.zeros(2, 2).sum(dim=2)


def test_numpy_of_a_storage_free_tensor_raises_naming_the_fix() -> None:
    with prt.meta_init():
        t = prt.zeros(4)
    with pytest.raises(StorageFreeError, match=r"storage-free.*assign=True.*to_empty"):
        t.numpy()


def test_meeting_tensors_on_different_devices_is_a_device_error() -> None:
    with pytest.raises(DeviceError, match="cannot meet"):
        prt.zeros(1)._binary("add", prt.Tensor._make(None, prt.Device("cuda"), prt.float32, shape=(1,)))


def test_tensor_refuses_non_numeric_data() -> None:
    with pytest.raises(DTypeError, match="not numbers"):
        prt.tensor(["a", "b"])
    with pytest.raises(ShapeError, match="cannot make a tensor from list data"):
        prt.tensor([[1.0], [1.0, 2.0]])


def test_tensor_of_a_tensor_shares_its_storage() -> None:
    t = prt.tensor([1.0])
    shared = prt.Tensor(t)
    shared.add_(1)
    assert t.tolist() == [2.0]


def test_to_refuses_an_argument_that_is_neither_device_nor_dtype_with_a_type_error() -> None:
    for bad in ([], {}, 1.5, True):
        with pytest.raises(TypeError, match=r"to\(\) cannot read a .* as a device or dtype"):
            prt.ones(2).to(bad)
