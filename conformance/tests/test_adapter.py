"""Adapter loading and validation: a wrong adapter is refused with the reason and the fix."""

from __future__ import annotations

import pytest

from packrt_conformance.adapter import Adapter, AdapterError, check_adapter
from packrt_conformance.adapters import available_adapters, load_adapter

FAKE = "fake_adapter:ADAPTER"


def test_torch_adapter_is_registered_as_an_entry_point() -> None:
    assert available_adapters()["torch"] == "packrt_conformance.adapters.torch_adapter:TorchAdapter"


def test_module_object_spec_loads_an_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    adapter = load_adapter(FAKE)
    assert isinstance(adapter, Adapter)
    assert adapter.name == "fake"


def test_class_spec_is_instantiated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    assert load_adapter("fake_adapter:FakeAdapter").version == "9.9"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:Thing", r"cannot import module 'no_such_module_xyz'"),
        ("packrt_conformance.adapter:Nope", r"has no 'Nope'"),
        ("no-such-adapter", r"no adapter entry point of that name \(registered: .*torch"),
    ],
)
def test_bad_spec_is_refused_naming_it(spec: str, message: str) -> None:
    with pytest.raises(AdapterError, match=message):
        load_adapter(spec)


def test_object_missing_members_is_refused_listing_them() -> None:
    class Half:
        name = "half"

    with pytest.raises(AdapterError, match=r"Half is not a conformance adapter: it lacks \['protocol_version'"):
        check_adapter(Half())


def test_other_protocol_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    from fake_adapter import FakeAdapter

    old = FakeAdapter()
    old.protocol_version = 0
    with pytest.raises(AdapterError, match=r"speaks protocol version 0, this suite speaks 2"):
        check_adapter(old)
    old.protocol_version = 1
    with pytest.raises(AdapterError, match=r"version 2 adds raw_bytes\(module\)"):
        check_adapter(old)


def test_default_revision_must_be_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    from fake_adapter import FakeAdapter

    odd = FakeAdapter()
    odd.revisions = frozenset({1})
    with pytest.raises(AdapterError, match=r"default revision 2 is not among its revisions \[1\]"):
        check_adapter(odd)


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1"])
def test_device_is_passed_to_an_adapter_that_takes_it(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    assert load_adapter("fake_adapter:DeviceFakeAdapter", device).device == device
    assert load_adapter("fake_adapter:gpu_fake", device).device == device


def test_no_device_keeps_the_adapters_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    assert load_adapter("fake_adapter:DeviceFakeAdapter").device == "cpu"


def test_device_matching_an_adapter_without_the_keyword_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    assert load_adapter("fake_adapter:FakeAdapter", "cpu").device == "cpu"
    assert load_adapter(FAKE, "cpu").device == "cpu"


@pytest.mark.parametrize("spec", ["fake_adapter:FakeAdapter", FAKE])
def test_device_an_adapter_cannot_take_is_refused(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    with pytest.raises(AdapterError, match=r"--device cuda: adapter 'fake' runs on 'cpu' and takes no device argument"):
        load_adapter(spec, "cuda")
