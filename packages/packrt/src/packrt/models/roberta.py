"""The ``roberta`` and ``xlm-roberta`` families: BERT's encoder with fairseq's position numbering.

The layers, the key names and the token types are BERT's (:mod:`packrt.models.bert`); what differs
is where positions come from. A RoBERTa position embedding table reserves its first
``padding_idx + 1`` rows: a real token's position is ``padding_idx + 1 + (number of real tokens
before it)``, a pad token (``input_ids == pad_token_id``) gets ``padding_idx`` itself. Positions are
therefore computed from the ids, not from ``attention_mask``, exactly as transformers'
``create_position_ids_from_input_ids`` does, so a padded batch (left or right) gives each row the
positions it would have alone. The longest sequence is ``max_position_embeddings - padding_idx - 1``
tokens (512 for the usual 514-row table).

Parameter names are :class:`~packrt.models.BertEncoder`'s; the checkpoint's ``pooler`` and
``embeddings.position_ids`` / ``token_type_ids`` buffers are left unused. The ``...ForSequenceClassification``
architectures (bge-reranker and its kind) put the encoder under a
:class:`~packrt.models.classifier.SequenceClassifier`, whose head reads ``classifier.dense`` and
``classifier.out_proj``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import packrt
from packrt import nn
from packrt.errors import ShapeError
from packrt.models.bert import bert_keymap, encoder_config
from packrt.models.classifier import SequenceClassifier, classifier_keymap, is_classifier, num_labels
from packrt.models.config_schema import completed
from packrt.models.encoder import BertEncoder, EncoderConfig, EncoderEmbeddings
from packrt.models.hfconfig import HFConfig
from packrt.models.keymap import Family, KeyMap


@dataclass(frozen=True)
class RobertaConfig(EncoderConfig):
    """:class:`EncoderConfig` plus the pad id whose row of the position table is reserved."""

    padding_idx: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.padding_idx < 0 or self.padding_idx + 1 >= self.max_positions:
            raise ValueError(
                f"RobertaConfig.padding_idx must be in [0, max_positions - 1) = [0, {self.max_positions - 1}), "
                f"got {self.padding_idx!r}"
            )


def roberta_positions(input_ids: packrt.Tensor, padding_idx: int) -> packrt.Tensor:
    """(batch, seq) int64 positions: ``padding_idx + 1 + rank among real tokens``, pads at ``padding_idx``.

    The running count of real tokens is a product with an upper-triangular ones matrix (the public
    API has no cumsum); it is exact in float32 for any sequence a position table can hold.
    """
    _, seq = input_ids.shape
    real = (input_ids != padding_idx).to(packrt.float32)
    index = packrt.arange(seq, device=input_ids.device)
    upper = (index.unsqueeze(1) <= index.unsqueeze(0)).to(packrt.float32)  # upper[k, j] = k <= j
    counts = (real @ upper) * real
    out: packrt.Tensor = counts.to(packrt.int64) + padding_idx
    return out


class RobertaEmbeddings(EncoderEmbeddings):
    """Token, token-type and position (numbered as the module docstring says) embeddings, then LayerNorm."""

    owner: ClassVar[str] = "RobertaEncoder"

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        self.padding_idx = config.padding_idx

    def position_ids(self, input_ids: packrt.Tensor) -> packrt.Tensor:
        """(batch, seq) positions numbered around the pad id (see :func:`roberta_positions`)."""
        return roberta_positions(input_ids, self.padding_idx)


class RobertaEncoder(BertEncoder):
    """A RoBERTa / XLM-RoBERTa encoder returning the last hidden state (batch, seq, hidden).

    Called as :class:`~packrt.models.BertEncoder` is (``input_ids, attention_mask, token_type_ids``);
    pass the tokenizer's ``attention_mask`` for padded batches. Sequences may be at most
    ``max_positions - padding_idx - 1`` tokens long.
    """

    def __init__(self, config: RobertaConfig) -> None:
        super().__init__(config)
        self.embeddings = RobertaEmbeddings(config)

    def _check_ids(self, input_ids: packrt.Tensor) -> tuple[int, int]:
        config = self.config
        assert isinstance(config, RobertaConfig)
        longest = config.max_positions - config.padding_idx - 1
        if isinstance(input_ids, packrt.Tensor) and input_ids.ndim == 2 and input_ids.shape[1] > longest:
            raise ShapeError(
                f"RobertaEncoder: a sequence of {input_ids.shape[1]} tokens is longer than the {longest} positions "
                f"the table holds (max_positions={config.max_positions} less padding_idx + 1); truncate the input"
            )
        return super()._check_ids(input_ids)


def roberta_config(config: HFConfig) -> RobertaConfig:
    """The :class:`RobertaConfig` a roberta / xlm-roberta config.json describes (BERT's fields plus pad id)."""
    base = encoder_config(config)
    padding_idx = completed(config).get("pad_token_id")
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, int) or padding_idx < 0:
        raise config.error("pad_token_id", f"is {padding_idx!r}, expected a token id (an int >= 0)")
    if padding_idx + 1 >= base.max_positions:
        raise config.error(
            "pad_token_id",
            f"is {padding_idx}, but RoBERTa positions start at pad_token_id + 1, which leaves no row of the "
            f"{base.max_positions}-row position table (max_position_embeddings)",
        )
    fields = {name: getattr(base, name) for name in EncoderConfig.__dataclass_fields__}
    return RobertaConfig(**fields, padding_idx=padding_idx)


def roberta_keymap(config: HFConfig) -> KeyMap:
    """BERT's table with RoBERTa's prefix, also ignoring the non-persistent ``token_type_ids`` buffer."""
    base = bert_keymap(config.with_values({"architectures": []}))  # the encoder's rows; the head is RoBERTa's own
    table = KeyMap(base.rules, base.ignored | {"embeddings.token_type_ids"}, prefixes=("roberta.",))
    if is_classifier(config):  # RoBERTa's classification head, stored unprefixed (no pooler)
        return classifier_keymap(
            table, (("classifier.dense", "dense", False), ("classifier.out_proj", "out_proj", False))
        )
    return table


def _build(config: HFConfig) -> nn.Module:
    encoder = RobertaEncoder(roberta_config(config))
    return SequenceClassifier(encoder, num_labels(config)) if is_classifier(config) else encoder


FAMILY = Family(
    name="roberta",
    model_types=("roberta",),
    architectures=("RobertaModel", "RobertaForSequenceClassification"),
    build=_build,
    keymap=roberta_keymap,
    kind="encoder",
)
XLM_FAMILY = replace(
    FAMILY,
    name="xlm-roberta",
    model_types=("xlm-roberta",),
    architectures=("XLMRobertaModel", "XLMRobertaForSequenceClassification"),
)

__all__ = [
    "FAMILY",
    "XLM_FAMILY",
    "RobertaConfig",
    "RobertaEmbeddings",
    "RobertaEncoder",
    "roberta_config",
    "roberta_keymap",
    "roberta_positions",
]
