"""dtypes: ten objects, names and aliases accepted wherever a dtype is, PyTorch's promotion."""

from __future__ import annotations

import copy
import dataclasses

import ml_dtypes
import numpy as np
import pytest

import packrt_core as prt
from packrt_core.dtypes import ALL_DTYPES, as_dtype, names_of, promote_types, promote_with_scalar
from packrt_core.errors import DTypeError, PackrtError

NAMES = ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool"]


@pytest.mark.parametrize("name", NAMES)
def test_each_dtype_is_exported_under_its_name_and_reads_back_from_it(name: str) -> None:
    obj = getattr(prt, name)
    assert as_dtype(name) is obj
    assert as_dtype(prt.DataType(name)) is obj
    assert as_dtype(obj) is obj
    assert repr(obj) == f"packrt.{name}"


@pytest.mark.parametrize(
    ("alias", "target"), [("half", "float16"), ("float", "float32"), ("double", "float64"), ("long", "int64")]
)
def test_aliases_are_the_same_objects_as_their_targets(alias: str, target: str) -> None:
    assert getattr(prt, alias) is getattr(prt, target)
    assert as_dtype(alias) is getattr(prt, target)


@pytest.mark.parametrize(("alias", "target"), [("fp16", "float16"), ("bf16", "bfloat16"), ("fp32", "float32")])
def test_the_short_floating_names_read_as_their_dtypes(alias: str, target: str) -> None:
    assert as_dtype(alias) is getattr(prt, target)


@pytest.mark.parametrize("obj", ALL_DTYPES, ids=lambda d: d.name)
def test_names_of_lists_exactly_the_names_as_dtype_reads_canonical_first(obj: prt.dtype) -> None:
    names = names_of(obj)
    assert names[0] == obj.name and len(set(names)) == len(names)
    assert all(as_dtype(name) is obj for name in names)
    others = [d for d in ALL_DTYPES if d is not obj]
    assert not any(name in names_of(other) for other in others for name in names)
    assert names_of(prt.float16) == ("float16", "half", "fp16")


def test_bfloat16_is_ml_dtypes_bfloat16() -> None:
    assert prt.bfloat16.numpy == np.dtype(ml_dtypes.bfloat16)
    assert prt.bfloat16.itemsize == 2 and prt.bfloat16.is_floating_point


def test_numpy_dtypes_read_as_their_packrt_counterparts() -> None:
    assert as_dtype(np.float32) is prt.float32
    assert as_dtype(np.dtype("int8")) is prt.int8


def test_an_unknown_dtype_name_is_a_dtype_error_suggesting_the_close_one() -> None:
    with pytest.raises(DTypeError, match=r"unknown dtype name 'flaot16'.*did you mean 'float16'"):
        as_dtype("flaot16")


def test_dtype_errors_are_packrt_errors_and_type_errors() -> None:
    with pytest.raises(TypeError, match="complex64 has no packrt counterpart"):
        as_dtype(np.complex64)
    assert issubclass(DTypeError, PackrtError)


def test_a_non_dtype_object_is_refused_with_what_was_expected() -> None:
    with pytest.raises(DTypeError, match="expected a packrt dtype, a DataType, a dtype name or a numpy dtype"):
        as_dtype(object())


def test_dtypes_survive_copy_as_the_same_object() -> None:
    for d in ALL_DTYPES:
        assert copy.deepcopy(d) is d


def test_dtypes_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'name'"):
        prt.float32.name = "x"  # type: ignore[misc]
    assert prt.float32.name == "float32"


@pytest.mark.parametrize(
    "rule",
    [
        "float16 + bfloat16 -> float32",
        "float16 + float32 -> float32",
        "bfloat16 + float64 -> float64",
        "int8 + uint8 -> int16",
        "int32 + float16 -> float16",
        "bool + int8 -> int8",
        "int64 + int32 -> int64",
    ],
)
def test_promotion_follows_pytorch(rule: str) -> None:
    a, _, b, _, expected = rule.split()
    assert promote_types(as_dtype(a), as_dtype(b)) is as_dtype(expected)
    assert promote_types(as_dtype(b), as_dtype(a)) is as_dtype(expected)


def test_python_numbers_are_weak_and_only_lift_the_category() -> None:
    assert promote_with_scalar(prt.float16, 2.5) is prt.float16
    assert promote_with_scalar(prt.int8, 3) is prt.int8
    assert promote_with_scalar(prt.int8, 2.5) is prt.float32
    assert promote_with_scalar(prt.bool, 1) is prt.int64


def test_promotion_agrees_with_torch(torch: object) -> None:
    t = torch  # type: ignore[assignment]
    for a in ALL_DTYPES:
        for b in ALL_DTYPES:
            ta, tb = getattr(t, a.name), getattr(t, b.name)
            assert promote_types(a, b).name == str(t.promote_types(ta, tb)).removeprefix("torch."), (a, b)
