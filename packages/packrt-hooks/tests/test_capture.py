"""capture(): the outputs of named submodules, one entry per call, unknown paths refused."""

from __future__ import annotations

import numpy as np
import pytest
from hookfakes import Affine, Seq, Split

from packrt_hooks import Capture, UnknownModuleError, capture


def model() -> Seq:
    return Seq(enc=Seq(first=Affine(2.0), second=Affine(3.0)), head=Split())


def test_capture_records_each_named_module_output_once_per_call_in_call_order() -> None:
    net = model()
    with capture(net, ["enc.first", "head"]) as seen:
        net(np.array([1.0]))
        net(np.array([10.0]))
    assert list(seen) == ["enc.first", "head"]
    assert [out.tolist() for out in seen["enc.first"]] == [[2.0], [20.0]]
    assert len(seen["head"]) == 2
    first_head = seen["head"][0]
    assert first_head[0].tolist() == [6.0]
    assert first_head[1]["doubled"].tolist() == [12.0]


def test_capture_accepts_one_path_as_a_string_and_the_root_as_the_empty_path() -> None:
    net = model()
    with capture(net, "enc.second") as one, capture(net, [""]) as root:
        net(np.array([1.0]))
    assert [o.tolist() for o in one["enc.second"]] == [[6.0]]
    assert root[""][0][1]["count"] == 1


def test_capture_keys_are_present_before_any_call() -> None:
    seen = capture(model(), ["enc", "head"])
    assert dict(seen) == {"enc": [], "head": []}
    assert isinstance(seen, Capture)
    assert "recording" in repr(seen)
    seen.remove()
    assert "removed" in repr(seen)


def test_capture_records_the_output_after_earlier_forward_hooks_replaced_it() -> None:
    net = model()
    net.enc.first.register_forward_hook(lambda _m, _a, out: out + 100)
    with capture(net, ["enc.first"]) as seen:
        net(np.array([1.0]))
    assert seen["enc.first"][0].tolist() == [102.0]


def test_a_transform_stores_a_copy_that_later_in_place_writes_do_not_change() -> None:
    net = Seq(inner=Affine(1.0))
    with capture(net, ["inner"], transform=np.array) as copied, capture(net, ["inner"]) as raw:
        out = net(np.array([1.0]))
    out += 5
    assert copied["inner"][0].tolist() == [1.0]
    assert raw["inner"][0].tolist() == [6.0]


def test_an_unknown_path_is_an_error_naming_it_and_the_close_matches() -> None:
    net = model()
    with pytest.raises(UnknownModuleError, match=r"no module at path 'enc.frist'.*did you mean 'enc.first'"):
        capture(net, ["head", "enc.frist"])
    assert all(not m._forward_hooks for _, m in net.named_modules())


def test_an_unknown_path_with_no_close_match_lists_known_paths() -> None:
    with pytest.raises(LookupError, match=r"no module at path 'zzz'.*known paths start with 'enc'"):
        capture(model(), "zzz")


def test_capture_needs_at_least_one_path() -> None:
    with pytest.raises(ValueError, match="needs at least one module path"):
        capture(model(), [])


def test_removing_the_capture_stops_recording_and_clear_forgets() -> None:
    net = model()
    seen = capture(net, ["enc.first", "enc.second"])
    net(np.array([1.0]))
    seen.remove()
    net(np.array([1.0]))
    assert [len(v) for v in seen.values()] == [1, 1]
    seen.clear()
    assert [len(v) for v in seen.values()] == [0, 0]


def test_a_capture_is_equal_only_to_itself_and_hashable() -> None:
    net = model()
    a, b = capture(net, "head"), capture(net, "head")
    assert a != b
    assert a == a
    assert len({a, b}) == 2
