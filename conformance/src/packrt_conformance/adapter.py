"""The adapter protocol: the only road from the suite to an implementation.

The suite never imports an implementation. An implementer writes one small class satisfying
:class:`Adapter` that maps the contract's abstract needs (build a module tree, make a tensor,
read it back as numpy, compare storage, enter a meta-init region, ...) onto their library.
Capabilities are promises: declare one only when the implementation really has the feature;
a clause that needs a capability the adapter does not declare is skipped, never passed.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import numpy.typing as npt

__all__ = ["ADAPTER_PROTOCOL_VERSION", "DTYPE_NAMES", "Adapter", "AdapterError"]

#: The protocol version this suite speaks; an adapter declaring another one is refused.
#: Version 2 added :meth:`Adapter.raw_bytes` (a packed layer must really drop its raw weights).
ADAPTER_PROTOCOL_VERSION = 2

#: The canonical dtype names the suite passes to :meth:`Adapter.dtype` / :meth:`Adapter.tensor` and
#: expects back from :meth:`Adapter.dtype_name` ("bfloat16" only under the capability of that name).
DTYPE_NAMES: tuple[str, ...] = ("float16", "bfloat16", "float32", "float64", "int32", "int64")


class AdapterError(RuntimeError):
    """An adapter could not be found, loaded, or does not satisfy the protocol."""


@runtime_checkable
class Adapter(Protocol):
    """What the suite needs from an implementation.

    Attributes:
        protocol_version: must equal :data:`ADAPTER_PROTOCOL_VERSION`.
        name / version: the implementation's name and version, written into the report.
        revision: the contract revision the implementation targets by default (1 or 2).
        revisions: every revision the implementation can be held to (see :meth:`set_revision`).
        device: the device the suite's tensors live on ("cpu").
        capabilities: the optional features the implementation has (see
            :data:`packrt_conformance.clauses.CAPABILITIES`).
        nn: a namespace holding ``Module``, ``Parameter``, ``Buffer``, ``Linear``, ``Sequential``.

    One member is asked for only under its capability, so it is not part of the protocol check:
    ``short_free_memory()`` (capability ``free-memory-control``) returns a context manager inside
    which ``weight_residency="auto"`` finds too little free memory for any pack (memory pressure the
    suite cannot create for real).
    """

    protocol_version: int
    name: str
    version: str
    revision: int
    revisions: frozenset[int]
    device: str
    capabilities: frozenset[str]
    nn: Any

    def set_revision(self, revision: int) -> None:
        """Hold the implementation to ``revision`` from now on (a runtime switch, not a keyword)."""

    def tensor(self, data: Any, dtype: str = "float32") -> Any:
        """A tensor holding ``data`` (nested lists or a numpy array) with dtype named ``dtype``."""

    def parameter(self, data: Any, dtype: str = "float32") -> Any:
        """A Parameter holding ``data``."""

    def buffer(self, data: Any, dtype: str = "float32", *, persistent: bool = True) -> Any:
        """A Buffer object holding ``data`` with its own persistent flag."""

    def to_numpy(self, tensor: Any) -> npt.NDArray[Any]:
        """The values of ``tensor`` as a numpy array (a copy; float16/bfloat16 widen to float32)."""

    def dtype(self, name: str) -> Any:
        """The implementation's dtype object for a canonical name ('float16', 'float32', 'int64', ...)."""

    def dtype_name(self, tensor: Any) -> str:
        """The canonical dtype name of ``tensor``."""

    def datatype(self, name: str) -> Any:
        """The DataType enumeration value for a canonical dtype name (capability 'datatype-enum')."""

    def device_of(self, tensor: Any) -> str:
        """The device ``tensor`` lives on, as a string ('cpu', 'cuda:0', 'meta')."""

    def shares_storage(self, a: Any, b: Any) -> bool:
        """Whether two tensors are views of the same storage (a write to one is seen by the other)."""

    def has_storage(self, tensor: Any) -> bool:
        """Whether ``tensor`` owns real storage (False for a storage-free meta-init tensor)."""

    def write_(self, tensor: Any, data: Any) -> None:
        """Overwrite the values of ``tensor`` in place with ``data``."""

    def meta_init(self) -> AbstractContextManager[Any]:
        """A context in which new modules declare storage-free tensors."""

    def linear(self, in_features: int, out_features: int, bias: bool = True) -> Any:
        """A weighted linear layer (y = x W^T + b)."""

    def quantized_linear(self, in_features: int, out_features: int) -> Any:
        """A quantized linear layer (capability 'quantized-layers')."""

    def is_packed(self, module: Any) -> bool:
        """Whether a layer currently holds a packed serving form of its weight."""

    def resident_bytes(self, module: Any) -> int:
        """Bytes of storage the tree holds (each storage counted once; storage-free tensors count 0)."""

    def raw_bytes(self, module: Any) -> int:
        """Bytes of raw tensor storage the tree's parameters and buffers hold now, each storage once:
        a weight whose values live only in a layer's pack counts 0, a borrowed one counts its
        bound storage (protocol version 2)."""


def check_adapter(adapter: object) -> Adapter:
    """Return ``adapter`` typed as :class:`Adapter`, or raise :class:`AdapterError` saying what is wrong."""
    if not isinstance(adapter, Adapter):
        missing = [n for n in _MEMBERS if not hasattr(adapter, n)]
        raise AdapterError(
            f"{type(adapter).__name__} is not a conformance adapter: it lacks {missing}; "
            "implement every member of packrt_conformance.adapter.Adapter"
        )
    if adapter.protocol_version != ADAPTER_PROTOCOL_VERSION:
        raise AdapterError(
            f"adapter {adapter.name!r} speaks protocol version {adapter.protocol_version}, this suite "
            f"speaks {ADAPTER_PROTOCOL_VERSION}; update the adapter or install a matching suite"
            + (" (version 2 adds raw_bytes(module))" if adapter.protocol_version == 1 else "")
        )
    if adapter.revision not in adapter.revisions:
        raise AdapterError(
            f"adapter {adapter.name!r}: default revision {adapter.revision} is not among its "
            f"revisions {sorted(adapter.revisions)}"
        )
    return adapter


_MEMBERS = [
    "protocol_version",
    "name",
    "version",
    "revision",
    "revisions",
    "device",
    "capabilities",
    "nn",
    "set_revision",
    "tensor",
    "parameter",
    "buffer",
    "to_numpy",
    "dtype",
    "dtype_name",
    "datatype",
    "device_of",
    "shares_storage",
    "has_storage",
    "write_",
    "meta_init",
    "linear",
    "quantized_linear",
    "is_packed",
    "resident_bytes",
    "raw_bytes",
]
