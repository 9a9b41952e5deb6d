"""The tokenizer of a GGUF file, as a Hugging Face ``tokenizers.Tokenizer``.

A GGUF file has no ``tokenizer.json``; it stores the vocabulary under ``tokenizer.ggml.*``:
``model`` (the kind), ``tokens`` (id order), ``merges`` (byte-level BPE), ``token_type`` (3 marks
control tokens such as ``<|im_start|>``, 4 user-defined ones), ``pre`` (how text is split before
merging) and the special ids. :func:`load_tokenizer` prefers a ``tokenizer.json`` beside the file
(an explicit choice); otherwise it builds one from the metadata:

- ``model`` ``gpt2`` (byte-level BPE, as SmolLM2, GPT-2, Qwen2 and Llama 3 files use): a BPE over the
  vocabulary and merges, GPT-2's byte-to-character alphabet, control tokens kept whole as special
  tokens and user-defined ones kept whole as plain added tokens, a BOS token prepended when
  ``add_bos_token`` is true;
- ``pre`` picks the split (:data:`SPLITS`): GPT-2's own for the pre-tokenizers that use it, the
  Llama 3 and Qwen2 patterns for theirs. Any other ``model`` or ``pre`` is refused by name, with
  the fix (save the model's tokenizer.json beside the file).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

import packrt_io
from packrt.errors import CheckpointError
from packrt.models.hfconfig import read_regular

_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# tokenizer.ggml.pre -> the split regex (None: GPT-2's own, built into the ByteLevel pre-tokenizer)
SPLITS: Final[dict[str, str | None]] = {
    "default": None,
    "gpt2": None,
    "gpt-2": None,
    "smollm": None,
    "starcoder": None,
    "refact": None,
    "llama3": _LLAMA3,
    "llama-v3": _LLAMA3,
    "llama-bpe": _LLAMA3,
    "qwen2": _QWEN2,
}
TOKENIZER_MODELS: Final[tuple[str, ...]] = ("gpt2",)
CONTROL, USER_DEFINED = 3, 4


def byte_alphabet() -> dict[int, str]:
    """GPT-2's map from each byte to a printable character: printable Latin-1 bytes map to
    themselves, the rest to code points from 256 on, in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {byte: chr(byte) for byte in kept}
    extra = 0
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def _spelled(tokens: list[str]) -> list[str]:
    """Each token in the byte alphabet (a file may store a token as its plain text)."""
    table = byte_alphabet()
    alphabet = set(table.values())
    return [t if set(t) <= alphabet else "".join(table[b] for b in t.encode("utf-8")) for t in tokens]


def _list(meta: dict[str, Any], key: str, where: str) -> list[Any]:
    value = meta.get(key)
    if not isinstance(value, list):
        raise CheckpointError(f"GGUF file {where!r} has no {key} list; its tokenizer cannot be built from it")
    return value


def tokenizer_from_gguf(file: packrt_io.GGUFFile) -> Tokenizer:
    """The ``tokenizers.Tokenizer`` the metadata of ``file`` describes (see the module docstring)."""
    meta, where = file.metadata, str(file.path)
    kind = meta.get("tokenizer.ggml.model")
    fix = "save the model's tokenizer.json (from its Hugging Face repository) beside the GGUF file"
    if kind not in TOKENIZER_MODELS:
        raise CheckpointError(
            f"GGUF file {where!r}: tokenizer.ggml.model {kind!r} is not one packrt builds a tokenizer for "
            f"(supported: {', '.join(TOKENIZER_MODELS)}); {fix}"
        )
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in SPLITS:
        raise CheckpointError(
            f"GGUF file {where!r}: tokenizer.ggml.pre {pre!r} is a split packrt does not know (supported: "
            f"{', '.join(SPLITS)}); {fix}"
        )
    try:
        tokens = _spelled([str(t) for t in _list(meta, "tokenizer.ggml.tokens", where)])
    except UnicodeEncodeError as err:  # a token holding a lone surrogate: no UTF-8 bytes to spell it with
        raise CheckpointError(
            f"GGUF file {where!r}: tokenizer.ggml.tokens holds a token that is not valid text ({err.reason}); {fix}"
        ) from err
    merges = [tuple(str(m).split(" ", 1)) for m in _list(meta, "tokenizer.ggml.merges", where)]
    vocab = {token: index for index, token in enumerate(tokens)}
    try:
        bpe = models.BPE(vocab, [(m[0], m[1]) for m in merges if len(m) == 2], fuse_unk=False)
    except Exception as err:  # tokenizers raises a bare Exception: a merge of a token the list does not hold
        raise CheckpointError(
            f"GGUF file {where!r}: tokenizer.ggml.merges does not fit tokenizer.ggml.tokens ({err}); {fix}"
        ) from err
    tokenizer = Tokenizer(bpe)
    split, prefix = SPLITS[pre], bool(meta.get("tokenizer.ggml.add_space_prefix", False))
    if split is None:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix, use_regex=True)
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=prefix, use_regex=False),
            ]
        )
    tokenizer.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type") or []
    alphabet = set(byte_alphabet().values())
    # Control tokens spelled outside the byte alphabet are mislabelled bytes; adding them would grow the vocab.
    control = [t for t, kind in zip(tokens, types, strict=False) if kind == CONTROL and set(t) <= alphabet]
    user = [t for t, kind in zip(tokens, types, strict=False) if kind == USER_DEFINED]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])
    bos = meta.get("tokenizer.ggml.bos_token_id")
    if meta.get("tokenizer.ggml.add_bos_token", False) and isinstance(bos, int) and 0 <= bos < len(tokens):
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A {tokens[bos]} $B", special_tokens=[(tokens[bos], bos)]
        )
    return tokenizer


def read_tokenizer_json(path: Path) -> Tokenizer:
    """``tokenizer.json`` through the tokenizers library; whatever it raises becomes a CheckpointError
    naming the file (a truncated file raises a bare ``Exception`` there)."""
    try:
        text = read_regular(path).decode("utf-8")
    except FileNotFoundError:
        raise CheckpointError(
            f"{str(path)!r} is missing; SentenceEncoder tokenizes with the tokenizers library from "
            "tokenizer.json (save the tokenizer with a fast tokenizer to write one)"
        ) from None
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{str(path)!r} is not UTF-8 text ({err}); re-save the tokenizer") from err
    try:
        return Tokenizer.from_str(text)
    except Exception as err:  # tokenizers raises plain Exception for malformed files
        raise CheckpointError(
            f"{str(path)!r} cannot be read by the tokenizers library ({err}); re-save the tokenizer "
            "(tokenizer.save_pretrained with a fast tokenizer)"
        ) from err


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """The tokenizer for a model path: a directory's ``tokenizer.json``; for a GGUF file, the
    ``tokenizer.json`` beside it when there is one, else the one its metadata describes."""
    where = Path(os.fspath(path))
    beside = where / "tokenizer.json" if where.is_dir() else where.parent / "tokenizer.json"
    if beside.is_file():
        return read_tokenizer_json(beside)
    if where.is_dir():
        raise CheckpointError(
            f"{str(where)!r} has no tokenizer.json; save the tokenizer with a fast tokenizer to write one"
        )
    return tokenizer_from_gguf(packrt_io.open_gguf(where))


__all__ = [
    "SPLITS",
    "TOKENIZER_MODELS",
    "byte_alphabet",
    "load_tokenizer",
    "read_tokenizer_json",
    "tokenizer_from_gguf",
]
