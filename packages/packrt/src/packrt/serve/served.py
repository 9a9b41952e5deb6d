"""The model a server serves: loaded once from a path, its kind, tokenizer and health.

A directory with ``modules.json`` (sentence-transformers) or a Hugging Face encoder directory serves
embeddings through :class:`~packrt.models.SentenceEncoder` (a plain encoder directory gets mean pooling
and L2 normalization, what sentence-transformers gives it); a cross-encoder (a ``...ForSequenceClassification``
directory, or a sentence-transformers CrossEncoder directory) serves reranking through
:class:`~packrt.models.CrossEncoder`; a causal LM directory or a ``.gguf`` file serves completions through
:meth:`~packrt.models.CausalLM.stream`. Weights are ``borrowed`` by default:
served from the mapped checkpoint, one copy per machine whatever the number of server processes.

:meth:`ServedModel.check_files` is the health check: the mapped files' identity (device, inode,
size, modification time) against what was loaded, by the guard packrt_io keeps on the model.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tokenizers import Encoding, Tokenizer

import packrt_io
from packrt import models, nn
from packrt.errors import CheckpointError, PackrtError
from packrt.models.cross_encoder import CrossEncoder
from packrt.models.hfconfig import read_json
from packrt.models.sentence import SentenceEncoder

Kind = Literal["embeddings", "rerank", "completions"]


def endpoint(described: models.ModelDescription) -> Kind:
    """The endpoint ``packrt serve`` gives a model :func:`~packrt.models.describe` described: rerank for a
    sequence classifier (a cross-encoder), embeddings for a sentence-transformers pipeline (over an encoder or
    a decoder) or a plain encoder directory, completions for a causal LM."""
    if described.head == "sequence-classification":
        return "rerank"
    return "embeddings" if described.kind == "encoder" or described.sentence_transformers else "completions"


def default_residency(described: models.ModelDescription) -> str:
    """How ``packrt serve`` keeps a model's weights when not told: ``auto`` (each weight packed for serving where
    the pack fits the free memory, else served from the mapped checkpoint), but ``packed`` for a GGUF file: its
    embedding (and any tensor not served as quantized blocks) is dequantized at load, so there is no mapped copy
    of it to borrow, and an F16 file's borrowed weights would be widened on every call (18x slower decode on the
    float road, issue 47's measurement), and its quantized blocks borrowed were slower too (a Q4_K_M 0.5B file: decode
    0.92x and prefill 0.84x llama.cpp's borrowed, 1.09x and 1.36x packed).

    Not ``borrowed``: a borrowed float weight is multiplied as it lies by numpy's BLAS, which packrt keeps to one
    thread while its own pool runs the packed products, so a borrowed server's products run on one core. MiniLM,
    48 short texts on two cores: 190-217 ms borrowed, 97-108 ms packed; 16 clients beside other jobs: 220-241
    texts/s borrowed against 251-368 auto (quiet, auto: 431-490) (issue 39's measurement).
    ``--weight-residency borrowed`` keeps the mapped file as the one copy for several server processes."""
    return "packed" if described.format == "gguf" else "auto"


def _chat_settings(path: Path) -> tuple[str | None, dict[str, str]]:
    """The model's chat template and the bos/eos token strings its variables read, where transformers and
    llama.cpp keep them: a GGUF file's ``tokenizer.chat_template`` and ``tokenizer.ggml.{bos,eos}_token_id``
    (looked up in its token list), read in one open; a directory's ``chat_template.jinja`` (where transformers
    5's save_pretrained writes it), else tokenizer_config.json's ``chat_template`` (a list of named ones gives
    "default"), with that file's bos/eos tokens."""
    if packrt_io.is_gguf(path):
        meta = packrt_io.open_gguf(path).metadata
        template, tokens = meta.get("tokenizer.chat_template"), meta.get("tokenizer.ggml.tokens")
        found: dict[str, str] = {}
        for name in ("bos_token", "eos_token"):
            index = meta.get(f"tokenizer.ggml.{name}_id")
            if isinstance(tokens, list) and isinstance(index, int) and 0 <= index < len(tokens):
                found[name] = str(tokens[index])
        return (template if isinstance(template, str) else None), found
    directory = path if path.is_dir() else path.parent
    try:
        config = read_json(directory / "tokenizer_config.json")
    except FileNotFoundError:
        config = {}
    return _directory_template(directory, config), _special_tokens(config)


def _directory_template(directory: Path, config: Any) -> str | None:
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        try:
            return jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise CheckpointError(f"{str(jinja)!r} cannot be read as UTF-8 text ({err}); fix or remove it") from err
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _special_tokens(config: Any) -> dict[str, str]:
    """bos/eos token strings of tokenizer_config.json's object ``config``."""
    found: dict[str, str] = {}
    for name in ("bos_token", "eos_token"):
        value = config.get(name) if isinstance(config, dict) else None
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            found[name] = value
    return found


def matryoshka(*directories: Path) -> tuple[int, ...] | None:
    """The sizes an embedding model says its vectors may be cut to, from the first config.json of
    ``directories`` that says anything (vLLM's fields): ``matryoshka_dimensions`` (a list of sizes) gives
    them, ``is_matryoshka: true`` gives () (any size); None when no config says either."""
    for directory in directories:
        try:
            config = read_json(directory / "config.json")
        except (FileNotFoundError, NotADirectoryError):
            continue
        if not isinstance(config, dict):
            continue
        sizes = config.get("matryoshka_dimensions")
        if isinstance(sizes, list) and sizes and all(isinstance(n, int) and n > 0 for n in sizes):
            return tuple(sorted(set(sizes)))
        if config.get("is_matryoshka") is True:
            return ()
    return None


class ServeOptionError(PackrtError, ValueError):
    """A load option (``dtype``, ``quantize``) that the model at hand cannot take."""


def _check_load_options(
    described: models.ModelDescription, where: Path, dtype: str | None, quantize: str | None
) -> None:
    """A GGUF file is served as its blocks are stored: a cast or a re-quantization would first dequantize every
    block to float32 at load (several times the file's memory, and int8 over 4-bit blocks adds a second rounding),
    so both are refused; every safetensors directory takes them."""
    asked = [f"{flag} {value!r}" for flag, value in (("dtype", dtype), ("quantize", quantize)) if value is not None]
    if asked and described.format == "gguf":
        raise ServeOptionError(
            f"{str(where)!r} is a GGUF file, whose quantized blocks are served as stored; {' and '.join(asked)} "
            "would dequantize every block to float32 at load first: serve the file without --dtype and --quantize "
            "(choose the quantization when making the GGUF), or serve a safetensors directory with them"
        )


@dataclass(frozen=True)
class TokenizedText:
    """One served text, tokenized once: ``encoding`` as the model reads it (special tokens added, truncated to
    the server's bound, not padded) and ``count``, its tokens before truncation, special tokens included."""

    encoding: Encoding
    count: int


@dataclass
class ServedModel:
    """One loaded model and what the server needs around it."""

    path: Path
    name: str
    kind: Kind
    module: nn.Module
    tokenizer: Tokenizer
    counter: Tokenizer  # the same tokenizer without truncation or padding: splits a text, counting all its tokens
    max_positions: int
    encoder: SentenceEncoder | None = None
    cross_encoder: CrossEncoder | None = None
    chat_template: str | None = None
    special_tokens: dict[str, str] | None = None
    # the sizes an embedding model's vectors may be cut to (``dimensions``): () any, None none (see matryoshka)
    matryoshka_dimensions: tuple[int, ...] | None = None

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        weight_residency: str | None = None,
        name: str | None = None,
        dtype: str | None = None,
        quantize: str | None = None,
    ) -> ServedModel:
        """Load ``path`` for serving (``weight_residency`` None: :func:`default_residency`; ``dtype`` and
        ``quantize`` as :func:`~packrt.models.from_pretrained` takes them, for every kind of model); packrt's
        load errors (CheckpointError, UnsupportedModelError, QuantizeError...) as raised. A GGUF file takes
        neither: :class:`ServeOptionError`, before anything is read."""
        where = Path(os.fspath(path)).expanduser().absolute()
        shown = name or where.name
        if not where.exists():
            raise CheckpointError(
                f"{str(where)!r} does not exist; pass a model directory (config.json + model.safetensors, or a "
                "sentence-transformers directory with modules.json) or a .gguf file"
            )
        described = models.describe(where)
        _check_load_options(described, where, dtype, quantize)
        weight_residency = weight_residency or default_residency(described)
        options: dict[str, Any] = {"weight_residency": weight_residency, "dtype": dtype, "quantize": quantize}
        if endpoint(described) == "rerank":
            scorer = CrossEncoder.from_pretrained(where, **options)
            return cls.from_loaded(where, scorer.model, cross_encoder=scorer, name=shown)
        if endpoint(described) == "embeddings":
            encoder = SentenceEncoder.from_pipeline(described.pipeline(), **options)
            return cls.from_loaded(where, encoder.model, encoder=encoder, name=shown)
        return cls.from_loaded(where, models.from_pretrained(where, **options), name=shown)

    @classmethod
    def from_loaded(
        cls,
        path: str | os.PathLike[str],
        module: nn.Module,
        *,
        encoder: SentenceEncoder | None = None,
        cross_encoder: CrossEncoder | None = None,
        name: str | None = None,
    ) -> ServedModel:
        """Serve a model already loaded from ``path`` (by a caller that measures or places the load itself):
        ``encoder`` for embeddings, ``cross_encoder`` for reranking, else ``module`` must be a causal LM, whose
        tokenizer is read from ``path``."""
        where = Path(os.fspath(path)).expanduser().absolute()
        shown = name or where.name
        if cross_encoder is not None:
            tokenizer = cross_encoder.tokenizer
            limit = cross_encoder.max_seq_length
            return cls(where, shown, "rerank", module, tokenizer, _bare(tokenizer), limit, cross_encoder=cross_encoder)
        if encoder is not None:
            limit = (encoder.tokenizer.truncation or {}).get("max_length", 512)
            return cls(
                where,
                shown,
                "embeddings",
                encoder.model,
                encoder.tokenizer,
                _bare(encoder.tokenizer),
                int(limit),
                encoder=encoder,
                matryoshka_dimensions=matryoshka(encoder.pipeline.transformer, where),
            )
        if not isinstance(module, models.CausalLM):
            raise CheckpointError(f"{str(where)!r} holds a {type(module).__name__}, which packrt serve cannot serve")
        tokenizer = models.load_tokenizer(where)
        template, special = _chat_settings(where)
        positions = module.max_positions if module.max_positions is not None else 1 << 30
        return cls(
            where,
            shown,
            "completions",
            module,
            tokenizer,
            _bare(tokenizer),
            int(positions),
            chat_template=template,
            special_tokens=special,
        )

    def tokenize(self, texts: list[str]) -> list[TokenizedText]:
        """Each text tokenized once (as TEI does): the encoding the model reads, and the count the limits and
        usage read, both from the same pass (a sentence-transformers directory's default prompt put before each
        text, as ``encode`` puts it). ``counter`` splits the text (no truncation, no special tokens);
        ``tokenizer.post_process`` then truncates it to the server's bound and adds the special tokens, exactly
        as ``tokenizer.encode`` would, without tokenizing it again."""
        specials = self.tokenizer.num_special_tokens_to_add(False)
        if self.encoder is not None and (prompt := self.encoder.pipeline.prompt()):
            texts = [prompt + text for text in texts]  # the default prompt, as SentenceEncoder.encode puts it
        return [
            TokenizedText(self.tokenizer.post_process(split), len(split.ids) + specials)
            for split in self.counter.encode_batch(texts, add_special_tokens=False)
        ]

    def tokenize_pairs(self, query: str, documents: list[str]) -> list[TokenizedText]:
        """Each (query, document) pair tokenized once, as one input of the cross-encoder: the query split once,
        each document split once, then ``tokenizer.post_process`` cuts the pair to the server's bound (the longer
        text first) and adds the special tokens, as ``tokenizer.encode(query, document)`` would. ``count`` is the
        pair's tokens before the cut, special tokens included."""
        specials = self.tokenizer.num_special_tokens_to_add(True)
        if self.cross_encoder is not None and (prompt := self.cross_encoder.scoring.prompt()):
            query = prompt + query  # the default prompt before the first text, as predict puts it
        first = self.counter.encode(query, add_special_tokens=False)
        return [
            TokenizedText(self.tokenizer.post_process(first, split), len(first.ids) + len(split.ids) + specials)
            for split in self.counter.encode_batch(documents, add_special_tokens=False)
        ]

    def check_files(self) -> None:
        """CheckpointError naming the mapped file that changed since the load; nothing when all are as loaded."""
        for mapped in packrt_io.mapped_files(self.module):
            mapped.check()

    def describe(self) -> dict[str, Any]:
        return {"id": self.name, "object": "model", "created": 0, "owned_by": "packrt", "kind": self.kind}


def _bare(tokenizer: Tokenizer) -> Tokenizer:
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def dumps(value: Any) -> str:
    """Compact JSON for an event or a body."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


__all__ = [
    "Kind",
    "ServeOptionError",
    "ServedModel",
    "TokenizedText",
    "default_residency",
    "dumps",
    "endpoint",
    "matryoshka",
]
