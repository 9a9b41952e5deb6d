"""Forward hooks on real packrt modules: each rule of the rev-2 hook methods, and the ready-made hooks."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import packrt
from packrt import nn


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: Any, *, shift: float = 0.0) -> Any:
        return x * self.factor + shift


class Boom(nn.Module):
    def forward(self, x: Any) -> Any:
        raise RuntimeError("forward failed")


def model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_hooks_run_in_registration_order_and_prepend_goes_first() -> None:
    m, order = Scale(1.0), []
    m.register_forward_hook(lambda mod, a, out: order.append("first"))
    m.register_forward_hook(lambda mod, a, out: order.append("second"))
    m.register_forward_hook(lambda mod, a, out: order.append("prepended"), prepend=True)
    m.register_forward_pre_hook(lambda mod, a: order.append("pre"))
    m(1.0)
    assert order == ["pre", "prepended", "first", "second"]


def test_a_pre_hook_value_replaces_the_arguments_and_a_single_value_becomes_a_one_tuple() -> None:
    m = Scale(2.0)
    seen: list[tuple[Any, ...]] = []
    m.register_forward_pre_hook(lambda mod, args: 5.0)  # not a tuple
    m.register_forward_hook(lambda mod, args, out: seen.append(args))
    assert m(1.0) == 10.0 and seen == [(5.0,)]


def test_with_kwargs_pre_hooks_replace_args_and_kwargs_together() -> None:
    m = Scale(1.0)
    m.register_forward_pre_hook(lambda mod, args, kwargs: ((args[0] + 1,), {"shift": 10.0}), with_kwargs=True)
    assert m(1.0) == 12.0


def test_with_kwargs_forward_hooks_see_the_keywords() -> None:
    m, seen = Scale(1.0), []
    m.register_forward_hook(lambda mod, args, kwargs, out: seen.append((args, kwargs, out)), with_kwargs=True)
    m(2.0, shift=1.0)
    assert seen == [((2.0,), {"shift": 1.0}, 3.0)]


def test_a_forward_hook_value_replaces_the_output_and_none_keeps_it() -> None:
    m = Scale(1.0)
    m.register_forward_hook(lambda mod, args, out: None)
    m.register_forward_hook(lambda mod, args, out: out * 100)
    assert m(2.0) == 200.0


def test_always_call_hooks_run_with_none_when_forward_raises_and_the_error_still_propagates() -> None:
    m, calls = Boom(), []
    m.register_forward_hook(lambda mod, args, out: calls.append(("always", out)), always_call=True)
    m.register_forward_hook(lambda mod, args, out: calls.append(("plain", out)))
    with pytest.raises(RuntimeError, match="forward failed"):
        m(1.0)
    assert calls == [("always", None)]


def test_a_hook_that_removes_itself_does_not_disturb_the_current_call() -> None:
    m, calls = Scale(1.0), []
    handles: list[Any] = []

    def once(mod: Any, args: Any, out: Any) -> None:
        calls.append("once")
        handles[0].remove()

    handles.append(m.register_forward_hook(once))
    m.register_forward_hook(lambda mod, args, out: calls.append("after"))
    m(1.0)
    m(1.0)
    assert calls == ["once", "after", "after"]


def test_handle_remove_is_idempotent_and_works_as_a_context_manager() -> None:
    m, calls = Scale(1.0), []
    with m.register_forward_hook(lambda mod, args, out: calls.append(1)) as handle:
        m(1.0)
    handle.remove()
    m(1.0)
    assert calls == [1]


def test_profile_counts_every_module_of_a_real_model() -> None:
    net = model()
    with packrt.hooks.profile(net) as prof:
        for _ in range(3):
            net(packrt.randn(2, 4))
    assert {path: t.calls for path, t in prof.timings.items()} == {"": 3, "0": 3, "1": 3, "2": 3}
    assert "Linear" in str(prof)


def test_capture_records_named_outputs_per_call() -> None:
    net = model()
    with packrt.hooks.capture(net, ["1"]) as seen:
        net(packrt.randn(2, 4))
        net(packrt.randn(5, 4))
    assert [out.shape for out in seen["1"]] == [(2, 8), (5, 8)]
    with pytest.raises(LookupError, match="'3'"):
        packrt.hooks.capture(net, ["3"])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf is the point here
def test_check_finite_names_the_first_module_with_a_non_finite_output() -> None:
    net = model()
    with packrt.hooks.check_finite(net), pytest.raises(packrt.hooks.NonFiniteError, match="'0'") as info:
        net(packrt.full((1, 4), float("inf")))
    assert info.value.module == "0"


def test_trace_shapes_logs_shapes_and_dtypes(caplog: pytest.LogCaptureFixture) -> None:
    net = model()
    with caplog.at_level(logging.INFO, logger="packrt.hooks.trace"), packrt.hooks.trace_shapes(net) as trace:
        net(packrt.randn(3, 4))
    assert "float32[3, 8]" in caplog.text and len(trace.records) == 4
