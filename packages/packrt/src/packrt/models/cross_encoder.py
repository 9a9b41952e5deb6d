"""Cross-encoder rerankers: a query and a document read together, one relevance score per pair.

:meth:`CrossEncoder.from_pretrained` takes what sentence-transformers' ``CrossEncoder`` loads: a directory it
saved (modules.json with one Transformer step, config_sentence_transformers.json) or a plain Hugging Face
``BertForSequenceClassification`` / ``(XLM)RobertaForSequenceClassification`` directory
(cross-encoder/ms-marco-MiniLM-L6-v2, BAAI/bge-reranker-base), read as :class:`~packrt.models.kinds.Scoring`
says. A pair is tokenized as one input (``[CLS] query [SEP] document [SEP]``, token types 0 then 1), cut
longest text first to the model's bound, and scored by :class:`~packrt.models.classifier.SequenceClassifier`
(a ``Qwen3ForSequenceClassification`` by :class:`~packrt.models.classifier.DecoderClassifier`);
:meth:`CrossEncoder.predict` and :meth:`CrossEncoder.rank` then give what sentence-transformers' methods of
the same names give: the logits through the directory's activation (sigmoid for a one-label model unless it
says otherwise).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from tokenizers import Encoding, Tokenizer

import packrt
from packrt.errors import PackrtError
from packrt.models.classifier import DecoderClassifier, SequenceClassifier
from packrt.models.devices import host
from packrt.models.hfconfig import UnsupportedModelError
from packrt.models.kinds import Scoring, describe
from packrt.models.modernbert import ModernBertClassifier
from packrt.models.pretrained import from_pretrained
from packrt.models.sentence import (
    ACTIVATIONS,
    BatchSizeError,
    EncodeArgumentError,
    TextTypeError,
    check_device,
    fitted_tokenizer,
    padded,
    with_progress,
)
from packrt_core.publication import reading

# the models a CrossEncoder scores with: an encoder's classifier (BERT's kind, ModernBERT's) or a decoder's
Classifier = SequenceClassifier | ModernBertClassifier | DecoderClassifier
# what predict's activation_fn takes: a name of ACTIVATIONS, or a function of the (pairs, labels) float32 logits
Activation = str | Callable[[np.ndarray], np.ndarray]


class RankError(PackrtError, ValueError):
    """:meth:`CrossEncoder.rank` on a model that gives more than one score per pair."""


def as_pairs(inputs: object, where: str) -> tuple[list[tuple[str, str]], bool]:
    """``inputs`` as a list of (first, second) str pairs and whether it was one pair; anything else is a
    :class:`TextTypeError` naming the entry."""
    single = isinstance(inputs, (list, tuple)) and len(inputs) == 2 and all(isinstance(t, str) for t in inputs)
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
        raise TextTypeError(
            f"{where} takes pairs of texts, such as [(query, document), ...], got {type(inputs).__name__}"
        )
    items = [inputs] if single else list(inputs)
    pairs: list[tuple[str, str]] = []
    for index, item in enumerate(items):
        if not isinstance(item, (list, tuple)) or len(item) != 2 or not all(isinstance(t, str) for t in item):
            shown = repr(item) if len(repr(item)) <= 60 else repr(item)[:57] + "..."
            raise TextTypeError(
                f"{where}: inputs[{index}] is {shown}, not a pair of str; pass each pair as (query, document)"
            )
        pairs.append((item[0], item[1]))
    return pairs, single


class CrossEncoder:
    """A tokenizer and a sequence classifier scoring pairs of texts, as sentence-transformers' ``CrossEncoder``.

    Build it with :meth:`from_pretrained`. ``model`` is the packrt
    :class:`~packrt.models.classifier.SequenceClassifier` (or ``DecoderClassifier``), ``tokenizer`` the
    ``tokenizers.Tokenizer``, ``scoring`` what the directory says (:class:`~packrt.models.kinds.Scoring`).
    """

    def __init__(self, model: Classifier, tokenizer: Tokenizer, scoring: Scoring) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.scoring = scoring

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        weight_residency: str | None = None,
        dtype: packrt.dtype | str | None = None,
        progress: bool | None = None,
        quantize: str | None = None,
    ) -> CrossEncoder:
        """The reranker at ``path`` (see the module docstring), loaded as :func:`~packrt.models.from_pretrained`
        loads it; a path holding no sequence classifier is an :class:`~packrt.models.UnsupportedModelError`."""
        scoring = describe(path).scoring()
        model = from_pretrained(
            scoring.transformer, weight_residency=weight_residency, dtype=dtype, progress=progress, quantize=quantize
        )
        if not isinstance(model, Classifier):  # describe said classifier: the family built one
            raise UnsupportedModelError(
                f"{str(scoring.transformer)!r} built a {type(model).__name__}, not a classifier"
            )
        return cls(model, fitted_tokenizer(scoring.transformer, model, scoring.max_seq_length), scoring)

    @property
    def num_labels(self) -> int:
        """How many scores the model gives a pair (1 for a reranker)."""
        return self.model.labels

    @property
    def max_seq_length(self) -> int:
        """The most tokens of a pair, special tokens included; longer pairs are cut, the longer text first."""
        return int((self.tokenizer.truncation or {}).get("max_length", 512))

    @property
    def activation(self) -> str:
        """The activation :meth:`predict` puts on the logits by default: the directory's, else sigmoid for a
        one-label model and identity for more (sentence-transformers' default)."""
        return self.scoring.activation or ("sigmoid" if self.num_labels == 1 else "identity")

    def tokenize(self, pairs: Iterable[Sequence[str]]) -> dict[str, packrt.Tensor]:
        """``input_ids``, ``attention_mask``, ``token_type_ids`` (pairs, longest) int64 for ``pairs``, each pair
        one input, padded on the right; on the model's device."""
        items, _ = as_pairs(list(pairs), "CrossEncoder.tokenize")
        return padded(self.tokenizer.encode_batch(items), self.tokenizer, self.model)

    def logits(self, encodings: Sequence[Encoding]) -> np.ndarray:
        """(pairs, labels) float32 logits, before any activation, of pairs already tokenized (each pair one
        encoding, as ``tokenizer.encode(query, document)`` or ``post_process(query, pair=document)`` makes it),
        in one model call. A server tokenizes each pair once and batches several requests' pairs through this."""
        if not encodings:
            return np.empty((0, self.num_labels), dtype=np.float32)
        batch = padded(encodings, self.tokenizer, self.model)
        out = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        return np.asarray(host(out), dtype=np.float32)

    def activate(self, logits: np.ndarray, activation_fn: Activation | None = None) -> np.ndarray:
        """``logits`` through ``activation_fn`` (see :meth:`predict`; None: :attr:`activation`)."""
        return self._activation(activation_fn)(logits)

    def predict(
        self,
        inputs: Sequence[Sequence[str]] | Sequence[str],
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        activation_fn: Activation | None = None,
        apply_softmax: bool | None = False,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | packrt.Device | None = None,
    ) -> Any:
        """Scores of ``inputs`` (pairs ``[(query, document), ...]``, or one pair), with sentence-transformers'
        ``CrossEncoder.predict`` signature and what each keyword gives there:

        - a (pairs,) float32 array for a one-label model, (pairs, labels) for more; one pair gives one row;
        - ``activation_fn``: a name (``"sigmoid"``, ``"identity"``, ``"tanh"``, ``"relu"``, ``"gelu"``,
          ``"silu"``) or a function of the float32 logits; None: :attr:`activation`;
        - ``apply_softmax``: a softmax over the labels after the activation (models of two labels or more);
        - ``prompt`` / ``prompt_name`` (or the directory's default prompt) go before each pair's first text;
        - ``convert_to_tensor``: a packrt Tensor; ``convert_to_numpy=False``: a list of per-pair Tensors;
        - ``device``: where the model is (another device is an :class:`EncodeArgumentError`);
          ``show_progress_bar``: a tqdm bar over the batches.

        Pairs are batched longest first and returned in the order given; padding never changes a pair's score.
        A pair that is not two str is a :class:`TextTypeError` naming its index, raised before any is scored.
        """
        pairs, single = as_pairs(inputs, "CrossEncoder.predict")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise BatchSizeError(f"CrossEncoder.predict: batch_size must be a positive int, got {batch_size!r}")
        check_device(self.model, device, "CrossEncoder.predict")
        activate = self._activation(activation_fn)
        before = self.scoring.prompt(prompt_name, prompt)
        pairs = [(before + first, second) for first, second in pairs] if before else pairs
        order = sorted(range(len(pairs)), key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
        scores = np.empty((len(pairs), self.num_labels), dtype=np.float32)
        with reading():  # every batch of the call from one version of the weights
            for begin in with_progress(range(0, len(order), batch_size), show_progress_bar):
                chosen = order[begin : begin + batch_size]
                scores[chosen] = activate(self.logits(self.tokenizer.encode_batch([pairs[i] for i in chosen])))
        if apply_softmax and self.num_labels > 1:
            shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores = shifted / shifted.sum(axis=1, keepdims=True)
        result = scores[:, 0] if self.num_labels == 1 else scores
        result = np.ascontiguousarray(result, dtype=np.float32)
        if convert_to_tensor:
            shaped: Any = packrt.from_numpy(result)
        elif convert_to_numpy:
            shaped = result
        else:
            shaped = [packrt.from_numpy(np.ascontiguousarray(row)) for row in result]
        return shaped[0] if single else shaped

    def rank(
        self,
        query: str,
        documents: Sequence[str],
        top_k: int | None = None,
        return_documents: bool = False,
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        activation_fn: Activation | None = None,
        device: str | packrt.Device | None = None,
    ) -> list[dict[str, Any]]:
        """``documents`` ordered by their score against ``query``, best first, as sentence-transformers'
        ``CrossEncoder.rank`` gives them: ``{"corpus_id": index in documents, "score": float}`` (plus ``"text"``
        with ``return_documents``), the first ``top_k`` only when given. Documents of equal score keep their
        order. A model of more than one label has no single score to rank by: :class:`RankError`."""
        if self.num_labels != 1:
            raise RankError(
                f"CrossEncoder.rank: the model gives {self.num_labels} scores per pair and ranking needs one; "
                "call predict([(query, document), ...]) and pick the label to sort by"
            )
        if not isinstance(query, str):
            raise TextTypeError(f"CrossEncoder.rank: query is {type(query).__name__}, expected a str")
        if isinstance(documents, str):
            raise TextTypeError("CrossEncoder.rank takes a list of documents, got a single str; wrap it as [document]")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
            raise EncodeArgumentError(f"CrossEncoder.rank: top_k must be a non-negative int or None, got {top_k!r}")
        texts = list(documents)
        scores = self.predict(
            [(query, text) for text in texts] if texts else [],
            prompt_name=prompt_name,
            prompt=prompt,
            batch_size=batch_size,
            show_progress_bar=show_progress_bar,
            activation_fn=activation_fn,
            device=device,
        )
        order = sorted(range(len(texts)), key=lambda i: -float(scores[i]))  # stable: ties keep the given order
        results: list[dict[str, Any]] = []
        for index in order[:top_k]:
            entry: dict[str, Any] = {"corpus_id": index, "score": float(scores[index])}
            if return_documents:
                entry["text"] = texts[index]
            results.append(entry)
        return results

    def _activation(self, given: Activation | None) -> Callable[[np.ndarray], np.ndarray]:
        name = self.activation if given is None else given
        if callable(name):
            chosen = name
            return lambda logits: np.asarray(chosen(logits), dtype=np.float32)
        if name not in ACTIVATIONS:
            raise EncodeArgumentError(
                f"CrossEncoder.predict: activation_fn {name!r} is not one packrt applies; pass one of "
                f"{', '.join(sorted(ACTIVATIONS))}, or a function of the float32 logits"
            )
        return ACTIVATIONS[name]


__all__ = ["Activation", "Classifier", "CrossEncoder", "RankError", "as_pairs"]
