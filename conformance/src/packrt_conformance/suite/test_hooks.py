"""Forward hooks and pre-hooks: call shapes, replacement, order, prepend, always_call, removal."""

from __future__ import annotations

from typing import Any

import pytest

from packrt_conformance.adapter import Adapter
from packrt_conformance.suite._support import forward_module, hook_registry_cases, raising_module


@pytest.mark.clause("forward.call-runs-hooks")
def test_hooks_run_around_a_call_but_not_a_direct_forward(impl: Adapter) -> None:
    m = forward_module(impl)
    log: list[str] = []
    m.register_forward_pre_hook(lambda mod, args: log.append("pre"))
    m.register_forward_hook(lambda mod, args, out: log.append("post"))
    assert m(1) == 10
    assert log == ["pre", "post"]
    assert m.forward(2) == 20
    assert log == ["pre", "post"], "calling forward directly must not run the hooks"


@pytest.mark.clause("register_forward_hook.runs-after-forward")
def test_forward_hook_sees_module_args_tuple_and_output(impl: Adapter) -> None:
    m = forward_module(impl)
    seen: list[Any] = []
    m.register_forward_hook(lambda mod, args, out: seen.append((mod, args, out, list(mod.calls))))
    m(3, 4)
    assert seen == [(m, (3, 4), 34, [(3, 4)])]


@pytest.mark.clause("register_forward_hook.none-keeps-output")
def test_forward_hook_returning_none_keeps_output(impl: Adapter) -> None:
    m = forward_module(impl)
    m.register_forward_hook(lambda mod, args, out: None)
    assert m(2) == 20


@pytest.mark.clause("register_forward_hook.value-replaces-output")
def test_forward_hook_value_replaces_output_for_later_hooks_too(impl: Adapter) -> None:
    m = forward_module(impl)
    later: list[Any] = []
    m.register_forward_hook(lambda mod, args, out: out + 1)
    m.register_forward_hook(lambda mod, args, out: later.append(out))
    assert m(2) == 21
    assert later == [21]


@pytest.mark.clause("register_forward_hook.with-kwargs")
def test_forward_hook_with_kwargs_receives_the_keywords(impl: Adapter) -> None:
    m = forward_module(impl)
    seen: list[Any] = []
    m.register_forward_hook(lambda mod, args, kwargs, out: seen.append((args, kwargs, out)), with_kwargs=True)
    m(1, y=5)
    assert seen == [((1,), {"y": 5}, 15)]


@pytest.mark.clause("register_forward_hook.always-call")
def test_always_call_hook_runs_when_forward_raises(impl: Adapter) -> None:
    m = raising_module(impl)
    seen: list[Any] = []
    skipped: list[Any] = []
    m.register_forward_hook(lambda mod, args, out: seen.append(out), always_call=True)
    m.register_forward_hook(lambda mod, args, out: skipped.append(out))
    with pytest.raises(ValueError, match="forward failed on purpose"):
        m(1)
    assert seen == [None]
    assert skipped == []


@pytest.mark.clause("register_forward_pre_hook.runs-before-forward")
def test_pre_hook_sees_module_and_args_before_forward(impl: Adapter) -> None:
    m = forward_module(impl)
    seen: list[Any] = []
    m.register_forward_pre_hook(lambda mod, args: seen.append((mod, args, list(mod.calls))))
    m(3, 4)
    assert seen == [(m, (3, 4), [])]


@pytest.mark.clause("register_forward_pre_hook.none-keeps-args")
def test_pre_hook_returning_none_keeps_arguments(impl: Adapter) -> None:
    m = forward_module(impl)
    m.register_forward_pre_hook(lambda mod, args: None)
    assert m(3, 4) == 34


@pytest.mark.clause("register_forward_pre_hook.value-replaces-args")
def test_pre_hook_tuple_replaces_arguments(impl: Adapter) -> None:
    m = forward_module(impl)
    m.register_forward_pre_hook(lambda mod, args: (args[0] + 1, 7))
    assert m(3, 4) == 47


@pytest.mark.clause("register_forward_pre_hook.single-value-wrapped")
def test_pre_hook_single_value_becomes_the_only_argument(impl: Adapter) -> None:
    m = forward_module(impl)
    m.register_forward_pre_hook(lambda mod, args: 9)
    assert m(3, 4) == 90
    assert m.calls == [(9, 0)]


