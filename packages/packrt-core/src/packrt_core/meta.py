"""Meta init: declare a model's tensors without allocating their storage."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_declaring: ContextVar[bool] = ContextVar("packrt_meta_init", default=False)


@contextmanager
def meta_init() -> Iterator[None]:
    """Inside the block, factory functions (``zeros``, ``empty``, ``randn``, ...) and the layers
    built from them declare storage-free tensors: shape, dtype and target device are kept,
    ``has_storage`` is False and ``storage_nbytes`` is 0. Initializers such as ``normal_``
    are no-ops on them; reading their values raises. Bind values later with
    ``load_state_dict(..., assign=True)`` or give them storage with ``to_empty``.

    Tensors made from data you pass (``packrt.tensor``, ``from_numpy``) keep their storage.
    """
    token = _declaring.set(True)
    try:
        yield
    finally:
        _declaring.reset(token)


def declaring() -> bool:
    """True inside a :func:`meta_init` block (of this thread or task)."""
    return _declaring.get()
