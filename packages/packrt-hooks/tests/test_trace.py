"""trace_shapes(): input and output shapes and dtypes of every call, logged and listed."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hookfakes import Affine, Echo, Raises, Seq, Split

from packrt_hooks import TRACE_LOGGER_NAME, ShapeTrace, TensorSpec, describe, trace_shapes


def test_each_call_is_recorded_in_start_order_with_its_depth_and_shapes() -> None:
    net = Seq(enc=Seq(a=Affine()), head=Split())
    with trace_shapes(net) as trace:
        net(np.ones((2, 3), dtype=np.float32))
    assert isinstance(trace, ShapeTrace)
    assert [(r.module, r.depth) for r in trace.records] == [("", 0), ("enc", 1), ("enc.a", 2), ("head", 1)]
    a = trace.records[2]
    assert a.args == (TensorSpec((2, 3), "float32"),)
    assert a.output == TensorSpec((2, 3), "float32")
    head = trace.records[3]
    assert head.output == (
        TensorSpec((2, 3), "float32"),
        {"doubled": TensorSpec((2, 3), "float32"), "count": "int"},
    )
    assert all(r.done for r in trace.records)


def test_each_finished_call_is_logged_to_the_packrt_hooks_trace_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    net = Seq(a=Affine())
    with caplog.at_level(logging.INFO, logger=TRACE_LOGGER_NAME), trace_shapes(net):
        net(np.ones((4,), dtype=np.float64))
    messages = [(r.name, r.getMessage()) for r in caplog.records]
    assert messages == [
        (TRACE_LOGGER_NAME, "  a (Affine): (float64[4],) -> float64[4]"),
        (TRACE_LOGGER_NAME, "(root) (Seq): (float64[4],) -> float64[4]"),
    ]


def test_the_log_level_is_chosen_by_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    net = Seq(a=Affine())
    with caplog.at_level(logging.INFO, logger=TRACE_LOGGER_NAME), trace_shapes(net, level=logging.DEBUG):
        net(np.ones(1))
    assert caplog.records == []


def test_kwargs_and_the_arguments_after_pre_hooks_are_what_gets_recorded() -> None:
    net = Seq(echo=Echo())
    trace = trace_shapes(net)
    net.echo.register_forward_pre_hook(lambda _m, args: (args[0], np.zeros((5,), dtype=np.int8)))
    net.echo(np.ones(2), mask=np.ones((2, 2), dtype=bool))
    record = trace.records[0]
    assert record.args == (TensorSpec((2,), "float64"), TensorSpec((5,), "int8"))
    assert record.kwargs == {"mask": TensorSpec((2, 2), "bool")}
    assert str(record).startswith("echo (Echo): (float64[2], int8[5]) {'mask': bool[2, 2]} -> ")
    trace.remove()


def test_a_call_that_raises_is_recorded_with_its_error() -> None:
    net = Seq(bad=Raises())
    with trace_shapes(net) as trace, pytest.raises(ValueError, match="forward failed on purpose"):
        net(np.ones(3))
    assert [r.error for r in trace.records] == ["ValueError: forward failed on purpose"] * 2
    assert str(trace).splitlines()[1] == "  bad (Raises): (float64[3],) -> raised ValueError: forward failed on purpose"


def test_str_of_the_trace_is_the_indented_call_tree_and_clear_empties_it() -> None:
    net = Seq(a=Affine(), b=Affine())
    with trace_shapes(net) as trace:
        net(np.ones(2))
    assert str(trace).splitlines() == [
        "(root) (Seq): (float64[2],) -> float64[2]",
        "  a (Affine): (float64[2],) -> float64[2]",
        "  b (Affine): (float64[2],) -> float64[2]",
    ]
    trace.clear()
    assert trace.records == []


def test_removing_the_trace_removes_every_hook() -> None:
    net = Seq(a=Affine())
    trace = trace_shapes(net)
    trace.remove()
    net(np.ones(2))
    assert trace.records == []
    assert all(not m._forward_pre_hooks and not m._forward_hooks for _, m in net.named_modules())


def test_describe_keeps_structure_and_replaces_data_by_specs() -> None:
    value = [np.zeros((1, 2), dtype=np.float16), (3, None), {"k": "text"}]
    assert describe(value) == [TensorSpec((1, 2), "float16"), ("int", None), {"k": "str"}]


def test_describe_walks_named_tuple_outputs_like_tuples() -> None:
    from typing import NamedTuple

    class Output(NamedTuple):
        logits: np.ndarray
        loss: float

    assert describe(Output(np.zeros((2,), dtype=np.float32), 0.5)) == (TensorSpec((2,), "float32"), "float")
