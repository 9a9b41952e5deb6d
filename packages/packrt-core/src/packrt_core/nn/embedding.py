"""Embedding: a lookup table of rows picked by integer ids, served from a contiguous owned table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packrt_base.kernels import Kernels, Pack
from packrt_core.creation import empty
from packrt_core.errors import DeviceError, DTypeError, IndexingError
from packrt_core.nn import checks
from packrt_core.nn.packed import PackedLayer
from packrt_core.nn.parameter import Parameter
from packrt_core.tensor import Tensor

Array = Any


class Embedding(PackedLayer):
    """Rows of ``weight`` (num_embeddings, embedding_dim) for integer ids of any shape:
    the output is ``ids.shape + (embedding_dim,)`` in the table's dtype.

    ``weight`` starts standard normal, as PyTorch initializes it, with row ``padding_idx``
    (when given; a negative index counts from the end) zeroed. packrt does no training, so
    ``padding_idx`` only sets that initial zero row. Every id must lie in
    [0, num_embeddings): one outside raises IndexingError naming it and the table size.

    The pack is the table, contiguous and owned, in its declared dtype (a gather does no
    arithmetic, so an upcast would only double the bytes); ``weight_residency`` picks how it
    stays resident (default ``"packed"``: one owned contiguous copy, the raw one dropped;
    ``"borrowed"`` gathers straight from the bound table, e.g. a memory-mapped checkpoint).
    """

    declared = ("weight",)

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        *,
        dtype: Any = None,
        device: Any = None,
        weight_residency: str | None = None,
    ) -> None:
        super().__init__(weight_residency)
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise IndexingError(
                    f"Embedding: padding_idx={padding_idx} is out of range for a table of {num_embeddings} rows "
                    f"(use an index in [{-num_embeddings}, {num_embeddings - 1}] or None)"
                )
            padding_idx = padding_idx % num_embeddings
        self.padding_idx = padding_idx
        self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype, device=device).normal_())
        if padding_idx is not None and self.weight.has_storage:
            self.weight[padding_idx].fill_(0)

    def _pack(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        pack: Pack = kernels.pack_embedding(arrays["weight"])
        return pack

    def _borrow(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        view: Pack = kernels.borrow_embedding(arrays["weight"])
        return view

    def _pack_nbytes(self) -> int:
        weight: Tensor = self._parameters["weight"]  # type: ignore[assignment]
        return weight.nbytes

    def _check_ids(self, ids: Tensor) -> None:
        name = type(self).__name__
        checks.require_tensor(name, ids, "a packrt Tensor of integer ids")
        if ids.dtype.is_floating_point or ids.dtype.name == "bool":
            raise DTypeError(
                f"{name} takes integer ids (int64, int32, ...), got {ids.dtype.name}: cast them with ids.to('int64')"
            )
        weight: Tensor = self._parameters["weight"]  # type: ignore[assignment]
        if ids.device != weight.device:
            raise DeviceError(f"{name}: ids on {ids.device}, table on {weight.device}: move one to the other")

    def forward(self, ids: Tensor) -> Tensor:
        self._check_ids(ids)
        checks.embedding_ids(type(self).__name__, ids, self._parameters["weight"])  # type: ignore[arg-type]
        return self._serve(ids)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s


__all__ = ["Embedding"]
