"""Views, shape operations, in-place writes and the version counter each write bumps."""

from __future__ import annotations

from typing import Any

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import packrt_core as prt
from packrt_core.errors import DTypeError, ReadOnlyError, ShapeError, StorageFreeError


@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=4))
def test_reshape_transpose_and_permute_agree_with_numpy(data: Any, shape: tuple[int, ...]) -> None:
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = prt.from_numpy(a)
    order = data.draw(st.permutations(range(len(shape))))
    np.testing.assert_array_equal(t.permute(*order).numpy(), a.transpose(order))
    d0, d1 = data.draw(st.integers(0, len(shape) - 1)), data.draw(st.integers(-len(shape), -1))
    np.testing.assert_array_equal(t.transpose(d0, d1).numpy(), a.swapaxes(d0, d1))
    np.testing.assert_array_equal(t.reshape(-1).numpy(), a.reshape(-1))
    np.testing.assert_array_equal(t.permute(*order).reshape(a.size).numpy(), a.transpose(order).reshape(-1))


def test_views_share_storage_and_one_version_counter() -> None:
    t = prt.zeros(2, 3)
    views = [t[0], t.T, t.reshape(6), t.view(3, 2), t.unsqueeze(0), t.transpose(0, 1), t[:, 1:]]
    for v in views:
        assert v._lineage is t._lineage
    t[0].fill_(1.0)
    assert t.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    assert all(v._version == 1 for v in views)


def test_a_copying_reshape_starts_its_own_lineage() -> None:
    t = prt.zeros(2, 3).T
    flat = t.reshape(6)
    assert flat._lineage is not t._lineage


def test_view_refuses_a_layout_that_needs_a_copy() -> None:
    with pytest.raises(ShapeError, match=r"view\(6,\) is impossible.*use reshape\(\)"):
        prt.zeros(2, 3).T.view(6)


def test_reshape_to_a_different_size_names_both() -> None:
    with pytest.raises(ShapeError, match=r"cannot reshape a tensor of shape \(2, 3\) \(6 elements\) into \(4, 2\)"):
        prt.zeros(2, 3).reshape(4, 2)


def test_squeeze_and_unsqueeze() -> None:
    t = prt.zeros(1, 3, 1)
    assert t.squeeze().shape == (3,)
    assert t.squeeze(0).shape == (3, 1)
    assert t.squeeze(1).shape == (1, 3, 1)
    assert t.unsqueeze(-1).shape == (1, 3, 1, 1)


def test_expand_is_a_read_only_broadcast_view() -> None:
    t = prt.tensor([[1.0], [2.0]])
    e = t.expand(2, 3)
    assert e.tolist() == [[1.0] * 3, [2.0] * 3]
    assert t.expand(-1, 4).shape == (2, 4)
    with pytest.raises(ReadOnlyError, match=r"read-only.*clone\(\) it first"):
        e.add_(1)
    with pytest.raises(ShapeError, match=r"cannot expand shape \(2, 1\) to \(3, 3\)"):
        t.expand(3, 3)


def test_contiguous_returns_self_when_already_contiguous() -> None:
    t = prt.zeros(2, 3)
    assert t.contiguous() is t
    c = t.T.contiguous()
    assert c.numpy().flags.c_contiguous and c.tolist() == t.T.tolist()


def test_index_assignment_writes_through_and_bumps_the_version() -> None:
    t = prt.zeros(3)
    t[1] = 5.0
    t[prt.tensor([0, 2])] = prt.tensor([1.0, 2.0])
    assert t.tolist() == [1.0, 5.0, 2.0] and t._version == 2


def test_advanced_indexing_copies() -> None:
    t = prt.arange(5)
    picked = t[prt.tensor([0, 4])]
    assert picked.tolist() == [0, 4] and picked._lineage is not t._lineage
    assert t[t > 2].tolist() == [3, 4]


@pytest.mark.parametrize(
    ("method", "expected"),
    [("add_", [3.0, 4.0]), ("sub_", [-1.0, 0.0]), ("mul_", [2.0, 4.0]), ("div_", [0.5, 1.0])],
)
def test_inplace_ops_write_into_the_tensor_and_return_it(method: str, expected: list[float]) -> None:
    t = prt.tensor([1.0, 2.0])
    assert getattr(t, method)(2.0) is t
    assert t.tolist() == expected and t._version == 1


def test_add_with_alpha_scales_the_other_operand() -> None:
    t = prt.zeros(2)
    t.add_(prt.tensor([1.0, 2.0]), alpha=3)
    assert t.tolist() == [3.0, 6.0]


def test_inplace_broadcasts_the_other_operand_but_never_the_tensor() -> None:
    t = prt.zeros(2, 3)
    t.add_(prt.tensor([1.0, 2.0, 3.0]))
    assert t.tolist() == [[1.0, 2.0, 3.0]] * 2
    with pytest.raises(ShapeError, match=r"add_ would change the tensor's shape from \(3,\) to \(2, 3\)"):
        prt.zeros(3).add_(prt.zeros(2, 3))


def test_inplace_refuses_a_result_of_a_higher_category() -> None:
    with pytest.raises(DTypeError, match="float32 and cannot be written into this int64 tensor in place"):
        prt.arange(3).add_(0.5)
    with pytest.raises(DTypeError, match="div_"):
        prt.arange(3).div_(2)


def test_copy_converts_dtype_and_broadcasts() -> None:
    t = prt.zeros(2, 2, dtype=prt.float16)
    t.copy_(prt.tensor([1, 2]))
    assert t.tolist() == [[1.0, 2.0], [1.0, 2.0]] and t.dtype is prt.float16 and t._version == 1
    with pytest.raises(ShapeError, match=r"copy_ needs a source that broadcasts to \(2, 2\), got shape \(3,\)"):
        t.copy_(prt.zeros(3))


def test_fill_and_zero() -> None:
    t = prt.empty(3).fill_(4.0)
    assert t.tolist() == [4.0] * 3
    assert t.zero_().tolist() == [0.0] * 3


def test_initializers_are_no_ops_on_storage_free_tensors_but_copies_are_refused() -> None:
    with prt.meta_init():
        t = prt.empty(2, 2)
    assert t.normal_() is t and t.uniform_() is t and t.fill_(1.0) is t and t.zero_() is t
    assert not t.has_storage
    with pytest.raises(StorageFreeError, match=r"copy_ cannot write into a storage-free tensor.*assign=True"):
        t.copy_(prt.zeros(2, 2))
    with pytest.raises(StorageFreeError, match="add_ cannot write"):
        t.add_(1.0)
