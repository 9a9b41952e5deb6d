"""``trace_shapes``: the shapes and dtypes going into and out of every module call."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from packrt_hooks._tree import ModuleTree, display_name, dtype_name, install_everywhere, is_array_like
from packrt_hooks.call import unwinding_exception
from packrt_hooks.handle import RemovableHandle

TRACE_LOGGER_NAME = "packrt.hooks.trace"
logger = logging.getLogger(TRACE_LOGGER_NAME)


class TensorSpec(NamedTuple):
    """The shape and dtype name of one tensor or array; prints as ``float32[2, 8]``."""

    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


def describe(value: object) -> Any:
    """``value`` with each tensor replaced by its :class:`TensorSpec`.

    Tuples, lists and dicts keep their structure; None stays None; any other leaf becomes
    its type name (``"int"``), so a record never keeps the data alive.
    """
    if is_array_like(value):
        tensor: Any = value
        return TensorSpec(tuple(int(d) for d in tensor.shape), dtype_name(tensor.dtype))
    if isinstance(value, tuple):
        return tuple(describe(item) for item in value)
    if isinstance(value, list):
        return [describe(item) for item in value]
    if isinstance(value, dict):
        return {key: describe(item) for key, item in value.items()}
    if value is None:
        return None
    return type(value).__name__


def format_spec(spec: Any) -> str:
    """A described value as text: ``(float32[2, 4], int)``, ``{'mask': bool[2, 4]}``."""
    if isinstance(spec, TensorSpec):
        return str(spec)
    if isinstance(spec, tuple):
        inner = ", ".join(format_spec(item) for item in spec)
        return f"({inner},)" if len(spec) == 1 else f"({inner})"
    if isinstance(spec, list):
        return "[" + ", ".join(format_spec(item) for item in spec) + "]"
    if isinstance(spec, dict):
        return "{" + ", ".join(f"{key!r}: {format_spec(item)}" for key, item in spec.items()) + "}"
    return "None" if spec is None else str(spec)


@dataclass
class ShapeRecord:
    """One module call: where it sat (``depth`` 0 is an outermost call) and what it saw.

    ``args`` / ``kwargs`` are what ``forward`` received (after the pre-hooks), ``output``
    what the hooks returned; all three are :func:`describe`'d. ``done`` turns True when the
    call returned or raised; ``error`` names the exception of a call that raised
    (``"ValueError: ..."``) and is None otherwise.
    """

    module: str
    module_type: str
    depth: int
    args: Any = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    output: Any = None
    done: bool = False
    error: str | None = None

    def __str__(self) -> str:
        inputs = format_spec(self.args)
        if self.kwargs:
            inputs = f"{inputs} {format_spec(self.kwargs)}"
        if not self.done:
            output = "(running)"
        elif self.error is not None:
            output = f"raised {self.error}"
        else:
            output = format_spec(self.output)
        indent = "  " * self.depth
        return f"{indent}{display_name(self.module, quote=False)} ({self.module_type}): {inputs} -> {output}"


class ShapeTrace(RemovableHandle):
    """The handle :func:`trace_shapes` returns; ``records`` lists every call in start order.

    ``str(trace)`` prints the records as an indented call tree.
    """

    def __init__(self, level: int) -> None:
        super().__init__()
        self.records: list[ShapeRecord] = []
        self._level = level
        self._lock = threading.Lock()
        self._local = threading.local()

    def clear(self) -> None:
        """Forget the records so far (tracing goes on)."""
        with self._lock:
            self.records.clear()

    def __str__(self) -> str:
        return "\n".join(str(record) for record in self.records)

    def _stack(self) -> list[ShapeRecord]:
        stack: list[ShapeRecord] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _install(self, name: str, module: Any) -> None:
        module_type = type(module).__name__

        def before(_module: Any, _args: Any) -> None:
            # Only reserve the record here: later pre-hooks may still change the arguments,
            # and the forward hook receives the ones forward actually got.
            stack = self._stack()
            record = ShapeRecord(name, module_type, len(stack))
            stack.append(record)
            with self._lock:
                self.records.append(record)

        def after(_module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
            stack = self._stack()
            if not stack or stack[-1].module != name:
                return  # a pre-hook ahead of ours raised, so this call was never reserved
            record = stack.pop()
            record.args, record.kwargs, record.output = describe(args), describe(kwargs), describe(output)
            record.done = True
            error = unwinding_exception()
            if error is not None:
                record.error = f"{type(error).__name__}: {error}"
            logger.log(self._level, "%s", record)

        self._adopt(module.register_forward_pre_hook(before, prepend=True))
        self._adopt(module.register_forward_hook(after, with_kwargs=True, always_call=True))


def trace_shapes(module: ModuleTree, *, level: int = logging.INFO) -> ShapeTrace:
    """Record the input and output shapes and dtypes of every module call in the tree.

    Each finished call is logged at ``level`` to the logger ``"packrt.hooks.trace"`` (inner
    calls finish, and so log, before their callers) and kept on the returned handle's
    ``records``, which list the calls in the order they started. Returns one handle for all
    the hooks.
    """
    result = ShapeTrace(level)
    install_everywhere(result, module)
    return result


__all__ = [
    "TRACE_LOGGER_NAME",
    "ShapeRecord",
    "ShapeTrace",
    "TensorSpec",
    "describe",
    "format_spec",
    "trace_shapes",
]
