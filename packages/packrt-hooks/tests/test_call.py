"""call_with_hooks: what pre-hooks and forward hooks may do to a call, and what runs on a raise."""

from __future__ import annotations

import copy
import threading
from typing import Any

import numpy as np
import pytest
from hookfakes import Affine, Counter, Echo, Raises, Seq

from packrt_hooks import HookResultError, RemovableHandle, unwinding_exception


def test_a_module_without_hooks_takes_the_lean_path_and_still_works() -> None:
    echo = Echo()
    assert echo(1, k=2) == ((1,), {"k": 2})


def test_a_pre_hook_returning_none_leaves_the_arguments_alone() -> None:
    echo = Echo()
    seen = Counter()
    echo.register_forward_pre_hook(seen)
    assert echo(1, 2, k=3) == ((1, 2), {"k": 3})
    assert seen.calls == [(echo, (1, 2))]


def test_a_pre_hook_returning_a_tuple_replaces_the_positional_arguments() -> None:
    echo = Echo()
    echo.register_forward_pre_hook(lambda _m, args: (*args, "added"))
    assert echo(1, k=3) == ((1, "added"), {"k": 3})


def test_a_pre_hook_returning_a_single_value_has_it_wrapped_into_a_one_tuple() -> None:
    echo = Echo()
    echo.register_forward_pre_hook(lambda _m, args: [args[0] * 10])
    assert echo(4) == (([40],), {})


def test_each_pre_hook_sees_the_arguments_the_previous_one_returned() -> None:
    echo = Echo()
    echo.register_forward_pre_hook(lambda _m, args: args[0] + 1)
    echo.register_forward_pre_hook(lambda _m, args: args[0] * 10)
    assert echo(1) == ((20,), {})