@pytest.mark.clause("register_forward_pre_hook.with-kwargs")
def test_pre_hook_with_kwargs_replaces_args_and_kwargs(impl: Adapter) -> None:
    m = forward_module(impl)
    seen: list[Any] = []

    def hook(mod: Any, args: Any, kwargs: Any) -> Any:
        seen.append((args, dict(kwargs)))
        return (2,), {"y": 3}

    m.register_forward_pre_hook(hook, with_kwargs=True)
    assert m(1, y=5) == 23
    assert seen == [((1,), {"y": 5})]


# -- rules both registries keep ---------------------------------------------------------------
@pytest.mark.parametrize(
    "register",
    [
        pytest.param(
            "register_forward_hook",
            marks=pytest.mark.clause("register_forward_hook.registration-order", "register_forward_hook.prepend"),
            id="register_forward_hook",
        ),
        pytest.param(
            "register_forward_pre_hook",
            marks=pytest.mark.clause(
                "register_forward_pre_hook.registration-order", "register_forward_pre_hook.prepend"
            ),
            id="register_forward_pre_hook",
        ),
    ],
)
def test_hooks_run_in_registration_order_and_prepend_goes_first(impl: Adapter, register: str) -> None:
    m = forward_module(impl)
    log: list[str] = []
    add = getattr(m, register)
    add(lambda mod, args, *out: log.append("first"))
    add(lambda mod, args, *out: log.append("second"))
    add(lambda mod, args, *out: log.append("prepended"), prepend=True)
    m(1)
    assert log == ["prepended", "first", "second"]


@pytest.mark.parametrize("register", hook_registry_cases("prepend"))
def test_each_prepended_hook_runs_before_every_hook_registered_before_it(impl: Adapter, register: str) -> None:
    m = forward_module(impl)
    log: list[str] = []
    add = getattr(m, register)
    add(lambda mod, args, *out: log.append("a"))
    add(lambda mod, args, *out: log.append("p1"), prepend=True)
    add(lambda mod, args, *out: log.append("b"))
    add(lambda mod, args, *out: log.append("p2"), prepend=True)
    add(lambda mod, args, *out: log.append("c"))
    m(1)
    assert log == ["p2", "p1", "a", "b", "c"], "the latest prepend runs first; the plain ones keep their order"


@pytest.mark.clause("forward.call-runs-hooks")
def test_hooks_run_on_a_child_called_inside_its_parents_forward(impl: Adapter) -> None:
    child = forward_module(impl)

    class Parent(impl.nn.Module):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            super().__init__()
            self.child = child

        def forward(self, x: Any) -> Any:
            return self.child(x) + 1

    parent = Parent()
    log: list[str] = []
    child.register_forward_pre_hook(lambda mod, args: log.append("child-pre"))
    child.register_forward_hook(lambda mod, args, out: log.append("child-post"))
    parent.register_forward_hook(lambda mod, args, out: log.append("parent-post"))
    assert parent(2) == 21
    assert parent(3) == 31
    assert log == ["child-pre", "child-post", "parent-post"] * 2, "a nested call is a call: its hooks run"


@pytest.mark.parametrize("register", hook_registry_cases("handle-remove"))
def test_removed_hook_no_longer_runs(impl: Adapter, register: str) -> None:
    m = forward_module(impl)
    log: list[Any] = []
    handle = getattr(m, register)(lambda mod, args, *out: log.append(args))
    m(1)
    handle.remove()
    m(2)
    assert log == [(1,)]


# -- several hooks of one kind: order on a raising forward, removal -------------------------------
@pytest.mark.clause("register_forward_hook.always-call-order")
def test_always_call_hooks_run_in_run_order_when_forward_raises(impl: Adapter) -> None:
    m = raising_module(impl)
    log: list[tuple[str, Any]] = []

    def hook(tag: str) -> Any:
        return lambda mod, args, out: log.append((tag, out))

    m.register_forward_hook(hook("first"), always_call=True)
    m.register_forward_hook(hook("plain"))
    m.register_forward_hook(hook("third"), always_call=True)
    m.register_forward_hook(hook("prepended"), always_call=True, prepend=True)
    with pytest.raises(ValueError, match="forward failed on purpose"):
        m(1)
    assert log == [("prepended", None), ("first", None), ("third", None)]
    log.clear()
    with pytest.raises(ValueError, match="forward failed on purpose"):
        m(2)
    assert log == [("prepended", None), ("first", None), ("third", None)], "a second failing call runs them again"


