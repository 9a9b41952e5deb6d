"""A table of kernels whose every signature is the contract's: mypy --strict accepts it.

Not imported by the tests: ``test_kernels_contract.py`` runs mypy --strict on this file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from packrt_base.geometry import Conv2dGeometry, IntPair, Padding
from packrt_base.kernels import Dims, Kernels
from packrt_base.plan import PlanKernels


class Owned:
    """A pack that owns its arrays."""

    nbytes = 0

    def forward(self, x: Any) -> Any:
        return x

    def unpack(self) -> Any:
        return None


def unary(x: Any) -> Any:
    return x


def linear(x: Any, w: Any, b: Any | None = None) -> Any:
    return x


def embedding(ids: Any, table: Any) -> Any:
    return table


def conv2d(x: Any, w: Any, b: Any | None, geometry: Conv2dGeometry) -> Any:
    return x


def conv2d_geometry(
    kernel_size: tuple[int, int], stride: IntPair = 1, padding: Padding = 0, dilation: IntPair = 1, groups: int = 1
) -> Conv2dGeometry:
    return Conv2dGeometry(kernel_size, (1, 1), (0, 0, 0, 0), (1, 1), groups)


def layer_norm(x: Any, shape: Dims, w: Any | None = None, b: Any | None = None, eps: float = 1e-5) -> Any:
    return x


def rms_norm(x: Any, shape: Dims, w: Any | None = None, eps: float | None = None) -> Any:
    return x


def gelu(x: Any, approximate: str = "none") -> Any:
    return x


def softmax(x: Any, dim: int = -1) -> Any:
    return x


def attention(
    q: Any, k: Any, v: Any, attn_mask: Any | None = None, is_causal: bool = False, scale: float | None = None
) -> Any:
    return q


def rotary(x: Any, cos: Any, sin: Any) -> Any:
    return x


def pack_linear(w: Any, b: Any | None = None) -> Owned:
    return Owned()


def pack_conv2d(w: Any, b: Any | None, geometry: Conv2dGeometry) -> Owned:
    return Owned()


def pack_embedding(table: Any) -> Owned:
    return Owned()


def pack_quantized(q: Any, scale: Any, b: Any | None = None, scratch_bytes: int = 1 << 20) -> Owned:
    return Owned()


def quantize(w: Any) -> tuple[Any, Any]:
    return w, w


class PlanLinearForm:
    """A plan linear: its size, width, views of its joined weight, and ``forward`` into a buffer."""

    nbytes = 0
    out_features = 1
    parts: tuple[Any, ...] = ()

    def forward(self, x: Any, /, out: Any | None = None) -> Any:
        return x


def plan_linear(packs: Sequence[Any], activation: str | None = None) -> PlanLinearForm:
    return PlanLinearForm()


def fuses(packs: Sequence[Any]) -> bool:
    return False


def residual_norm(x: Any, residual: Any, w: Any | None, b: Any | None, eps: float, out: Any, rms: bool = False) -> Any:
    return out


def self_attention(qkv: Any, batch: int, heads: int, key_mask: Any | None, scale: float | None, out: Any) -> Any:
    return out


def gated(x: Any, activation: str, out: Any) -> Any:
    return out


def decode_attention(
    q: Any, keys: Any, values: Any, first: int, stop: int, key_mask: Any, scale: float, softcap: float | None, out: Any
) -> Any:
    return out


PLAN = PlanKernels(
    linear=plan_linear,
    fuses=fuses,
    residual_norm=residual_norm,
    self_attention=self_attention,
    gated=gated,
    decode_attention=decode_attention,
)


def plan_kernels() -> PlanKernels | None:
    return PLAN


TABLE = Kernels(
    linear=linear,
    embedding=embedding,
    conv2d=conv2d,
    conv2d_geometry=conv2d_geometry,
    layer_norm=layer_norm,
    rms_norm=rms_norm,
    relu=unary,
    gelu=gelu,
    sigmoid=unary,
    silu=unary,
    softmax=softmax,
    scaled_dot_product_attention=attention,
    rotary_embedding=rotary,
    pack_linear=pack_linear,
    borrow_linear=pack_linear,
    pack_conv2d=pack_conv2d,
    borrow_conv2d=pack_conv2d,
    pack_embedding=pack_embedding,
    borrow_embedding=pack_embedding,
    pack_quantized_linear=pack_quantized,
    borrow_quantized_linear=pack_quantized,
    quantize_per_channel=quantize,
    plan_kernels=plan_kernels,
)
