"""LayerNorm and RMSNorm: normalization over the trailing dims, with an optional elementwise affine.

Both keep plain parameters named as torch names them (``weight``, and ``bias`` for
LayerNorm), so a torch checkpoint loads with ``load_state_dict``. Weight residency does not
apply: the parameters are small and the forward reads them directly, with no packed copy.
Built under :func:`packrt.meta_init` the parameters are storage-free until a load binds them.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from packrt_core.creation import ones, zeros
from packrt_core.dtypes import as_dtype, float32
from packrt_core.errors import DTypeError, ShapeError
from packrt_core.nn import functional as F  # noqa: N812 - torch's conventional alias
from packrt_core.nn.module import Module
from packrt_core.nn.parameter import Parameter
from packrt_core.tensor import Tensor


def _normalized_shape(layer: str, value: int | Sequence[int]) -> tuple[int, ...]:
    """``value`` as a non-empty tuple of positive ints (an int means one trailing dim)."""
    items: Any = (value,) if isinstance(value, numbers.Integral) else value
    try:
        given = tuple(items)
    except TypeError as err:
        raise TypeError(
            f"{layer}: normalized_shape must be an int or a sequence of ints, got {type(value).__name__}"
        ) from err
    if not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in given):
        raise TypeError(f"{layer}: normalized_shape must hold ints only, got {value!r}")
    shape = tuple(int(s) for s in given)
    if not shape or min(shape) < 1:
        raise ShapeError(
            f"{layer}: normalized_shape must name at least one trailing dimension, each of size >= 1, got {shape}"
        )
    return shape


def _float_dtype(layer: str, dtype: Any) -> Any:
    dt = float32 if dtype is None else as_dtype(dtype)
    if not dt.is_floating_point:
        raise DTypeError(
            f"{layer}: parameters must be floating point, got dtype {dt.name} (use float32 or a half type)"
        )
    return dt


class _Norm(Module):
    """What LayerNorm and RMSNorm share: the trailing shape they normalize, ``eps``, and with
    ``elementwise_affine=True`` a ``weight`` of ones in a floating dtype."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float | None,
        elementwise_affine: bool,
        device: Any,
        dtype: Any,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        self.normalized_shape = _normalized_shape(name, normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        dt = _float_dtype(name, dtype)
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dt, device=device))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        """Weight back to ones, bias (LayerNorm's) to zeros; a no-op on storage-free parameters."""
        if self.weight is not None:
            self.weight.fill_(1.0)
        if self._parameters.get("bias") is not None:
            self.bias.zero_()

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class LayerNorm(_Norm):
    """Normalize the trailing ``normalized_shape`` dims to mean 0 and (biased) variance 1, then,
    with ``elementwise_affine=True``, multiply by ``weight`` (ones) and add ``bias`` (zeros;
    absent when ``bias=False``). Input, weight and bias must share a dtype and a device."""

    eps: float

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        *,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, device, dtype)
        if elementwise_affine and bias:  # in the weight's dtype and on its device
            weight: Tensor = self.weight
            self.bias = Parameter(zeros(self.normalized_shape, dtype=weight.dtype, device=weight.device))
        else:
            self.register_parameter("bias", None)

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, bias={self.bias is not None}"


class RMSNorm(_Norm):
    """``x / sqrt(mean(x**2) + eps)`` over the trailing ``normalized_shape`` dims, then, with
    ``elementwise_affine=True``, times ``weight`` (ones). ``eps=None`` means the machine epsilon
    of the dtype the arithmetic runs in (float32's for half-precision input), as in torch."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
        *,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, device, dtype)

    def forward(self, input: Tensor) -> Tensor:
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)


__all__ = ["LayerNorm", "RMSNorm"]
