"""BlockQuantizedLinear: a linear layer whose weight stays in quantized blocks (llama.cpp's GGML block types).

A GGUF file stores most of a model's weights as blocks: groups of 32 or 256 weights sharing fp16 scales
(Q4_0, Q4_1, Q8_0, the K-quants...). This layer keeps them so: its ``weight`` is the uint8 array
(out_features, row bytes) the file holds, and its kernels multiply from the blocks, so the weight takes a
quarter to a ninth of its float32 bytes and no float copy of it is ever resident.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from packrt_base.blocks import BLOCK_FORMATS, BlockFormat
from packrt_base.kernels import Kernels, Pack
from packrt_core.creation import zeros
from packrt_core.dtypes import float32, uint8
from packrt_core.errors import DeviceError, DTypeError, StateDictError
from packrt_core.nn import checks
from packrt_core.nn.linear import AffineLayer, declare
from packrt_core.nn.packed import PackedLayer
from packrt_core.tensor import Tensor

Array = Any


def _format(name: str) -> BlockFormat:
    found = BLOCK_FORMATS.get(name)
    if found is None:
        raise ValueError(
            f"BlockQuantizedLinear: block_format {name!r} is not one packrt serves as blocks; pick one of "
            f"{', '.join(BLOCK_FORMATS)}"
        )
    return found


def _kernel(layer: PackedLayer, kernels: Kernels, which: str) -> Any:
    """The device's kernel ``which`` for a layer over blocks; DeviceError naming the device where it has none."""
    kernel = getattr(kernels, which)
    if kernel is None:
        raise DeviceError(
            f"{type(layer).__name__}: the kernels of {layer._device()} serve no quantized blocks; keep this layer "
            "on the CPU, or load the model with a dtype (its weights then dequantized to floats)"
        )
    return kernel


def _refuse_cast(layer: Any, path: str, dtype: Any) -> None:
    if dtype is not None:
        raise DTypeError(
            f"{path or '<root>'} ({type(layer).__name__}): {layer.block_format} blocks cannot change dtype, so the "
            f"tree cannot be cast to {dtype.name}; nothing was changed. Load the model with dtype= to have its "
            "weights dequantized to that dtype instead"
        )


def _require_blocks(layer: Any, path: str, incoming: Mapping[str, Tensor]) -> None:
    """StateDictError unless an incoming weight is uint8 (copy mode would truncate floats to bytes)."""
    weight = incoming.get("weight")
    if weight is not None and weight.dtype is not uint8:
        raise StateDictError(
            f"{path + '.' if path else ''}weight: {type(layer).__name__} ({layer.block_format}) expects its uint8 "
            f"blocks, the checkpoint has {weight.dtype.name}; a float weight belongs in a "
            f"{'Linear' if isinstance(layer, AffineLayer) else 'Embedding'}"
        )


