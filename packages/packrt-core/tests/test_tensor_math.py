"""Arithmetic, comparisons, matmul and reductions: numpy's results, PyTorch's dtypes."""

from __future__ import annotations

from typing import Any

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import packrt_core as prt
from packrt_core.errors import DTypeError, ShapeError

OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}


@st.composite
def broadcastable_pairs(draw: Any) -> tuple[np.ndarray, np.ndarray]:
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=4))
    elements = st.floats(-100, 100, width=32)
    a = draw(hnp.arrays(np.float32, shapes.input_shapes[0], elements=elements))
    b = draw(hnp.arrays(np.float32, shapes.input_shapes[1], elements=elements.filter(lambda x: abs(x) > 1e-3)))
    return a, b


@given(pair=broadcastable_pairs(), op=st.sampled_from(sorted(OPS)))
def test_binary_ops_broadcast_exactly_as_numpy(pair: tuple[np.ndarray, np.ndarray], op: str) -> None:
    a, b = pair
    got = OPS[op](prt.from_numpy(a), prt.from_numpy(b))
    expected = OPS[op](a, b)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy(), expected)


@given(pair=broadcastable_pairs())
def test_comparisons_broadcast_and_give_bool(pair: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = pair
    ta, tb = prt.from_numpy(a), prt.from_numpy(b)
    for got, want in [
        (ta < tb, a < b),
        (ta <= tb, a <= b),
        (ta > tb, a > b),
        (ta >= tb, a >= b),
        (ta == tb, a == b),
        (ta != tb, a != b),
    ]:
        assert got.dtype is prt.bool
        np.testing.assert_array_equal(got.numpy(), want)


def test_scalars_work_on_either_side() -> None:
    t = prt.tensor([1.0, 2.0])
    assert (2 * t).tolist() == [2.0, 4.0]
    assert (1 - t).tolist() == [0.0, -1.0]
    assert (4 / t).tolist() == [4.0, 2.0]
    assert (t**2).tolist() == [1.0, 4.0]
    assert (2**t).tolist() == [2.0, 4.0]
    assert (5 // t).tolist() == [5.0, 2.0]
    assert (5 % t).tolist() == [0.0, 1.0]
    # floor division and a remainder with the divisor's sign, as Python's numbers and torch give them
    assert (-7 // prt.tensor([2.0, -3.0])).tolist() == [-7 // 2, -7 // -3]
    assert (-7 % prt.tensor([2.0, -3.0])).tolist() == [-7 % 2, -7 % -3]
    assert (-t).tolist() == [-1.0, -2.0]
    assert abs(-t).tolist() == [1.0, 2.0]


def test_numpy_arrays_on_the_left_defer_to_the_tensor() -> None:
    out = np.ones(2, dtype=np.float32) + prt.tensor([1.0, 2.0])
    assert isinstance(out, prt.Tensor) and out.tolist() == [2.0, 3.0]


def test_half_precision_keeps_its_dtype_with_python_numbers() -> None:
    for dt in (prt.float16, prt.bfloat16):
        t = prt.ones(2, dtype=dt)
        assert (t + 1.5).dtype is dt and (t * 2).dtype is dt and (t @ prt.ones(2, 2, dtype=dt)).dtype is dt


def test_mixed_dtypes_promote_as_pytorch() -> None:
    assert (prt.ones(1, dtype="half") + prt.ones(1, dtype="bfloat16")).dtype is prt.float32
    assert (prt.ones(1, dtype="int32") + 1.5).dtype is prt.float32
    assert (prt.arange(3) / 2).dtype is prt.float32
    assert (prt.arange(3) / 2).tolist() == [0.0, 0.5, 1.0]


def test_integer_overflow_from_a_python_number_is_a_dtype_error() -> None:
    with pytest.raises(DTypeError, match="does not fit int8"):
        prt.zeros(2, dtype=prt.int8) + 300


def test_shapes_that_do_not_broadcast_are_a_shape_error() -> None:
    with pytest.raises(ShapeError, match=r"add: shapes \(2, 3\) and \(4,\) do not broadcast"):
        prt.zeros(2, 3) + prt.zeros(4)


@given(m=st.integers(1, 5), k=st.integers(1, 5), n=st.integers(1, 5), batch=st.sampled_from([(), (2,), (3, 1)]))
def test_matmul_matches_numpy(m: int, k: int, n: int, batch: tuple[int, ...]) -> None:
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = rng.standard_normal((*batch, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose((prt.from_numpy(a) @ prt.from_numpy(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_with_mismatched_inner_dimensions_names_both_shapes() -> None:
    with pytest.raises(ShapeError, match=r"matmul: shapes \(2, 3\) and \(4, 5\) do not fit: 3 != 4"):
        prt.zeros(2, 3) @ prt.zeros(4, 5)


def test_reductions_match_numpy_with_dims_and_keepdim() -> None:
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = prt.from_numpy(a)
    np.testing.assert_array_equal(t.sum().numpy(), a.sum())
    np.testing.assert_array_equal(t.sum(dim=1).numpy(), a.sum(axis=1))
    np.testing.assert_array_equal(t.sum(dim=(0, 2), keepdim=True).numpy(), a.sum(axis=(0, 2), keepdims=True))
    np.testing.assert_array_equal(t.mean(dim=-1).numpy(), a.mean(axis=-1))
    assert t.max().item() == 23.0 and t.argmax().item() == 23
    values, indices = t.max(dim=2)
    np.testing.assert_array_equal(values.numpy(), a.max(axis=2))
    np.testing.assert_array_equal(indices.numpy(), a.argmax(axis=2))
    np.testing.assert_array_equal(t.argmax(dim=1, keepdim=True).numpy(), a.argmax(axis=1, keepdims=True))


def test_integer_sums_are_int64_and_integer_means_are_refused() -> None:
    assert prt.ones(3, dtype=prt.int8).sum().dtype is prt.int64
    with pytest.raises(DTypeError, match=r"mean\(\) needs a floating-point tensor"):
        prt.ones(3, dtype=prt.int8).mean()


def test_half_sums_accumulate_in_float32() -> None:
    t = prt.full((4096,), 1.0, dtype=prt.float16)
    assert t.sum().item() == 4096.0  # a float16 accumulator would stall at 2048


def test_max_of_an_empty_tensor_is_a_shape_error() -> None:
    with pytest.raises(ShapeError, match=r"max\(\) of an empty tensor"):
        prt.zeros(0).max()


def test_arithmetic_agrees_with_torch_including_half_dtypes(torch: Any) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    for name in ("float32", "float16", "bfloat16"):
        pa, pb = prt.from_numpy(a).to(name), prt.from_numpy(b).to(name)
        ta, tb = torch.from_numpy(a).to(getattr(torch, name)), torch.from_numpy(b).to(getattr(torch, name))
        for got, want in [(pa * pb + 1.5, ta * tb + 1.5), (pa / pb, ta / tb), (pa @ pb, ta @ tb)]:
            assert got.dtype.name == str(want.dtype).removeprefix("torch.")
            np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("op", ["exp", "log", "sqrt", "tanh", "abs"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_unary_functions_match_numpy_and_keep_the_float_dtype(op: str, dtype: str) -> None:
    a = np.array([0.5, 1.0, 2.0, 4.0], dtype=dtype)
    got = getattr(prt.from_numpy(a), op)()
    assert got.dtype.name == dtype
    np.testing.assert_allclose(got.numpy(), getattr(np, op)(a), rtol=1e-3)


def test_unary_functions_of_integers_compute_in_float32() -> None:
    assert prt.tensor([1, 4]).sqrt().tolist() == [1.0, 2.0]
    assert prt.tensor([1, 4]).sqrt().dtype is prt.float32
    assert abs(prt.tensor([-3, 2])).tolist() == [3, 2]


def test_logical_not_any_and_all_work_on_bool_tensors() -> None:
    mask = prt.tensor([True, False])
    assert (~mask).tolist() == [False, True]
    assert mask.any().item() is True and mask.all().item() is False
    with pytest.raises(DTypeError, match="~ is logical not and needs a bool tensor"):
        _ = ~prt.tensor([1.0])
    with pytest.raises(DTypeError, match="negation of a bool tensor"):
        _ = -mask


def test_min_mirrors_max() -> None:
    t = prt.tensor([[3.0, 1.0], [0.5, 2.0]])
    assert t.min().item() == 0.5
    values, indices = t.min(dim=1)
    assert values.tolist() == [1.0, 0.5] and indices.tolist() == [1, 0]


def test_python_conversions_and_iteration() -> None:
    t = prt.tensor([[1.5, 2.0], [3.0, 4.0]])
    assert float(prt.tensor([2.5])) == 2.5 and int(prt.tensor([7])) == 7
    assert [row.tolist() for row in t] == [[1.5, 2.0], [3.0, 4.0]]
    assert t.flatten().shape == (4,) and t.mT.tolist() == [[1.5, 3.0], [2.0, 4.0]]
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(prt.tensor(1.0))


def test_and_or_xor_combine_bool_masks_and_integers_and_refuse_floats() -> None:
    a, b = prt.tensor([True, True, False]), prt.tensor([True, False, False])
    assert (a & b).tolist() == [True, False, False] and (a | b).tolist() == [True, True, False]
    assert (a ^ b).tolist() == [False, True, False] and (a & b).dtype is prt.bool
    assert (prt.tensor([6, 3]) & 5).tolist() == [4, 1] and (1 | prt.tensor([2, 4])).tolist() == [3, 5]
    with pytest.raises(DTypeError, match=r"bitwise_and \(& \| \^\) needs bool or integer tensors, got float32"):
        prt.ones(2) & prt.ones(2)
