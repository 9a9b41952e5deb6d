"""What a bfloat16 panel product must give, written out step by step in numpy: the reference the bfloat16
tile tests compare with bit for bit.

``vdpbf16ps`` (Intel SDM, AVX512_BF16) adds a pair of bfloat16 products to a float32 lane in two steps:
first the odd element's product, rounded to float32, then the even one's. A product of two bfloat16
values is exact in float32 (8-bit significands), so each step is one float32 addition, rounded to nearest
even. Operands here are normal numbers of moderate size, so the instruction's flushing of subnormals to
zero never shows.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)


def pair_sums(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w.T`` as the bfloat16 tiles compute it: ``x`` (M, K) rounded to bfloat16, ``w`` (N, K)
    bfloat16 (K even), float32 sums over the pairs in order, the odd product of each pair added first."""
    a = np.asarray(x).astype(BF16).astype(np.float32)
    b = np.asarray(w, BF16).astype(np.float32)
    total = np.zeros((a.shape[0], b.shape[0]), np.float32)
    for k in range(0, a.shape[1], 2):
        total = total + np.outer(a[:, k + 1], b[:, k + 1])  # float32 + exact float32 product: one rounding
        total = total + np.outer(a[:, k], b[:, k])
    return total
