"""Sequence classification: the cross-encoder rerankers' model (bge-reranker, ms-marco MiniLM, Qwen3 rerankers).

transformers' ``BertForSequenceClassification`` and ``(XLM)RobertaForSequenceClassification`` end the same
way: the first token's last hidden state goes through a square Linear and tanh, then a Linear to one score
per label. BERT calls the first Linear ``bert.pooler.dense`` and the second ``classifier``; RoBERTa calls
them ``classifier.dense`` and ``classifier.out_proj``. packrt names both :class:`ClassificationHead`'s
``dense`` and ``out_proj`` and keeps the difference in the key maps (:func:`classifier_keymap`). Dropout
is a training-time step and has no place here.

Parameter names are the encoder's under ``encoder.`` plus::

    head.dense.{weight,bias}     (hidden, hidden) / (hidden,)
    head.out_proj.{weight,bias}  (labels, hidden) / (labels,)

A rotary decoder's ``...ForSequenceClassification`` (``Qwen3ForSequenceClassification``) is a
:class:`DecoderClassifier`: the decoder's parameters under ``decoder.`` (its head tied, never loaded) and
``score.weight`` (labels, hidden), read at each row's last token.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import packrt
from packrt import nn
from packrt.errors import ShapeError
from packrt.models.devices import host, placed
from packrt.models.encoder import BertEncoder
from packrt.models.generation import CausalLM
from packrt.models.hfconfig import HFConfig
from packrt.models.keymap import KeyMap, Rule

SUFFIX = "ForSequenceClassification"


def classifies(architecture: str) -> bool:
    """Whether a config.json architecture is a sequence classifier (the one test every caller asks)."""
    return architecture.endswith(SUFFIX)


def is_classifier(config: HFConfig) -> bool:
    """Whether config.json's first architecture is a sequence classifier (the head a family builds)."""
    architectures = config.get("architectures") or []
    return bool(architectures) and isinstance(architectures[0], str) and classifies(architectures[0])


def num_labels(config: HFConfig) -> int:
    """How many scores the classifier gives: ``id2label``'s size, as transformers counts them (``num_labels``
    where a config gives only that; 2, transformers' default, where it gives neither)."""
    labels = config.get("id2label")
    if labels is not None:
        if not isinstance(labels, dict) or not labels:
            raise config.error("id2label", f"is {labels!r}, expected an object of label index: name")
        return len(labels)
    count = config.get("num_labels", 2)
    if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
        raise config.error("num_labels", f"is {count!r}, expected a positive integer")
    return count


class ClassificationHead(nn.Module):
    """``out_proj(tanh(dense(first token)))``: (batch, seq, hidden) hidden states -> (batch, labels) logits."""

    def __init__(self, hidden: int, labels: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, labels)

    def forward(self, hidden_states: packrt.Tensor) -> packrt.Tensor:
        pooled = self.dense(hidden_states[:, 0]).tanh()
        out: packrt.Tensor = self.out_proj(pooled)
        return out


class SequenceClassifier(nn.Module):
    """An encoder and a :class:`ClassificationHead`: ``forward(input_ids, attention_mask=None,
    token_type_ids=None)`` gives (batch, labels) logits, as transformers' ``...ForSequenceClassification``
    gives ``.logits`` (no activation: a cross-encoder's sigmoid or softmax is the caller's,
    :class:`~packrt.models.CrossEncoder`). Padding never changes a row's logits: the first token attends
    to the real tokens only."""

    def __init__(self, encoder: BertEncoder, labels: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.config = encoder.config  # the encoder's geometry (positions, padding): what tokenizers are fitted to
        self.labels = labels
        self.head = ClassificationHead(encoder.config.hidden, labels)

    def forward(
        self,
        input_ids: packrt.Tensor,
        attention_mask: packrt.Tensor | None = None,
        token_type_ids: packrt.Tensor | None = None,
    ) -> packrt.Tensor:
        out: packrt.Tensor = self.head(self.encoder(input_ids, attention_mask, token_type_ids))
        return out

    def extra_repr(self) -> str:
        return f"labels={self.labels}"


class DecoderClassifier(nn.Module):
    """A causal LM's final hidden states scored by ``score`` (transformers' ``Qwen3ForSequenceClassification`` and
    its kind: a reranker over a decoder): each row's logits are read at its last token that is not the pad id
    (``pad_token_id``), as transformers reads them, so a batch may be padded on either side. Without a pad id
    only a batch of one row has a last token to read. ``token_type_ids`` is taken and ignored (a decoder has
    none), so it is called as :class:`SequenceClassifier` is."""

    def __init__(self, decoder: CausalLM, hidden: int, labels: int, pad_token_id: int | None) -> None:
        super().__init__()
        self.decoder = decoder
        self.labels, self.pad_token_id = labels, pad_token_id
        self.score = nn.Linear(hidden, labels, bias=False)

    def forward(
        self,
        input_ids: packrt.Tensor,
        attention_mask: packrt.Tensor | None = None,
        token_type_ids: packrt.Tensor | None = None,
    ) -> packrt.Tensor:
        states = self.decoder.hidden_states(input_ids, attention_mask)
        batch, seq, width = states.shape
        ids = np.asarray(host(input_ids))
        if self.pad_token_id is None:
            if batch != 1:
                raise ShapeError(
                    f"DecoderClassifier: a batch of {batch} rows needs a pad_token_id to find each row's last "
                    "token; set pad_token_id in config.json, or score one row at a time"
                )
            last = np.full(batch, seq - 1)
        else:
            last = (np.arange(seq)[None, :] * (ids != self.pad_token_id)).argmax(axis=-1)
        rows = placed((np.arange(batch) * seq + last).astype(np.int64), states.device)
        out: packrt.Tensor = self.score(states.reshape(batch * seq, width)[rows])
        return out

    def extra_repr(self) -> str:
        return f"labels={self.labels}, pad_token_id={self.pad_token_id}"


def classifier_keymap(encoder: KeyMap, head: Sequence[tuple[str, str, bool]]) -> KeyMap:
    """An encoder family's key map for its sequence classifier: every encoder row under ``encoder.``, plus
    ``head``'s rows (checkpoint module, packrt module, whether the name carries the encoder's prefix) for
    the weight and bias of each."""
    rules = [Rule(rule.checkpoint, f"encoder.{rule.model}", rule.transform, rule.prefixed) for rule in encoder.rules]
    rules += [
        Rule(f"{theirs}.{kind}", f"head.{ours}.{kind}", prefixed=prefixed)
        for theirs, ours, prefixed in head
        for kind in ("weight", "bias")
    ]
    used = {rule.checkpoint for rule in rules}
    return KeyMap(tuple(rules), encoder.ignored - used, encoder.prefixes)


__all__ = [
    "SUFFIX",
    "ClassificationHead",
    "DecoderClassifier",
    "SequenceClassifier",
    "classifier_keymap",
    "classifies",
    "is_classifier",
    "num_labels",
]