class BlockQuantizedLinear(AffineLayer):
    """``y = x @ W.T + bias`` with ``W`` (out_features, in_features) kept as blocks of ``block_format``
    (a name of :data:`packrt_base.blocks.BLOCK_FORMATS`: ``"Q4_0"``, ``"Q4_1"``, ``"Q5_0"``, ``"Q5_1"``,
    ``"Q8_0"``, ``"Q4_K"``, ``"Q5_K"``, ``"Q6_K"``).

    ``weight`` is uint8 (out_features, row bytes), each row ``in_features / block values`` blocks laid out as
    llama.cpp writes them; ``bias`` is float32 (out_features,) or None. Each output is the input row's dot
    product with the dequantized weight row (the weights llama.cpp's own dequantization gives), summed in
    float32; the output has the input's dtype. A device may quantize a few rows of activations per block of 32
    to int8 as llama.cpp does (the CPU does for up to 4 float32 rows of every format but Q5_K): an output then
    differs from that dot product by at most half a step (the block's max |x| / 127) times the block's absolute
    weights, summed over the blocks. ``in_features`` must be a multiple of the format's block (32,
    or 256 for the K-quants): ValueError otherwise, as for an unknown format.

    A fresh layer holds zero blocks and a zero bias (a GGUF load binds the file's); under
    :func:`packrt.meta_init` both are storage-free. The blocks cannot change dtype: ``to(dtype)`` and the
    casts raise DTypeError on a tree holding this layer and leave it as it was. Default residency
    ``"packed"``: the pack is an owned copy of the blocks; ``borrowed`` serves from the bound array itself, so
    a memory-mapped file stays the only copy.
    """

    declared = ("weight", "bias")

    def __init__(
        self,
        in_features: int,
        out_features: int,
        block_format: str,
        bias: bool = True,
        *,
        device: Any = None,
        weight_residency: str | None = None,
    ) -> None:
        self.block_format = _format(block_format).name
        try:
            self.row_bytes = BLOCK_FORMATS[self.block_format].row_bytes(int(in_features))
        except ValueError as err:
            raise ValueError(f"BlockQuantizedLinear: {err}") from err
        super().__init__(in_features, out_features, bias, device=device, weight_residency=weight_residency)

    def _declare(self, bias: bool, dtype: Any, device: Any) -> None:
        weight = zeros(self.out_features, self.row_bytes, dtype=uint8, device=device)
        declare(self, weight=weight, bias=zeros(self.out_features, dtype=float32, device=device) if bias else None)

    def _pack(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        pack: Pack = _kernel(self, kernels, "pack_block_linear")(
            arrays["weight"], self.block_format, self.in_features, arrays["bias"]
        )
        return pack

    def _borrow(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        view: Pack = _kernel(self, kernels, "borrow_block_linear")(
            arrays["weight"], self.block_format, self.in_features, arrays["bias"]
        )
        return view

    def _pack_nbytes(self) -> int:
        return sum(p.nbytes for _, p in self._declared_params())

    # -- Module hooks --------------------------------------------------------------------------
    def _check_placement(self, path: str, device: Any, dtype: Any) -> None:
        _refuse_cast(self, path, dtype)

    def _prepare_load(
        self, path: str, incoming: Mapping[str, Tensor], assign: bool, pack: bool, residency: str | None
    ) -> Callable[[], None] | None:
        _require_blocks(self, path, incoming)
        prefix = f"{path}." if path else ""
        bias = incoming.get("bias")
        if bias is not None and assign and bias.dtype is not float32:
            raise StateDictError(
                f"{prefix}bias: BlockQuantizedLinear expects float32, the checkpoint has {bias.dtype.name}"
            )
        return super()._prepare_load(path, incoming, assign, pack, residency)

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        checks.linear_input(name, x, self.in_features, self._parameters["weight"], dtype=False)  # type: ignore[arg-type]
        if not x.dtype.is_floating_point:
            raise DTypeError(f"{name} takes floating-point input, got {x.dtype.name}: cast it with x.float()")
        return self._serve(x)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, block_format={self.block_format!r}"


class BlockQuantizedEmbedding(PackedLayer):
    """Rows of a table (num_embeddings, embedding_dim) kept as blocks of ``block_format`` (as
    :class:`BlockQuantizedLinear` keeps a weight), for integer ids of any shape: the output is
    ``ids.shape + (embedding_dim,)`` float32, each row the weights llama.cpp's dequantization gives. Every id must
    lie in [0, num_embeddings): one outside raises IndexingError naming it and the table size.

    ``weight`` is uint8 (num_embeddings, row bytes); a fresh table holds zero blocks. A lookup dequantizes only the
    rows it picks, so a large vocabulary (Gemma's 262,144 rows) stays a quarter to a ninth of its float32 bytes.
    The blocks cannot change dtype (casts of a tree holding this layer are refused and change nothing). Default
    residency ``"packed"``: an owned copy of the blocks; ``borrowed`` reads the bound array itself.
    """

    declared = ("weight",)

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        block_format: str,
        *,
        device: Any = None,
        weight_residency: str | None = None,
    ) -> None:
        super().__init__(weight_residency)
        self.block_format = _format(block_format).name
        try:
            row_bytes = BLOCK_FORMATS[self.block_format].row_bytes(int(embedding_dim))
        except ValueError as err:
            raise ValueError(f"BlockQuantizedEmbedding: {err}") from err
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        declare(self, weight=zeros(self.num_embeddings, row_bytes, dtype=uint8, device=device))

    def _pack(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        pack: Pack = _kernel(self, kernels, "pack_block_embedding")(
            arrays["weight"], self.block_format, self.embedding_dim
        )
        return pack

    def _borrow(self, kernels: Kernels, arrays: Mapping[str, Array | None]) -> Pack:
        view: Pack = _kernel(self, kernels, "borrow_block_embedding")(
            arrays["weight"], self.block_format, self.embedding_dim
        )
        return view

    def _pack_nbytes(self) -> int:
        weight: Tensor = self._parameters["weight"]  # type: ignore[assignment]
        return weight.nbytes

    def _check_placement(self, path: str, device: Any, dtype: Any) -> None:
        _refuse_cast(self, path, dtype)

    def _prepare_load(
        self, path: str, incoming: Mapping[str, Tensor], assign: bool, pack: bool, residency: str | None
    ) -> Callable[[], None] | None:
        _require_blocks(self, path, incoming)
        return super()._prepare_load(path, incoming, assign, pack, residency)

    def forward(self, ids: Tensor) -> Tensor:
        name = type(self).__name__
        checks.require_tensor(name, ids, "a packrt Tensor of integer ids")
        if ids.dtype.is_floating_point or ids.dtype.name == "bool":
            raise DTypeError(f"{name} takes integer ids (int64, int32, ...), got {ids.dtype.name}")
        weight: Tensor = self._parameters["weight"]  # type: ignore[assignment]
        if ids.device != weight.device:
            raise DeviceError(f"{name}: ids on {ids.device}, blocks on {weight.device}: move one to the other")
        checks.embedding_ids(name, ids, weight)
        return self._serve(ids)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, block_format={self.block_format!r}"


__all__ = ["BlockQuantizedEmbedding", "BlockQuantizedLinear"]
