"""A tiny module tree with the packrt ``Module`` hook interface, built on packrt_hooks.

It mirrors what packrt-core's ``Module`` does with the registries, so the tests exercise the
same calls without depending on packrt-core.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from packrt_hooks import HookRegistry, RemovableHandle, call_with_hooks


class FakeModule:
    def __init__(self, **children: FakeModule) -> None:
        self._children = dict(children)
        self._forward_pre_hooks = HookRegistry()
        self._forward_hooks = HookRegistry()

    def __getattr__(self, name: str) -> FakeModule:
        children = self.__dict__.get("_children", {})
        if name in children:
            return children[name]  # type: ignore[no-any-return]
        raise AttributeError(name)

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, FakeModule]]:
        yield prefix, self
        for name, child in self._children.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    # The flags (prepend, with_kwargs and, for forward hooks, always_call) go to the registry as given.
    def register_forward_pre_hook(self, hook: Callable[..., Any], **flags: bool) -> RemovableHandle:
        return self._forward_pre_hooks.add(hook, **flags)

    def register_forward_hook(self, hook: Callable[..., Any], **flags: bool) -> RemovableHandle:
        return self._forward_hooks.add(hook, **flags)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not (self._forward_pre_hooks or self._forward_hooks):
            return self.forward(*args, **kwargs)
        return call_with_hooks(self, self.forward, args, kwargs, self._forward_pre_hooks, self._forward_hooks)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Echo(FakeModule):
    """Returns exactly what it was called with, so tests can see what the pre-hooks did."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return args, kwargs


class Affine(FakeModule):
    def __init__(self, scale: float = 2.0, shift: float = 0.0) -> None:
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: np.ndarray) -> np.ndarray:
        return x * self.scale + self.shift


class Log(FakeModule):
    """log(x): -inf at 0 and NaN below it, the classic source of non-finite values."""

    def forward(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            result: np.ndarray = np.log(x)
        return result


class Sleep(FakeModule):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def forward(self, x: Any) -> Any:
        time.sleep(self.seconds)
        return x


class Seq(FakeModule):
    """Calls its children in order, each on the previous one's output."""

    def forward(self, x: Any) -> Any:
        for child in self._children.values():
            x = child(x)
        return x


class Split(FakeModule):
    """Returns a tuple and a dict, for hooks that walk structured outputs."""

    def forward(self, x: np.ndarray) -> Any:
        return (x, {"doubled": x * 2, "count": int(x.size)})


class Raises(FakeModule):
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("forward failed on purpose")


class Counter:
    """A hook that remembers every call it got (a callable object, not a function)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> None:
        self.calls.append(args)
