"""MXFP4 checkpoints (gpt-oss's published weights): the experts' blocks and scales dequantized to floats at load.

A Hugging Face directory whose config.json says ``quantization_config.quant_method: "mxfp4"`` stores some
weights (gpt-oss: each layer's ``experts.gate_up_proj`` and ``experts.down_proj``) as two tensors, as
transformers' ``integrations/mxfp4.py`` reads them:

- ``<name>_blocks``, uint8 (..., out, groups, 16): each byte two E2M1 values (its low nibble first), 32
  values a group, so a row of ``in`` inputs is ``in / 32`` groups;
- ``<name>_scales``, uint8 (..., out, groups): one E8M0 exponent per group, the group's values times
  ``2 ** (scale - 127)``.

Each E2M1 nibble is one of 0, 0.5, 1, 1.5, 2, 3, 4, 6 (bit 3 the sign). The float tensor is (..., out, in),
then transposed to (..., in, out), the layout the unquantized checkpoint stores (transformers' own
conversion). :class:`MXFP4Pairs` presents each pair to the load as the one float tensor it stands for, in
the dtype of the checkpoint's other weights (``dtype=`` when given), so the key map, the shape checks and the
binding are the ones every directory takes. Every E2M1 value times a power of two of this range is exact in
bfloat16 and float32: the dequantized weights are the quantized ones, no rounding added. They are copies in
memory (about 4x the blocks' bytes in bfloat16): an MXFP4 model is not served from the mapped file.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import packrt
import packrt_io
from packrt.errors import CheckpointError
from packrt.models.hfconfig import HFConfig

# the 16 E2M1 values by nibble: bit 3 the sign, then 0, 0.5, 1, 1.5, 2, 3, 4, 6
E2M1 = np.asarray([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)
E8M0_BIAS = 127
GROUP = 32  # values a scale covers: 16 bytes of two nibbles
_FLOATS = {"F32": packrt.float32, "BF16": packrt.bfloat16, "F16": packrt.float16, "F64": packrt.float64}


def dequantize(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float32 (..., in, out) of MXFP4 ``blocks`` (..., out, groups, 16) uint8 and ``scales`` (..., out, groups)
    uint8: each nibble's E2M1 value (low nibble first) times ``2 ** (scale - 127)``, the rows of ``in = groups *
    32`` values transposed after, as transformers' ``convert_moe_packed_tensors`` lays them out."""
    values = np.empty((*blocks.shape[:-1], GROUP), np.float32)
    values[..., 0::2] = E2M1[blocks & 0x0F]
    values[..., 1::2] = E2M1[blocks >> 4]
    exponents = scales.astype(np.int32) - E8M0_BIAS
    values = np.ldexp(values, exponents[..., None])  # exact: a power of two
    out = values.reshape(*blocks.shape[:-2], blocks.shape[-2] * GROUP)
    return np.ascontiguousarray(np.swapaxes(out, -1, -2))


def is_mxfp4(config: HFConfig) -> bool:
    """Whether config.json's ``quantization_config`` names MXFP4."""
    quantization = config.get("quantization_config")
    return isinstance(quantization, dict) and quantization.get("quant_method") == "mxfp4"


def _pairs(info: packrt_io.CheckpointInfo) -> dict[str, tuple[packrt_io.TensorInfo, packrt_io.TensorInfo]]:
    """name -> (its blocks, its scales), for each ``<name>_blocks`` the headers list; checked against the layout of
    the module docstring (a CheckpointError names the tensor otherwise)."""
    pairs = {}
    for key, blocks in info.tensors.items():
        if not key.endswith("_blocks"):
            continue
        name = key.removesuffix("_blocks")
        scales = info.tensors.get(f"{name}_scales")
        fits = (
            scales is not None
            and blocks.dtype == scales.dtype == "U8"
            and len(blocks.shape) >= 3
            and blocks.shape[-1] == GROUP // 2
            and blocks.shape[:-1] == scales.shape
        )
        if not fits or scales is None:
            found = (
                "no scales"
                if scales is None
                else f"{blocks.dtype} {blocks.shape}, scales {scales.dtype} {scales.shape}"
            )
            raise CheckpointError(
                f"checkpoint {str(info.path)!r}: MXFP4 tensor {key!r} in {blocks.file!r} has {found}; expected U8 "
                f"blocks (..., out, groups, 16) beside U8 {name + '_scales'!r} (..., out, groups), as transformers "
                "saves gpt-oss: use the checkpoint as published, or a copy dequantized with transformers"
            )
        pairs[name] = (blocks, scales)
    return pairs


def _float_dtype(info: packrt_io.CheckpointInfo, quantized: set[str]) -> str:
    """The safetensors dtype of the checkpoint's other floating tensors (the most common): what the dequantized
    ones are given, so the model's weights keep one dtype."""
    counts = Counter(t.dtype for k, t in info.tensors.items() if k not in quantized and t.dtype in _FLOATS)
    return counts.most_common(1)[0][0] if counts else "BF16"


@dataclass(frozen=True)
class MXFP4Pairs:
    """The MXFP4 pairs of a checkpoint: ``info``, its headers with each pair replaced by the float tensor it
    stands for (what the load plans against), and ``names``: float name -> (blocks key, scales key)."""

    info: packrt_io.CheckpointInfo
    names: dict[str, tuple[str, str]]

    @classmethod
    def of(cls, raw: packrt_io.CheckpointInfo) -> MXFP4Pairs:
        """The pairs ``raw``'s headers list, each presented as a float tensor in the dtype of the checkpoint's other
        floating weights."""
        found = _pairs(raw)
        quantized = {key for blocks, scales in found.values() for key in (blocks.name, scales.name)}
        dtype = _float_dtype(raw, quantized)
        size = np.dtype(_FLOATS[dtype].numpy).itemsize
        tensors = {key: tensor for key, tensor in raw.tensors.items() if key not in quantized}
        for name, (blocks, _) in found.items():
            *lead, out, groups, _ = blocks.shape
            shape = (*lead, groups * GROUP, out)
            tensors[name] = packrt_io.TensorInfo(name, dtype, shape, int(np.prod(shape)) * size, blocks.file)
        names = {name: (blocks.name, scales.name) for name, (blocks, scales) in found.items()}
        return cls(replace(raw, tensors=tensors), names)

    def load(
        self, shards: tuple[Path, ...], wanted: dict[str, str], cast: packrt.dtype | None
    ) -> dict[str, packrt.Tensor]:
        """model key -> the dequantized tensor, for ``wanted`` (float name -> model key), in ``cast`` or the dtype
        :meth:`of` gave it. The blocks and scales are read mapped (a pair may span two shards); the floats are
        copies."""
        parts = {key for name in wanted for key in self.names[name]}
        arrays: dict[str, np.ndarray] = {}
        for shard in shards:
            mapped, _ = packrt_io.load_arrays(shard, mmap=True)
            arrays.update((key, array) for key, array in mapped.items() if key in parts)
        state = {}
        for name, model_key in wanted.items():
            blocks, scales = self.names[name]
            dtype = cast or _FLOATS[self.info.tensors[name].dtype]
            state[model_key] = packrt.from_numpy(dequantize(arrays[blocks], arrays[scales]).astype(dtype.numpy))
        return state


__all__ = ["E2M1", "MXFP4Pairs", "dequantize", "is_mxfp4"]
