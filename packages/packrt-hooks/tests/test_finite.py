"""check_finite(): the first module (innermost, in call order) whose output holds NaN or Inf."""

from __future__ import annotations

import pickle

import ml_dtypes
import numpy as np
import pytest
from hookfakes import Affine, FakeModule, Log, Seq, Split

from packrt_hooks import FiniteCheck, NonFiniteError, check_finite, count_nonfinite


def test_the_error_names_the_first_module_that_produced_a_non_finite_value() -> None:
    net = Seq(pre=Affine(1.0), block=Seq(log=Log(), after=Affine(2.0)), head=Affine(3.0))
    with check_finite(net), pytest.raises(NonFiniteError, match=r"module 'block.log' \(Log\)") as info:
        net(np.array([1.0, -1.0, 0.0, 0.0], dtype=np.float32))
    err = info.value
    assert (err.module, err.location) == ("block.log", "output")
    assert (err.nan_count, err.inf_count, err.size) == (1, 2, 4)
    assert err.kinds == ("nan", "inf")
    assert err.call_index == 0
    message = str(err)
    assert "1 NaN and 2 Inf among 4 values" in message
    assert "float32, shape (4,)" in message
    assert "Its inputs were finite" in message


def test_the_error_is_both_an_arithmetic_error_and_a_hook_error() -> None:
    net = Seq(log=Log())
    check_finite(net)
    with pytest.raises(ArithmeticError, match=r"module 'log' \(Log\)"):
        net(np.array([0.0]))


def test_only_nan_is_reported_when_there_is_no_inf() -> None:
    net = Seq(log=Log())
    check_finite(net)
    with pytest.raises(NonFiniteError, match=r"holds 1 NaN among 2 values") as info:
        net(np.array([-1.0, 1.0]))
    assert info.value.kinds == ("nan",)


def test_a_non_finite_model_input_is_blamed_on_the_input() -> None:
    net = Seq(first=Affine(2.0))
    check_finite(net)
    with pytest.raises(NonFiniteError, match="inputs already held non-finite values") as info:
        net(np.array([np.inf]))
    assert info.value.module == "first"


def test_values_inside_tuples_and_dicts_are_checked_and_located() -> None:
    class BadDict(Split):
        def forward(self, x: np.ndarray) -> object:
            with np.errstate(invalid="ignore"):
                return (x, {"doubled": x * np.inf})

    net = Seq(split=BadDict())
    check_finite(net)
    with pytest.raises(NonFiniteError, match=r"output\[1\]\['doubled'\] \(float64") as info:
        net(np.array([1.0, 0.0]))
    assert (info.value.location, info.value.nan_count, info.value.inf_count) == ("output[1]['doubled']", 1, 1)


def test_the_call_index_counts_calls_since_the_check_was_installed() -> None:
    net = Seq(log=Log())
    check = check_finite(net)
    net(np.array([1.0]))
    net(np.array([2.0]))
    with pytest.raises(NonFiniteError, match="call 2 since check_finite was installed"):
        net(np.array([0.0]))
    assert isinstance(check, FiniteCheck)
    assert check.checked_calls == 5  # (root + log) x 2, then log alone: the root's third never ran
    check.remove()
    assert np.isneginf(net(np.array([0.0]))).all()  # removed: nothing checks any more


def test_finite_outputs_integer_outputs_and_non_numbers_pass() -> None:
    class Mixed(FakeModule):
        def forward(self, x: np.ndarray) -> object:
            return {"ids": np.arange(3), "mask": x > 0, "label": "ok", "nothing": None, "scale": 1.5}

    net = Seq(mixed=Mixed())
    with check_finite(net):
        assert net(np.array([1.0]))["label"] == "ok"


def test_a_python_float_output_is_checked() -> None:
    class Ratio(FakeModule):
        def forward(self, x: float) -> float:
            return float("nan") if x == 0 else 1 / x

    net = Seq(ratio=Ratio())
    check_finite(net)
    assert net(2.0) == 0.5
    with pytest.raises(NonFiniteError, match=r"module 'ratio' .*holds 1 NaN among 1 values"):
        net(0.0)


def test_count_nonfinite_reads_bfloat16_complex_and_tensor_like_objects() -> None:
    bf16 = np.array([np.nan, np.inf, 1.0], dtype=ml_dtypes.bfloat16)
    assert count_nonfinite(bf16) == (1, 1, 3)
    assert count_nonfinite(np.array([complex(np.nan, 0), 1j])) == (1, 0, 2)
    assert count_nonfinite(np.arange(4)) is None
    assert count_nonfinite("text") is None

    class TensorLike:
        shape = (2,)
        dtype = np.dtype(np.float32)

        def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
            return np.array([np.inf, 0.0], dtype=np.float32)

    class StorageFree(TensorLike):
        has_storage = False

    assert count_nonfinite(TensorLike()) == (0, 1, 2)
    assert count_nonfinite(StorageFree()) is None


def test_the_error_survives_pickling_with_its_fields() -> None:
    net = Seq(log=Log())
    check_finite(net)
    with pytest.raises(NonFiniteError, match="log") as info:
        net(np.array([0.0]))
    restored = pickle.loads(pickle.dumps(info.value))
    assert str(restored) == str(info.value)
    assert (restored.module, restored.inf_count, restored.call_index) == ("log", 1, 0)
