"""numpy and DLPack: zero-copy both ways, proven by writing through one side."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import packrt_core as prt
from packrt_core.dtypes import ALL_DTYPES
from packrt_core.errors import DLPackError, DTypeError

DLPACK_DTYPES = [d for d in ALL_DTYPES if d is not prt.bfloat16]


def test_from_numpy_is_zero_copy_both_ways() -> None:
    a = np.zeros(3, dtype=np.float32)
    t = prt.from_numpy(a)
    a[0] = 1.0
    assert t.tolist()[0] == 1.0
    t.add_(1.0)
    assert a.tolist() == [2.0, 1.0, 1.0]
    assert t.numpy() is a


def test_from_numpy_keeps_bfloat16() -> None:
    a = np.ones(2, dtype=ml_dtypes.bfloat16)
    assert prt.from_numpy(a).dtype is prt.bfloat16


def test_from_numpy_refuses_dtypes_packrt_does_not_hold() -> None:
    with pytest.raises(DTypeError, match="complex128 has no packrt counterpart"):
        prt.from_numpy(np.zeros(2, dtype=np.complex128))
    with pytest.raises(TypeError, match=r"expects a numpy\.ndarray, got list"):
        prt.from_numpy([1, 2])  # type: ignore[arg-type]


def test_array_protocol_follows_numpy_2() -> None:
    t = prt.tensor([1.0, 2.0])
    assert np.asarray(t) is t.numpy()
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    copied = np.array(t, copy=True)
    copied[0] = 9
    assert t.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="needs a copy"):
        t.__array__(np.float64, copy=False)


@pytest.mark.parametrize("dt", DLPACK_DTYPES, ids=lambda d: d.name)
def test_dlpack_to_numpy_shares_memory(dt: prt.dtype) -> None:
    t = prt.ones(4, dtype=dt)
    peer = np.from_dlpack(t)
    assert peer.dtype == dt.numpy and np.shares_memory(peer, t.numpy())
    back = prt.from_dlpack(peer)
    assert back.data_ptr() == t.data_ptr()


@pytest.mark.parametrize("dt", DLPACK_DTYPES, ids=lambda d: d.name)
def test_dlpack_with_torch_is_zero_copy_both_ways(torch: Any, dt: prt.dtype) -> None:
    t = prt.zeros(3, dtype=dt)
    peer = torch.from_dlpack(t)
    peer[1] = 1
    assert t.tolist()[1] in (1, True)
    source = torch.zeros(3, dtype=getattr(torch, dt.name))
    mine = prt.from_dlpack(source)
    mine[2] = 1
    assert source.tolist()[2] in (1, True)
    assert mine.dtype is dt


def test_bfloat16_cannot_leave_through_dlpack_and_the_error_says_why() -> None:
    with pytest.raises(DLPackError, match=r"numpy .* cannot export bfloat16.*float\(\)"):
        prt.ones(2, dtype="bfloat16").__dlpack__()


def test_bfloat16_from_torch_through_dlpack_says_to_convert_first(torch: Any) -> None:
    with pytest.raises(DLPackError, match=r"if it is bfloat16, which numpy cannot take through DLPack.*t.float\(\)"):
        prt.from_dlpack(torch.ones(2, dtype=torch.bfloat16))


def test_from_dlpack_refuses_objects_without_the_protocol() -> None:
    with pytest.raises(DLPackError, match="expects an object with __dlpack__"):
        prt.from_dlpack([1, 2])


class _FakeProducer:
    def __init__(self, device: tuple[int, int]) -> None:
        self.device = device

    def __dlpack__(self, **_: Any) -> Any:
        raise AssertionError("must not be called for a device packrt cannot reach")

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def test_dlpack_from_a_device_packrt_cannot_reach_is_refused() -> None:
    with pytest.raises(DLPackError, match="DLPack device type 14"):
        prt.from_dlpack(_FakeProducer((14, 0)))
    if not prt.cuda.is_available():
        with pytest.raises(DLPackError, match="lives on cuda:0, which packrt cannot reach"):
            prt.from_dlpack(_FakeProducer((2, 0)))


def test_dlpack_device_of_a_cpu_tensor() -> None:
    assert prt.zeros(1).__dlpack_device__() == (1, 0)
