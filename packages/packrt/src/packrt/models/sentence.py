"""Sentence embeddings from a sentence-transformers directory (all-MiniLM-L6-v2 and its kind).

:meth:`SentenceEncoder.from_pretrained` reads the directory the way sentence-transformers does:
``modules.json`` lists the steps (a Transformer, a Pooling, optionally a Normalize),
``sentence_bert_config.json`` gives ``max_seq_length``, ``1_Pooling/config.json`` the pooling
modes. Text is tokenized by the ``tokenizers`` library from ``tokenizer.json`` (truncated to
``max_seq_length``, padded to the longest text of each batch), and the transformer is loaded by
:func:`packrt.models.from_pretrained`, so ``weight_residency="borrowed"`` serves it from the
mapped file. :meth:`SentenceEncoder.encode` then gives the vectors sentence-transformers gives:
masked mean pooling (or the configured modes, concatenated in its order), L2-normalized.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from tokenizers import Encoding, Tokenizer

import packrt
from packrt import nn
from packrt.errors import PackrtError
from packrt.models.devices import host, model_device, placed
from packrt.models.gguf_tokenizer import read_tokenizer_json
from packrt.models.kinds import POOLING_MODES, Pipeline
from packrt.models.pretrained import from_pretrained
from packrt_core.publication import reading


class TextTypeError(PackrtError, TypeError):
    """``texts`` for :meth:`SentenceEncoder.encode` / ``tokenize`` is not a list (or iterable) of str."""


class BatchSizeError(PackrtError, ValueError):
    """``batch_size`` for :meth:`SentenceEncoder.encode` is not a positive int."""


def as_texts(texts: object, where: str) -> list[str]:
    """``texts`` as a list of str, or a :class:`TextTypeError` naming what was found and where.

    Any iterable of str is taken (a list, a tuple, a generator: read once, into a list); a single str or
    bytes is refused, since iterating it would encode one character or byte per "text".
    """
    if isinstance(texts, str):
        raise TextTypeError(f"{where} takes a list of texts, got a single str; wrap a single text as [text]")
    if isinstance(texts, (bytes, bytearray, memoryview)):
        raise TextTypeError(
            f"{where} takes a list of str, got {type(texts).__name__}; decode it first: [data.decode()]"
        )
    if not isinstance(texts, Iterable):
        raise TextTypeError(f"{where} takes a list of str, got {type(texts).__name__} {_shown(texts)}")
    items: list[str] = []
    for index, item in enumerate(texts):
        if not isinstance(item, str):
            raise TextTypeError(
                f"{where}: texts[{index}] is {type(item).__name__} {_shown(item)}, not a str; {_fix(item)}"
            )
        items.append(item)
    return items


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fix(item: object) -> str:
    if isinstance(item, (bytes, bytearray)):
        return "decode bytes first (data.decode('utf-8'))"
    if item is None:
        return "drop the missing entries or pass '' for an empty text"
    return "pass every text as a str (str(value) for a number)"


class SentenceEncoder:
    """A tokenizer, a BERT-family (bert, roberta, xlm-roberta) encoder and the pooling of a sentence-transformers model.

    Build it with :meth:`from_pretrained`; ``encode(texts)`` returns (len(texts), dimension)
    float32 vectors. ``model`` is the packrt encoder, ``tokenizer`` the ``tokenizers.Tokenizer``.
    """

    def __init__(self, model: nn.Module, tokenizer: Tokenizer, pipeline: Pipeline) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.pipeline = pipeline

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        weight_residency: str | None = None,
        dtype: packrt.dtype | str | None = None,
        progress: bool | None = None,
        quantize: str | None = None,
    ) -> SentenceEncoder:
        """The encoder of a sentence-transformers directory (modules.json, tokenizer.json, weights);
        ``quantize="int8"`` as :func:`~packrt.models.from_pretrained` takes it."""
        pipeline = Pipeline.read(Path(os.fspath(path)))
        return cls.from_pipeline(
            pipeline, weight_residency=weight_residency, dtype=dtype, progress=progress, quantize=quantize
        )

    @classmethod
    def from_pipeline(
        cls,
        pipeline: Pipeline,
        *,
        weight_residency: str | None = None,
        dtype: packrt.dtype | str | None = None,
        progress: bool | None = None,
        quantize: str | None = None,
    ) -> SentenceEncoder:
        """The encoder ``pipeline`` describes, loaded as :meth:`from_pretrained` loads it: for a plain Hugging
        Face encoder directory (no modules.json), ``Pipeline(directory, ("mean_tokens",), True, None)``
        gives what sentence-transformers gives such a directory (mean pooling; normalized here)."""
        tokenizer = read_tokenizer_json(pipeline.transformer / "tokenizer.json")
        model = from_pretrained(
            pipeline.transformer, weight_residency=weight_residency, dtype=dtype, progress=progress, quantize=quantize
        )
        config = getattr(model, "config", None)
        positions = int(getattr(config, "max_positions", 512))
        reserved = getattr(config, "padding_idx", None)  # RoBERTa: the table's first padding_idx + 1 rows
        if reserved is not None:
            positions -= int(reserved) + 1
        limit = min(pipeline.max_seq_length or positions, positions)
        tokenizer.enable_truncation(max_length=limit)
        padding = tokenizer.padding or {}
        pad_token = str(padding.get("pad_token", "[PAD]"))
        pad_id = tokenizer.token_to_id(pad_token)
        if reserved is not None and (pad_id is None or "pad_token" not in padding):
            # the model numbers positions around its own pad id, so padding must use that id
            pad_id, pad_token = int(reserved), tokenizer.id_to_token(int(reserved)) or pad_token
        tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token=pad_token)  # to the longest
        return cls(model, tokenizer, pipeline)

    @property
    def dimension(self) -> int:
        """Length of one embedding: hidden size times the number of pooling modes."""
        hidden = int(getattr(getattr(self.model, "config", None), "hidden", 0))
        return hidden * len(self.pipeline.pooling)

    def tokenize(self, texts: Iterable[str]) -> dict[str, packrt.Tensor]:
        """``input_ids``, ``attention_mask`` and ``token_type_ids`` (batch, longest) int64 for ``texts``
        (an iterable of str; anything else is a :class:`TextTypeError`, as for :meth:`encode`), on the
        model's device (its parameters'), where the model reads them."""
        return self.batch(self.tokenizer.encode_batch(as_texts(texts, "SentenceEncoder.tokenize")))

    def batch(self, encodings: Sequence[Encoding]) -> dict[str, packrt.Tensor]:
        """:meth:`tokenize`'s tensors for texts ``tokenizer`` has already tokenized (``encode``, or ``post_process``
        of an encoding without special tokens): each row padded on the right to the longest with the
        tokenizer's pad id and pad type id, masked out of attention and pooling; on the model's device."""
        padding = self.tokenizer.padding or {}
        pad_id, pad_type = int(padding.get("pad_id", 0)), int(padding.get("pad_type_id", 0))
        longest = max((len(e.ids) for e in encodings), default=0)
        ids = np.full((len(encodings), longest), pad_id, dtype=np.int64)
        types = np.full((len(encodings), longest), pad_type, dtype=np.int64)
        mask = np.zeros((len(encodings), longest), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            width = len(encoding.ids)
            ids[row, :width], types[row, :width] = encoding.ids, encoding.type_ids
            mask[row, :width] = encoding.attention_mask
        fields = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        device = model_device(self.model)  # as generate places its ids: a model moved elsewhere reads them there
        return {name: placed(rows, device) for name, rows in fields.items()}

    def embed(self, encodings: Sequence[Encoding], normalize: bool | None = None) -> np.ndarray:
        """(len(encodings), dimension) float32 embeddings of texts already tokenized (see :meth:`batch`), in one
        model call: what :meth:`encode` gives the same texts (``normalize`` as there). A server tokenizes each
        text once, counts its tokens from that encoding and batches the encodings of several requests through
        this call."""
        if not encodings:
            return np.empty((0, self.dimension), dtype=np.float32)
        return self._embed(self.batch(encodings), self.pipeline.normalize if normalize is None else normalize)

    def _embed(self, batch: dict[str, packrt.Tensor], normalize: bool) -> np.ndarray:
        hidden = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        # pooled on the host: from another device the hidden state comes back with .cpu()
        pooled = self._pool(np.asarray(host(hidden), dtype=np.float32), host(batch["attention_mask"]))
        if normalize:
            pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), np.float32(1e-12))
        return pooled

    def _pool(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        weights = mask[:, :, None].astype(hidden.dtype)
        counts = np.maximum(weights.sum(axis=1), np.float32(1e-9))
        parts = []
        for mode in self.pipeline.pooling:
            if mode == "cls_token":
                parts.append(hidden[:, 0])
            elif mode == "max_tokens":
                parts.append(np.where(weights > 0, hidden, np.float32(-1e9)).max(axis=1))
            elif mode == "mean_tokens":
                parts.append((hidden * weights).sum(axis=1) / counts)
            else:
                parts.append((hidden * weights).sum(axis=1) / np.sqrt(counts))
        return np.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]

    def encode(self, texts: Iterable[str], batch_size: int = 32, normalize: bool | None = None) -> np.ndarray:
        """(len(texts), dimension) float32 embeddings, each of unit L2 norm when ``normalize``; by default
        (None) when the directory's modules.json has a Normalize step, as sentence-transformers gives them (a
        plain Hugging Face encoder directory: normalized).

        ``texts`` is any iterable of str (a generator is read once); a single str, bytes, or an entry
        that is not a str (None, a number, bytes) is a :class:`TextTypeError` (a ``TypeError``) naming
        its index and type, raised before any text is encoded. Texts are batched longest first (less
        padding), ``batch_size`` at a time, and returned in the order given. Padding never changes a
        text's vector: it is masked out of attention and pooling. Every batch of one call reads one version of
        the weights: a load on another thread lands before the call or after it.
        """
        items = as_texts(texts, "SentenceEncoder.encode")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise BatchSizeError(f"SentenceEncoder.encode: batch_size must be a positive int, got {batch_size!r}")
        order = sorted(range(len(items)), key=lambda i: -len(items[i]))
        unit = self.pipeline.normalize if normalize is None else normalize
        out = np.empty((len(items), self.dimension), dtype=np.float32)
        with reading():  # every batch of the call from one version of the weights: a load lands before or after
            for begin in range(0, len(order), batch_size):
                chosen = order[begin : begin + batch_size]
                out[chosen] = self._embed(self.tokenize([items[i] for i in chosen]), unit)
        return out


__all__ = ["POOLING_MODES", "BatchSizeError", "Pipeline", "SentenceEncoder", "TextTypeError", "as_texts"]
