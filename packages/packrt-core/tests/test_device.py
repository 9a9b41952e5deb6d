"""Devices: parsing, equality, hashing, printing, and what happens without a GPU."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

import packrt_core as prt
from packrt_core.device import as_device
from packrt_core.errors import DeviceError, DeviceUnavailableError


def test_cpu_device_has_no_index_and_prints_as_cpu() -> None:
    d = prt.Device("cpu")
    assert (d.type, d.index, str(d)) == ("cpu", None, "cpu")
    assert prt.Device("cpu:0") == d


def test_bare_cuda_means_the_first_gpu() -> None:
    assert prt.Device("cuda") == prt.Device("cuda:0") == prt.Device("cuda", 0)
    assert str(prt.Device("cuda")) == "cuda:0"
    assert repr(prt.Device("cuda:1")) == "device(type='cuda', index=1)"


def test_devices_hash_by_value_and_compare_with_strings() -> None:
    assert len({prt.Device("cuda"), prt.Device("cuda:0"), prt.Device("cpu")}) == 2
    assert prt.Device("cuda:1") == "cuda:1"
    assert prt.Device("cpu") != "not a device"


def test_devices_are_immutable_values_that_pickle_by_name() -> None:
    device = prt.Device("cuda:1")
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'index'"):
        device.index = 2  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(device)) == device and str(device) == "cuda:1"


def test_an_int_is_a_cuda_ordinal() -> None:
    assert as_device(1) == prt.Device("cuda:1")


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:-1", "cuda:x", "", "cuda:0:1"])
def test_a_malformed_device_string_is_a_device_error(spec: str) -> None:
    with pytest.raises(DeviceError, match="device"):
        prt.Device(spec)


def test_an_unknown_device_type_names_the_known_ones() -> None:
    with pytest.raises(DeviceError, match=r"unknown device type 'tpu'.*cpu, cuda"):
        prt.Device("tpu:0")


def test_the_index_cannot_be_given_twice() -> None:
    with pytest.raises(DeviceError, match="gives the index twice"):
        prt.Device("cuda:0", 1)


def test_cuda_reports_unavailable_without_a_gpu() -> None:
    if prt.cuda.is_available():
        pytest.skip("a GPU answered")
    assert prt.cuda.device_count() == 0


def test_asking_for_a_cuda_tensor_without_a_gpu_says_what_is_missing() -> None:
    if prt.cuda.is_available():
        pytest.skip("a GPU answered")
    with pytest.raises(DeviceUnavailableError, match=r"(cuda:0 is not available|no packrt backend serves cuda:0)"):
        prt.zeros(2, device="cuda")
    with pytest.raises(DeviceUnavailableError, match="cuda:0"):
        prt.tensor([1.0]).cuda()
