"""How close packrt's kernels are promised to be to torch.nn.functional, per input dtype.

One table, read by the kernel tests and by anyone comparing packrt with PyTorch: a result
``a`` agrees with torch's ``t`` when ``|a - t| <= atol + rtol * |t|`` elementwise (numpy's
``assert_allclose`` rule). Half precision is computed in float32 and rounded once, so its
budget is a couple of units in the last place of the output dtype; torch may round
intermediate results differently, which is why the half entries are not tighter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# dtype name -> (rtol, atol)
KERNEL_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-5, 1e-5),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}


def tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for results of ``dtype``; KeyError naming the dtypes covered otherwise."""
    name = np.dtype(dtype).name
    try:
        return KERNEL_TOLERANCES[name]
    except KeyError as err:
        raise KeyError(f"no kernel tolerance for dtype {name}; covered: {sorted(KERNEL_TOLERANCES)}") from err
