"""packrt.nn.functional.rotary_embedding: transformers' rotate-half formula computed by torch, and each
bad argument a packrt error that names it."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

import packrt_core as prt
from packrt_core.errors import DTypeError, ShapeError
from packrt_core.nn import functional as F  # noqa: N812 - torch's conventional alias


def _tables(length: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    angles = np.arange(length)[:, None] * (10000.0 ** (-np.arange(0, dim, 2) / dim))[None, :]
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@pytest.mark.parametrize("shape", [(1, 8, 1, 64), (2, 4, 7, 32), (3, 5, 16)], ids=["decode", "prefill", "3-D"])
def test_rotary_embedding_is_transformers_rotate_half_rotation(torch: ModuleType, shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    cos, sin = _tables(shape[-2], shape[-1])
    got = F.rotary_embedding(prt.from_numpy(x), prt.from_numpy(cos), prt.from_numpy(sin))
    tx, tc, ts = (torch.from_numpy(a) for a in (x, cos, sin))
    half = shape[-1] // 2
    rotated = torch.cat((-tx[..., half:], tx[..., :half]), dim=-1)  # transformers' rotate_half
    want = (tx * tc + rotated * ts).numpy()
    assert got.shape == shape and got.dtype is prt.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)


def test_rotary_embedding_reads_heads_split_off_a_projection_in_place() -> None:
    rng = np.random.default_rng(9)
    flat = prt.from_numpy(rng.standard_normal((2, 5, 4 * 16)).astype(np.float32))
    heads = flat.reshape(2, 5, 4, 16).transpose(1, 2)  # a strided view, as attention makes it
    cos, sin = (prt.from_numpy(a) for a in _tables(5, 16))
    got = F.rotary_embedding(heads, cos, sin)
    want = F.rotary_embedding(heads.contiguous(), cos, sin)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_rotary_embedding_refuses_an_odd_feature_dim() -> None:
    x = prt.zeros(1, 2, 3, 5)
    odd = r"rotary_embedding: input's last dim .* must be even; got input \(1, 2, 3, 5\)"
    with pytest.raises(ShapeError, match=odd):
        F.rotary_embedding(x, prt.zeros(3, 5), prt.zeros(3, 5))


def test_rotary_embedding_refuses_tables_of_another_width_or_that_grow_the_input() -> None:
    x = prt.zeros(1, 2, 3, 8)
    narrow = r"rotary_embedding: cos's last dim must equal input's \(8\), got cos \(3, 4\)"
    with pytest.raises(ShapeError, match=narrow):
        F.rotary_embedding(x, prt.zeros(3, 4), prt.zeros(3, 8))
    with pytest.raises(ShapeError, match=r"rotary_embedding: input and sin do not broadcast: size 3 vs 4 at dim -2"):
        F.rotary_embedding(x, prt.zeros(3, 8), prt.zeros(4, 8))
    with pytest.raises(ShapeError, match=r"sin \(2, 2, 3, 8\) must broadcast to input's shape \(1, 2, 3, 8\)"):
        F.rotary_embedding(x, prt.zeros(3, 8), prt.zeros(2, 2, 3, 8))


def test_rotary_embedding_refuses_mixed_dtypes_and_integer_input() -> None:
    x = prt.zeros(1, 2, 3, 8)
    with pytest.raises(DTypeError, match=r"rotary_embedding: cos has dtype float64 but input has float32"):
        F.rotary_embedding(x, prt.zeros(3, 8, dtype=prt.float64), prt.zeros(3, 8))
    with pytest.raises(DTypeError, match=r"rotary_embedding: input has dtype int64; expected one of float16"):
        F.rotary_embedding(prt.zeros(1, 8, dtype=prt.int64), prt.zeros(1, 8), prt.zeros(1, 8))
    with pytest.raises(TypeError, match=r"rotary_embedding: sin must be a packrt Tensor, got ndarray"):
        F.rotary_embedding(x, prt.zeros(3, 8), np.zeros((3, 8), np.float32))  # type: ignore[arg-type]