def test_a_with_kwargs_pre_hook_gets_the_kwargs_and_may_replace_both() -> None:
    echo = Echo()
    seen: list[Any] = []

    def hook(_m: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        seen.append((args, dict(kwargs)))
        return (args[1:], {**kwargs, "extra": True})

    echo.register_forward_pre_hook(hook, with_kwargs=True)
    assert echo(1, 2, k=3) == ((2,), {"k": 3, "extra": True})
    assert seen == [((1, 2), {"k": 3})]


def test_a_with_kwargs_pre_hook_returning_none_keeps_both() -> None:
    echo = Echo()
    echo.register_forward_pre_hook(lambda _m, _a, _k: None, with_kwargs=True)
    assert echo(1, k=2) == ((1,), {"k": 2})


@pytest.mark.parametrize(
    ("returned", "described"),
    [
        ((1, 2), r"returned a tuple of length 2 \(int, int\)"),
        (((1,), {}, "extra"), r"returned a tuple of length 3 \(tuple, dict, str\)"),
        ((1, 2, 3, 4, 5), r"returned a tuple of length 5 \(int, int, int, int, \.\.\.\)"),
        ({"k": 1}, r"returned dict"),
        (((1,), [("k", 1)]), r"returned a tuple of length 2 \(tuple, list\)"),
        (([1], {}), r"returned a tuple of length 2 \(list, dict\)"),
    ],
)
def test_a_with_kwargs_pre_hook_returning_anything_but_a_pair_is_a_type_error_naming_it(
    returned: object, described: str
) -> None:
    def bad_pre_hook(_m: object, _args: Any, _kwargs: Any) -> object:
        return returned

    echo = Echo()
    echo.register_forward_pre_hook(bad_pre_hook, with_kwargs=True)
    with pytest.raises(HookResultError, match=r"bad_pre_hook .*on Echo " + described) as info:
        echo(1)
    assert isinstance(info.value, TypeError)
    assert "expected None (keep the arguments) or a pair (new_args, new_kwargs)" in str(info.value)


def test_a_forward_hook_returning_none_keeps_the_output() -> None:
    affine = Affine(scale=3.0)
    seen = Counter()
    affine.register_forward_hook(seen)
    assert affine(np.float64(2.0)) == 6.0
    assert seen.calls == [(affine, (np.float64(2.0),), 6.0)]


def test_a_forward_hook_value_replaces_the_output_and_the_next_hook_sees_the_replacement() -> None:
    affine = Affine(scale=3.0)
    seen = Counter()
    affine.register_forward_hook(lambda _m, _a, out: out + 1)
    affine.register_forward_hook(seen)
    affine.register_forward_hook(lambda _m, _a, out: out * 100)
    assert affine(2.0) == 700.0
    assert seen.calls[0][2] == 7.0


def test_a_with_kwargs_forward_hook_gets_args_kwargs_and_output() -> None:
    echo = Echo()
    seen = Counter()
    echo.register_forward_hook(seen, with_kwargs=True)
    echo.register_forward_pre_hook(lambda _m, args, kwargs: ((*args, 9), kwargs), with_kwargs=True)
    result = echo(1, k=2)
    assert seen.calls == [(echo, (1, 9), {"k": 2}, result)]


def test_forward_hooks_see_the_arguments_the_pre_hooks_produced() -> None:
    echo = Echo()
    seen = Counter()
    echo.register_forward_pre_hook(lambda _m, args: args[0] * 2)
    echo.register_forward_hook(seen)
    echo(5)
    assert seen.calls[0][1] == (10,)


def test_always_call_hooks_run_with_output_none_when_forward_raises() -> None:
    module = Raises()
    always, plain = Counter(), Counter()
    module.register_forward_hook(plain)
    module.register_forward_hook(always, always_call=True)
    with pytest.raises(ValueError, match="forward failed on purpose"):
        module(1)
    assert always.calls == [(module, (1,), None)]
    assert plain.calls == []


def test_always_call_hooks_run_when_a_pre_hook_raises_and_forward_does_not() -> None:
    echo = Echo()
    always, plain = Counter(), Counter()
    forward_ran: list[bool] = []
    echo.forward = lambda *a, **k: forward_ran.append(True)  # type: ignore[method-assign]

    def failing_pre_hook(_m: object, _args: Any) -> None:
        raise RuntimeError("pre-hook failed")

    echo.register_forward_pre_hook(failing_pre_hook)
    echo.register_forward_hook(plain)
    echo.register_forward_hook(always, always_call=True, with_kwargs=True)
    with pytest.raises(RuntimeError, match="pre-hook failed"):
        echo(1, k=2)
    assert always.calls == [(echo, (1,), {"k": 2}, None)]
    assert plain.calls == []
    assert forward_ran == []


def test_an_earlier_forward_hook_raising_runs_only_the_later_always_call_hooks() -> None:
    affine = Affine()
    before, after, plain_after = Counter(), Counter(), Counter()
    affine.register_forward_hook(before, always_call=True)

    def failing_hook(_m: object, _args: Any, _out: Any) -> None:
        raise KeyError("forward hook failed")

    affine.register_forward_hook(failing_hook, always_call=True)
    affine.register_forward_hook(plain_after)
    affine.register_forward_hook(after, always_call=True)
    with pytest.raises(KeyError, match="forward hook failed"):
        affine(1.0)
    assert before.calls == [(affine, (1.0,), 2.0)]  # ran once, normally, before the raise
    assert after.calls == [(affine, (1.0,), None)]
    assert plain_after.calls == []


def test_an_always_call_hook_raising_while_unwinding_is_noted_on_the_original_error() -> None:
    module = Raises()
    later = Counter()

    def broken_cleanup(_m: object, _args: Any, _out: Any) -> None:
        raise OSError("cleanup also failed")

    module.register_forward_hook(broken_cleanup, always_call=True)
    module.register_forward_hook(later, always_call=True)
    with pytest.raises(ValueError, match="forward failed on purpose") as info:
        module()
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1
    assert "broken_cleanup" in notes[0]
    assert "OSError: cleanup also failed" in notes[0]
    assert len(later.calls) == 1  # the remaining always_call hooks still ran


def test_a_hook_that_removes_itself_still_finishes_the_current_call_cleanly() -> None:
    affine = Affine()
    calls: list[str] = []
    handles: dict[str, RemovableHandle] = {}

    def once(_m: object, _args: Any, _out: Any) -> None:
        calls.append("once")
        handles["once"].remove()

    def after(_m: object, _args: Any, _out: Any) -> None:
        calls.append("after")

    handles["once"] = affine.register_forward_hook(once)
    affine.register_forward_hook(after)
    affine(1.0)
    affine(1.0)
    assert calls == ["once", "after", "after"]


def test_a_pre_hook_removing_a_later_hook_takes_effect_from_the_next_call() -> None:
    affine = Affine()
    calls: list[str] = []
    handles: dict[str, RemovableHandle] = {}

    def remover(_m: object, _args: Any) -> None:
        calls.append("remover")
        handles["victim"].remove()

    affine.register_forward_pre_hook(remover)
    handles["victim"] = affine.register_forward_hook(lambda *_: calls.append("victim"))
    affine(1.0)
    assert calls == ["remover", "victim"]  # the call that removed it still runs it
    affine(1.0)
    assert calls == ["remover", "victim", "remover"]


def test_a_hook_registering_another_does_not_run_it_in_the_current_call() -> None:
    affine = Affine()
    calls: list[str] = []

    def registrar(module: Affine, _args: Any, _out: Any) -> None:
        calls.append("registrar")
        module.register_forward_hook(lambda *_: calls.append("new"))
        module.register_forward_pre_hook(lambda *_: calls.append("new-pre"), prepend=True)

    handle = affine.register_forward_hook(registrar)
    affine(1.0)
    assert calls == ["registrar"]
    handle.remove()
    affine(1.0)
    assert calls == ["registrar", "new-pre", "new"]


def test_hooks_on_nested_modules_run_around_each_child_call() -> None:
    model = Seq(a=Affine(2.0), b=Affine(10.0))
    order: list[str] = []
    for name, module in model.named_modules():
        module.register_forward_pre_hook(lambda _m, _a, name=name: order.append(f"pre {name or 'root'}"))
        module.register_forward_hook(lambda _m, _a, _o, name=name: order.append(f"post {name or 'root'}"))
    assert model(1.0) == 20.0
    assert order == ["pre root", "pre a", "post a", "pre b", "post b", "post root"]


def test_a_deep_copied_module_keeps_its_hooks_and_the_original_handles_do_not_touch_them() -> None:
    affine = Affine()
    handle = affine.register_forward_hook(lambda _m, _a, out: out + 1)
    twin = copy.deepcopy(affine)
    handle.remove()
    assert affine(1.0) == 2.0
    assert twin(1.0) == 3.0
    twin.register_forward_hook(lambda _m, _a, out: out * 0)
    assert affine(1.0) == 2.0


def test_unwinding_exception_is_the_propagating_error_only_inside_always_call_hooks() -> None:
    seen: list[BaseException | None] = []

    def watcher(_m: object, _args: Any, _out: Any) -> None:
        seen.append(unwinding_exception())

    ok, bad = Affine(), Raises()
    ok.register_forward_hook(watcher, always_call=True)
    bad.register_forward_hook(watcher, always_call=True)
    ok(1.0)
    with pytest.raises(ValueError, match="forward failed on purpose") as info:
        bad(1.0)
    assert seen == [None, info.value]
    assert unwinding_exception() is None


def test_registrations_from_many_threads_are_all_kept() -> None:
    affine = Affine()
    calls: list[int] = []

    def register(count: int) -> None:
        for _ in range(count):
            affine.register_forward_hook(lambda *_: calls.append(1))

    threads = [threading.Thread(target=register, args=(200,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    affine(1.0)
    assert len(calls) == 800
