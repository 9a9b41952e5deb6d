"""What ``from_pretrained`` serves, as one Markdown table built from the code's own tables.

The guide (docs/guides/huggingface.md) carries this table between ``<!-- support-table -->`` markers and
a test compares it with :func:`support_table`, so the documentation cannot drift from the families,
GGUF architectures, GGML types and settings the code accepts.
"""

from __future__ import annotations

import packrt_io
from packrt.models import generation_defaults, gguf, gguf_tokenizer
from packrt.models.classifier import classifies
from packrt.models.config_schema import ROPE_TYPES, SCHEMAS
from packrt.models.kinds import DENSE_ACTIVATIONS, FAMILIES, POOLING_MODES, STEPS, base_models
from packrt_base import BLOCK_FORMATS

BEGIN, END = "<!-- support-table:begin -->", "<!-- support-table:end -->"


def _code(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def _settings() -> list[tuple[str, str, str]]:
    """One row per config.json setting with a closed set of values packrt implements (from the schemas)."""
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for model_type, schema in SCHEMAS.items():
        for field in schema.fields:
            if field.kind in ("choice", "layer_types"):
                grouped.setdefault((field.name, field.implemented), []).append(model_type)
        for name in schema.off:
            grouped.setdefault((name, ("false",)), []).append(model_type)
    return [
        (f"config.json `{name}` ({', '.join(types)})", _code(implemented), "implemented; other values refused")
        for (name, implemented), types in grouped.items()
    ]


def support_rows() -> list[tuple[str, str, str]]:
    """(what, accepted values, served as) rows, in the order the table lists them."""
    rows = [
        ("config.json `model_type`", f"`{kind}`", ", ".join(family.architectures))
        for family in FAMILIES
        for kind in family.model_types
    ]
    bases = [name for family in FAMILIES for name in base_models(family)]
    rows.append(
        (
            "config.json `architectures` (a base model, no head)",
            _code(bases),
            "the Transformer step of a sentence-transformers directory only (its last hidden states, pooled)",
        )
    )
    classifiers = [name for family in FAMILIES for name in family.architectures if classifies(name)]
    rows.append(
        (
            "config.json `architectures` (a sequence classifier: a cross-encoder reranker)",
            _code(classifiers),
            "pairs scored by `CrossEncoder` (`predict`, `rank`) and `packrt serve`'s `POST /rerank`",
        )
    )
    rows += _settings()
    rows += [
        (
            "sentence-transformers `modules.json` steps",
            _code(STEPS),
            "run in that order (any number of Dense steps, Normalize last); any other step refused by name",
        ),
        ("sentence-transformers Pooling mode", _code(POOLING_MODES), "pooled as sentence-transformers pools"),
        (
            "sentence-transformers Dense `activation_function`",
            _code(list(DENSE_ACTIVATIONS)),
            "applied after the projection; other values refused",
        ),
        (
            "sentence-transformers CrossEncoder `activation_fn`",
            _code(list(DENSE_ACTIVATIONS)),
            "applied to the logits (none given: sigmoid for one label); other torch values refused",
        ),
    ]
    rows += [
        (
            "config.json `rope_type` (every rotary family; gemma3 per layer type)",
            _code(ROPE_TYPES),
            "rotary frequencies",
        ),
        (
            f"`{generation_defaults.FILE}` (else config.json)",
            _code(generation_defaults.FIELDS),
            "generate's defaults; an argument given wins",
        ),
    ]
    rows += [
        ("GGUF `general.architecture`", f"`{arch}`", f"{spec.architecture} (`{spec.model_type}`)")
        for arch, spec in gguf.ARCHITECTURES.items()
    ]
    rows += [
        ("GGUF tensor type", _code(list(packrt_io.GGUF_STORED_TYPES)), "as stored, mapped from the file"),
        (
            "GGUF tensor type, a linear's weight or the token embedding",
            _code(list(BLOCK_FORMATS)),
            "kept as its blocks, multiplied from them (`dtype=` or `quantize=`: dequantised instead)",
        ),
        (
            "GGUF tensor type, any other tensor",
            _code(packrt_io.GGUF_DEQUANTISED_TYPES),
            'dequantised to float32 at load (`quantize="int8"`: then int8 per output channel)',
        ),
        (
            "GGUF tokenizer (`tokenizer.ggml.model`)",
            _code(gguf_tokenizer.TOKENIZER_MODELS),
            "byte-level BPE; SentencePiece BPE",
        ),
        ("GGUF split (`tokenizer.ggml.pre`)", _code(list(gguf_tokenizer.SPLITS)), "tokenizers pre-tokenizer"),
        ("GGUF `rope.scaling.type`", _code(gguf.ROPE_SCALINGS), "rotary frequencies"),
        ("GGUF tensor", f"`{gguf.ROPE_FREQS}`", "per-pair rotary frequency divisors (Llama 3.x scaling)"),
    ]
    return rows


def support_table() -> str:
    """The Markdown table of :func:`support_rows` (header included, no trailing newline)."""
    lines = ["| what | accepted | architectures, or how it is served |", "| --- | --- | --- |"]
    lines += [f"| {what} | {accepted} | {served} |" for what, accepted, served in support_rows()]
    return "\n".join(lines)


__all__ = ["BEGIN", "END", "support_rows", "support_table"]
