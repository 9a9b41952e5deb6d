"""The ``bert`` family: transformers' ``BertModel`` served by :class:`packrt.models.BertEncoder`.

The model returns the last hidden state (batch, seq, hidden), with absolute positions, token
types and ``attention_mask`` (1 for tokens, 0 for padding), as ``BertModel(...).last_hidden_state``.
The pooler (``pooler.dense``, a tanh layer over the first token) is not part of that output, so its
tensors and the ``embeddings.position_ids`` buffer are expected in a checkpoint and left unused.
Sentence-transformers models such as all-MiniLM-L6-v2 are this family plus a pooling step
(:class:`packrt.models.SentenceEncoder`). ``BertForSequenceClassification`` (cross-encoder rerankers such as
ms-marco MiniLM) is the same encoder under a :class:`~packrt.models.classifier.SequenceClassifier`, whose
head reads the pooler and the classifier.
"""

from __future__ import annotations

from packrt import nn
from packrt.models.classifier import SequenceClassifier, classifier_keymap, is_classifier, num_labels
from packrt.models.config_schema import completed
from packrt.models.encoder import BertEncoder, EncoderConfig
from packrt.models.hfconfig import HFConfig
from packrt.models.keymap import Family, KeyMap, Rule


def encoder_config(config: HFConfig) -> EncoderConfig:
    """The :class:`EncoderConfig` a BERT config.json describes, its schema's defaults filled in (the schema
    holds the rules too: exact GELU, absolute positions, heads dividing the width)."""
    config = completed(config)
    return EncoderConfig(
        vocab=config.integer("vocab_size"),
        hidden=config.integer("hidden_size"),
        heads=config.integer("num_attention_heads"),
        layers=config.integer("num_hidden_layers"),
        intermediate=config.integer("intermediate_size"),
        max_positions=config.integer("max_position_embeddings"),
        type_vocab=config.integer("type_vocab_size"),
        eps=config.number("layer_norm_eps"),
    )


_EMBEDDINGS = (
    ("word_embeddings", "word"),
    ("position_embeddings", "position"),
    ("token_type_embeddings", "token_type"),
)
_LAYER = (  # (transformers' module under encoder.layer.{i}, packrt's under layers.{i})
    ("attention.self.query", "attention.q_proj"),
    ("attention.self.key", "attention.k_proj"),
    ("attention.self.value", "attention.v_proj"),
    ("attention.output.dense", "attention.o_proj"),
    ("attention.output.LayerNorm", "attention_norm"),
    ("intermediate.dense", "mlp.up"),
    ("output.dense", "mlp.down"),
    ("output.LayerNorm", "mlp_norm"),
)


def bert_keymap(config: HFConfig) -> KeyMap:
    """The table from transformers' names (``encoder.layer.0.attention.self.query.weight``) to packrt's."""
    rules = [Rule(f"embeddings.{theirs}.weight", f"embeddings.{ours}.weight") for theirs, ours in _EMBEDDINGS]
    rules += [Rule(f"embeddings.LayerNorm.{kind}", f"embeddings.norm.{kind}") for kind in ("weight", "bias")]
    rules += [
        Rule(f"encoder.layer.{{i}}.{theirs}.{kind}", f"layers.{{i}}.{ours}.{kind}")
        for theirs, ours in _LAYER
        for kind in ("weight", "bias")
    ]
    ignored = frozenset({"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"})
    table = KeyMap(tuple(rules), ignored, prefixes=("bert.",))
    if is_classifier(config):  # the pooler is the head's first Linear; the classifier, stored unprefixed, its last
        return classifier_keymap(table, (("pooler.dense", "dense", True), ("classifier", "out_proj", False)))
    return table


def _build(config: HFConfig) -> nn.Module:
    encoder = BertEncoder(encoder_config(config))
    return SequenceClassifier(encoder, num_labels(config)) if is_classifier(config) else encoder


FAMILY = Family(
    name="bert",
    model_types=("bert",),
    architectures=("BertModel", "BertForSequenceClassification"),
    build=_build,
    keymap=bert_keymap,
    kind="encoder",
)

__all__ = ["FAMILY", "bert_keymap", "encoder_config"]
