"""The good tables with kernels of the wrong signature put in (four in ``Kernels``, one in ``PlanKernels``):
mypy --strict must reject each.

Not imported by the tests: ``test_kernels_contract.py`` runs mypy --strict on this file, beside
``good_table.py``, whose table every other field comes from.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from good_table import PLAN, TABLE

from packrt_base.kernels import Dims


class Unowned:
    """A serving form without ``unpack``: not what a ``pack_*`` kernel must return."""

    nbytes = 0

    def forward(self, x: Any) -> Any:
        return x


def linear_without_bias(x: Any, w: Any) -> Any:
    return x


def layer_norm_renamed(
    x: Any, normalized_shape: Dims, w: Any | None = None, b: Any | None = None, eps: float = 1e-5
) -> Any:
    return x


def softmax_with_str_dim(x: Any, dim: str = "last") -> Any:
    return x


def pack_linear_unowned(w: Any, b: Any | None = None) -> Unowned:
    return Unowned()


WRONG = dataclasses.replace(
    TABLE,
    linear=linear_without_bias,
    layer_norm=layer_norm_renamed,
    softmax=softmax_with_str_dim,
    pack_linear=pack_linear_unowned,
)


def residual_norm_without_out(x: Any, residual: Any, w: Any | None, b: Any | None, eps: float) -> Any:
    return x


WRONG_PLAN = dataclasses.replace(PLAN, residual_norm=residual_norm_without_out)