@pytest.mark.clause("register_forward_hook.always-call-with-kwargs")
def test_always_call_hook_with_kwargs_receives_args_kwargs_and_none(impl: Adapter) -> None:
    class Failing(impl.nn.Module):  # type: ignore[name-defined,misc]
        def forward(self, x: Any, y: Any = 0) -> Any:
            raise ValueError("forward failed on purpose")

    m = Failing()
    seen: list[Any] = []
    m.register_forward_hook(
        lambda mod, args, kwargs, out: seen.append((mod, args, dict(kwargs), out)), with_kwargs=True, always_call=True
    )
    with pytest.raises(ValueError, match="forward failed on purpose"):
        m(1, y=5)
    assert seen == [(m, (1,), {"y": 5}, None)]


def _recorder(register: str, log: list[str], tag: str) -> Any:
    if register == "register_forward_hook":
        return lambda mod, args, out: log.append(tag)
    return lambda mod, args: log.append(tag)


@pytest.mark.parametrize("register", hook_registry_cases("remove-keeps-the-rest"))
def test_removing_one_of_three_hooks_keeps_the_others_in_order(impl: Adapter, register: str) -> None:
    m = forward_module(impl)
    log: list[str] = []
    handles = {tag: getattr(m, register)(_recorder(register, log, tag)) for tag in ("a", "b", "c")}
    m(1)
    assert log == ["a", "b", "c"]
    steps = [("b", ["a", "c"]), ("a", ["c"]), ("b", ["c"]), ("c", [])]  # "b" twice: a spent handle is a no-op
    for tag, left in steps:
        handles[tag].remove()
        log.clear()
        assert m(1) == 10
        assert log == left, f"after removing {tag!r}"


@pytest.mark.parametrize("register", hook_registry_cases("remove-own-only"))
@pytest.mark.parametrize("removed", ["older", "newer"])
def test_a_handle_removes_exactly_its_own_hook(impl: Adapter, register: str, removed: str) -> None:
    m = forward_module(impl)
    log: list[str] = []
    handles = {tag: getattr(m, register)(_recorder(register, log, tag)) for tag in ("older", "newer")}
    handles[removed].remove()
    m(1)
    assert log == [tag for tag in ("older", "newer") if tag != removed]


_FALSY = [0, 0.0, False, (), ""]


@pytest.mark.clause("register_forward_hook.falsy-value-replaces-output")
@pytest.mark.parametrize("with_kwargs", [False, True])
@pytest.mark.parametrize("value", _FALSY, ids=repr)
def test_a_falsy_hook_value_replaces_the_output(impl: Adapter, value: Any, with_kwargs: bool) -> None:
    m = forward_module(impl)
    later: list[Any] = []
    m.register_forward_hook(lambda mod, args, *rest: value, with_kwargs=with_kwargs)
    m.register_forward_hook(lambda mod, args, out: later.append(out))
    out = m(2)
    assert (type(out), out) == (type(value), value), "a hook's non-None value is the output"
    assert [(type(v), v) for v in later] == [(type(value), value)], "and what later hooks see"


@pytest.mark.clause("register_forward_pre_hook.falsy-value-replaces-args")
@pytest.mark.parametrize("value", [0, 0.0, False], ids=repr)
def test_a_falsy_pre_hook_value_becomes_the_only_argument(impl: Adapter, value: Any) -> None:
    m = forward_module(impl)
    m.register_forward_pre_hook(lambda mod, args: value)
    m(3, 4)
    assert [(type(x), x, y) for x, y in m.calls] == [(type(value), value, 0)]


@pytest.mark.clause("register_forward_hook.same-function-twice")
def test_a_function_registered_twice_runs_twice(impl: Adapter) -> None:
    m = forward_module(impl)
    log: list[Any] = []

    def hook(mod: Any, args: Any, out: Any) -> None:
        log.append(out)

    first = m.register_forward_hook(hook)
    m.register_forward_hook(hook)
    m(1)
    assert log == [10, 10]
    first.remove()
    log.clear()
    m(2)
    assert log == [20], "removing one registration keeps the other"
