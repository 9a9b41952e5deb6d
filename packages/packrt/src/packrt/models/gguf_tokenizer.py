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
  Llama 3 and Qwen2 patterns for theirs;
- ``model`` ``llama`` (SentencePiece BPE, as Gemma, Llama 2, Mistral and Phi-3 files use): spaces become
  ``▁`` (with one in front of the text when ``add_space_prefix``, llama.cpp's default for this kind, is
  true), the merges are the file's or, where it lists none (Gemma), every split of a token into two
  tokens, ranked by the merged token's score as llama.cpp ranks them; a piece no token spells falls back
  to its bytes (``<0x0A>``).

Control tokens are kept whole as special tokens, user-defined ones as plain added tokens. Any other
``model`` or ``pre`` is refused by name, with the fix (save the model's tokenizer.json beside the file).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
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
TOKENIZER_MODELS: Final[tuple[str, ...]] = ("gpt2", "llama")
CONTROL, USER_DEFINED = 3, 4
SPACE: Final = "\u2581"  # SentencePiece's visible space


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


def _list(meta: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = meta.get(key)
    if not isinstance(value, list):
        raise CheckpointError(f"GGUF file {where!r} has no {key} list; its tokenizer cannot be built from it")
    return value


def _byte_level(meta: Mapping[str, Any], where: str, fix: str) -> tuple[Tokenizer, list[str]]:
    """The byte-level BPE of ``model`` ``gpt2`` and its tokens as the vocabulary spells them."""
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
    tokenizer = Tokenizer(_bpe(tokens, [(m[0], m[1]) for m in merges if len(m) == 2], where, fix))
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
    return tokenizer, tokens


def _ranked_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """Every split of a token into two tokens, best first: llama.cpp's SentencePiece tokenizer joins the
    adjacent pair whose joined token scores highest, so a merge ranks by its result's score (ties: lower id)."""
    ids = {token: index for index, token in enumerate(tokens)}
    ranked = []
    for index, token in enumerate(tokens):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ids and right in ids:
                ranked.append((-scores[index], index, ids[left], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _sentencepiece(meta: Mapping[str, Any], where: str, fix: str) -> tuple[Tokenizer, list[str]]:
    """The SentencePiece BPE of ``model`` ``llama`` and its tokens as the vocabulary spells them."""
    # A token of spaces only is stored with real spaces (Gemma): a user-defined one is matched in the raw text
    # as it is spelled, any other must match text whose spaces are already ▁.
    raw = [str(t) for t in _list(meta, "tokenizer.ggml.tokens", where)]
    types = meta.get("tokenizer.ggml.token_type") or []
    user = {i for i, kind in enumerate(types) if kind == USER_DEFINED}
    tokens = [SPACE * len(t) if t and not t.strip(" ") and i not in user else t for i, t in enumerate(raw)]
    if "tokenizer.ggml.merges" in meta:
        merges = [tuple(str(m).split(" ", 1)) for m in _list(meta, "tokenizer.ggml.merges", where)]
        pairs = [(m[0], m[1]) for m in merges if len(m) == 2]
    else:
        scores = [float(s) for s in _list(meta, "tokenizer.ggml.scores", where)]
        if len(scores) != len(tokens):
            raise CheckpointError(
                f"GGUF file {where!r}: tokenizer.ggml.scores has {len(scores)} entries for {len(tokens)} tokens; {fix}"
            )
        pairs = _ranked_merges(tokens, scores)
    unknown = meta.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[unknown] if isinstance(unknown, int) and 0 <= unknown < len(tokens) else None
    tokenizer = Tokenizer(_bpe(tokens, pairs, where, fix, unk_token=unk, byte_fallback=True))
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))  # llama.cpp's default for this kind
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement=SPACE, prepend_scheme="first" if prefix else "never", split=False
    )
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence([*steps, decoders.Strip(" ", 1, 0)] if prefix else steps)
    return tokenizer, tokens


def _bpe(tokens: list[str], merges: list[tuple[str, str]], where: str, fix: str, **options: Any) -> models.BPE:
    vocab = {token: index for index, token in enumerate(tokens)}  # a repeated spelling: its last id, as llama.cpp
    try:
        return models.BPE(vocab, merges, fuse_unk=options.pop("unk_token", None) is not None, **options)
    except Exception as err:  # tokenizers raises a bare Exception: a merge of a token the list does not hold
        raise CheckpointError(
            f"GGUF file {where!r}: tokenizer.ggml.merges does not fit tokenizer.ggml.tokens ({err}); {fix}"
        ) from err


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
    tokenizer, tokens = (_byte_level if kind == "gpt2" else _sentencepiece)(meta, where, fix)
    types = meta.get("tokenizer.ggml.token_type") or []
    # Control tokens spelled outside the byte alphabet are mislabelled bytes; adding them would grow the vocab.
    alphabet = set(byte_alphabet().values()) if kind == "gpt2" else None
    control = [
        t
        for t, kind in zip(tokens, types, strict=False)
        if kind == CONTROL and (alphabet is None or set(t) <= alphabet)
    ]
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
