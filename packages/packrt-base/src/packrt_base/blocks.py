"""Block-quantized weight formats: llama.cpp's GGML block types, as a weight row of blocks holds them.

A block-quantized (out, in) weight is stored row by row, each row ``in / values`` blocks of ``nbytes``
bytes (the scales and the packed quants of ``values`` weights). packrt keeps such a weight as the uint8
array (out, row bytes) the file holds: :data:`BLOCK_FORMATS` says, per format name (the GGML type name),
how many weights a block holds and how many bytes it takes, which is all a layer needs to declare the
array and check a row's width; what the bytes mean is the kernels' business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class BlockFormat:
    """One block type: ``values`` weights per block in ``nbytes`` bytes."""

    name: str
    values: int
    nbytes: int

    def row_bytes(self, in_features: int) -> int:
        """Bytes of one weight row of ``in_features`` weights; ValueError unless it is a whole number of blocks."""
        if in_features <= 0 or in_features % self.values:
            raise ValueError(
                f"{self.name} stores weights in blocks of {self.values}, so a row of {in_features} weights "
                f"does not fit: in_features must be a positive multiple of {self.values}"
            )
        return in_features // self.values * self.nbytes


# The 32-weight types, then the K-quants (super-blocks of 256): the block types of llama.cpp's common mixes.
BLOCK_FORMATS: Final[dict[str, BlockFormat]] = {
    f.name: f
    for f in (
        BlockFormat("Q8_0", 32, 34),
        BlockFormat("Q4_0", 32, 18),
        BlockFormat("Q4_1", 32, 20),
        BlockFormat("Q5_0", 32, 22),
        BlockFormat("Q5_1", 32, 24),
        BlockFormat("Q4_K", 256, 144),
        BlockFormat("Q5_K", 256, 176),
        BlockFormat("Q6_K", 256, 210),
    )
}


def block_format(name: str) -> BlockFormat:
    """The format called ``name``; ValueError listing the known ones otherwise."""
    found = BLOCK_FORMATS.get(name)
    if found is None:
        raise ValueError(f"block format {name!r} is not one packrt serves as blocks; known: {', '.join(BLOCK_FORMATS)}")
    return found


__all__ = ["BLOCK_FORMATS", "BlockFormat", "block_format"]
