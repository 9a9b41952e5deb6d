"""PyTorch's forward-hook tests (test/nn/test_module_hooks.py: forward and pre-hooks with prepend,
mixed, keyword-argument hooks, removal, always_call), rewritten for packrt through the ``shim``
fixture. packrt has no autograd, so the backward-hook cases have nothing to port."""

from __future__ import annotations

from functools import partial, reduce
from typing import Any

import pytest


def _toy(shim: Any) -> Any:
    """Two nets of two Sequentials of two Linear(10, 10) each, called one after the other."""
    nn = shim.nn

    class Net(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.seq1 = nn.Sequential(*[nn.Linear(10, 10) for _ in range(2)])
            self.seq2 = nn.Sequential(*[nn.Linear(10, 10) for _ in range(2)])

        def forward(self, x: Any) -> Any:
            return self.seq2(self.seq1(x))

    class Toy(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net1, self.net2 = Net(), Net()

        def forward(self, x: Any) -> Any:
            return self.net2(self.net1(x))

    return Toy()


def _kwarg_model(shim: Any) -> Any:
    class KwargModel(shim.nn.Module):  # type: ignore[misc, name-defined]
        def forward(self, x: Any, bias: Any = None) -> Any:
            return x if bias is None else x + bias

        def add_bias_hook(self, module: Any, args: Any, kwargs: Any, out: Any) -> Any:
            return out + kwargs["bias"]

    return KwargModel()


def _record(fired: list[int], expected: Any, hook_id: int, module: Any, args: Any, *rest: Any) -> None:
    fired.append(hook_id)
    assert module is expected and len(args) == 1


def _double_bias(fired: list[int], expected: Any, hook_id: int, module: Any, args: Any, kwargs: Any) -> Any:
    fired.append(hook_id)
    assert module is expected and len(args) == 1
    kwargs["bias"] = 2 * kwargs["bias"]
    return args, kwargs


def _add_bias(fired: list[int], expected: Any, hook_id: int, module: Any, args: Any, kwargs: Any, out: Any) -> Any:
    fired.append(hook_id)
    assert module is expected and len(args) == 1
    return out + kwargs["bias"]


@pytest.mark.parametrize(
    ("kind", "where", "prepends", "expected"),
    [
        ("forward", "net1.seq2", [False, True, False, False, True], [4, 1, 0, 2, 3]),
        ("forward_pre", "net2.seq1", [True, False, False, False, True], [4, 0, 1, 2, 3]),
    ],
)
def test_hooks_run_in_order_with_prepended_ones_first(
    shim: Any, kind: str, where: str, prepends: list[bool], expected: list[int]
) -> None:
    fired: list[int] = []
    model = _toy(shim)
    target = reduce(getattr, where.split("."), model)
    hook = partial(_record, fired, target)
    for hook_id, prepend in enumerate(prepends):
        getattr(target, f"register_{kind}_hook")(partial(hook, hook_id), prepend=prepend)
    x = shim.randn(10, 10)
    model(x)
    assert fired == expected
    model(x)
    assert fired == expected * 2


def test_a_pre_hook_runs_before_and_a_hook_after_the_forward(shim: Any) -> None:
    fired: list[int] = []
    model = _toy(shim)
    model.register_forward_pre_hook(partial(_record, fired, model, 0))
    model.register_forward_hook(partial(_record, fired, model, 1))
    x = shim.randn(10, 10)
    model(x)
    model(x)
    assert fired == [0, 1, 0, 1]


def test_keyword_argument_hooks_see_and_replace_the_keywords(shim: Any) -> None:
    x, bias = shim.ones(10, 10), shim.ones(10, 10)
    fired: list[int] = []
    model = _kwarg_model(shim)
    model.register_forward_pre_hook(partial(_double_bias, fired, model, 0), with_kwargs=True)
    assert shim.equal(model(x, bias=bias), x + 2 * bias) and fired == [0]

    fired = []
    model = _kwarg_model(shim)
    model.register_forward_hook(partial(_add_bias, fired, model, 1), with_kwargs=True)
    model.register_forward_pre_hook(partial(_double_bias, fired, model, 0), with_kwargs=True)
    assert shim.equal(model(x, bias=bias), x + 4 * bias) and fired == [0, 1]

    model = _kwarg_model(shim)
    model.register_forward_hook(model.add_bias_hook, with_kwargs=True)  # a bound method of the module
    assert shim.equal(model(x, bias=bias), x + 2 * bias)


def test_removed_keyword_argument_hooks_stop_running(shim: Any) -> None:
    x, bias = shim.ones(10, 10), shim.ones(10, 10)
    fired: list[int] = []
    model = _kwarg_model(shim)
    post = model.register_forward_hook(partial(_add_bias, fired, model, 1), with_kwargs=True)
    pre = model.register_forward_pre_hook(partial(_double_bias, fired, model, 0), with_kwargs=True)
    assert shim.equal(model(x, bias=bias), x + 4 * bias) and fired == [0, 1]
    post.remove()
    assert shim.equal(model(x, bias=bias), x + 2 * bias) and fired == [0, 1, 0]
    pre.remove()
    assert shim.equal(model(x, bias=bias), x + bias) and fired == [0, 1, 0]


class _Context:
    """Pushes 2 on entry and -1 on exit onto a shared stack."""

    def __init__(self, stack: list[int]) -> None:
        self.stack = stack

    def enter(self) -> None:
        self.stack.append(2)

    def exit(self) -> None:
        self.stack.append(-1)


def test_always_call_hooks_run_when_the_forward_or_a_hook_raises(shim: Any) -> None:
    class FailsInForward(shim.nn.Module):  # type: ignore[misc, name-defined]
        def forward(self, x: Any, fail: bool = True) -> Any:
            if fail:
                raise RuntimeError("failing in forward")
            return x

    stack: list[int] = []
    current: list[_Context] = []

    def setup(module: Any, args: Any) -> None:
        current[:] = [_Context(stack)]
        current[0].enter()

    def setup_then_fail(module: Any, args: Any) -> None:
        setup(module, args)
        raise RuntimeError("failing in ctx setup")

    def shutdown(module: Any, args: Any, out: Any) -> None:
        current[0].exit()

    def shutdown_then_fail(module: Any, args: Any, out: Any) -> None:
        shutdown(module, args, out)
        raise RuntimeError("failing in ctx shutdown")

    def throw(module: Any, args: Any, out: Any) -> None:
        raise RuntimeError("failing in throw")

    model, x = FailsInForward(), shim.ones(10, 10)
    pre = model.register_forward_pre_hook(setup)
    post = model.register_forward_hook(shutdown, always_call=True)
    with pytest.raises(RuntimeError, match="failing in forward"):
        model(x)
    assert stack == [2, -1]
    model(x, fail=False)
    assert stack == [2, -1] * 2  # not run twice when nothing fails
    pre.remove()
    model.register_forward_pre_hook(setup_then_fail)
    with pytest.raises(RuntimeError, match="failing in ctx setup"):
        model(x, fail=False)
    assert stack == [2, -1] * 3
    thrower = model.register_forward_hook(throw, prepend=True, always_call=True)
    with pytest.raises(RuntimeError, match="failing in ctx setup"):  # the first error is the one raised
        model(x, fail=False)
    assert stack == [2, -1] * 4
    post.remove()
    thrower.remove()
    model.register_forward_hook(shutdown_then_fail, always_call=True)
    with pytest.raises(RuntimeError, match="failing in ctx setup"):
        model(x, fail=False)
    assert stack == [2, -1] * 5  # a failing always_call hook is not run again
