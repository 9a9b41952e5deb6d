"""Batch inference with Ray Data: a callable class for ``Dataset.map_batches``.

:class:`ModelBatchMapper` loads its model once, when Ray builds the actor, with
``weight_residency="borrowed"`` unless told otherwise, so every actor on a node serves the same
mapped checkpoint and the node holds one copy of the weights. Each batch (a dict of numpy
arrays, Ray's ``batch_format="numpy"``) comes back with every column it had plus one output
column. How many actors run and how many rows a batch holds stay Ray's own arguments
(``concurrency``, ``batch_size``, ``num_cpus``, ...), passed to ``map_batches`` as usual.

What a batch maps to depends on the kind of model (:mod:`packrt_ray.model`):

=================== ================ ============== =======================================
kind                input column     output column  one output row
=================== ================ ============== =======================================
sentence-encoder    ``text``         ``embedding``  (dimension,) float32, unit norm
encoder (bert)      ``input_ids``    ``hidden``     (seq, hidden) float32, last hidden state
causal-lm           ``input_ids``    ``logits``     (seq, vocab) float32
=================== ================ ============== =======================================

Token ids come as a 2-D integer column (every row the same length) or as rows of different
lengths. Rows of different lengths are padded on the right for the call (with an attention mask)
and each output row is cut back to its own length, so a row's output does not depend on the other
rows of its batch. :func:`map_model` checks the directory in the driver and calls ``map_batches``
with this class, keeping the rows' order unless told ``preserve_order=False``. Used directly with
``map_batches``, the class keeps each batch's rows in order, but Ray Data returns batches in the
order actors finish them unless the dataset's context sets ``execution_options.preserve_order``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

import packrt
from packrt.errors import DTypeError
from packrt_ray.memory import WeightMemory
from packrt_ray.model import BatchColumnError, LoadedModel, ModelKind, ModelSource, load

if TYPE_CHECKING:
    from ray.data import Dataset

INPUT_COLUMNS: dict[ModelKind, str] = {"sentence-encoder": "text", "encoder": "input_ids", "causal-lm": "input_ids"}
OUTPUT_COLUMNS: dict[ModelKind, str] = {"sentence-encoder": "embedding", "encoder": "hidden", "causal-lm": "logits"}


def _texts(column: np.ndarray[Any, Any], name: str) -> list[str]:
    texts: list[str] = column.tolist()
    bad = next((t for t in texts if not isinstance(t, str)), None)
    if bad is not None:
        raise DTypeError(
            f"column {name!r} holds a {type(bad).__name__} ({bad!r}), expected a string per row: a sentence encoder "
            "embeds texts; convert the column to strings, or point input_column at the text column"
        )
    return texts


def _token_rows(column: np.ndarray[Any, Any], name: str) -> list[np.ndarray[Any, Any]]:
    """Each row of ``column`` as a 1-D int64 array (DTypeError naming the column otherwise)."""
    if column.dtype != object and column.ndim == 1:  # one id per row: a column of scalars, not of lists
        raise DTypeError(
            f"column {name!r} holds one {column.dtype} value per row, expected a list of token ids per row; "
            "point input_column at the token-id column"
        )
    rows = list(column)
    out = []
    for i, row in enumerate(rows):
        array = np.asarray(row)
        if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
            raise DTypeError(
                f"column {name!r} row {i} holds {array.dtype} values of shape {array.shape}, expected a 1-D list of "
                "integer token ids; tokenize the text first, or point input_column at the token-id column"
            )
        if array.size == 0:
            raise DTypeError(f"column {name!r} row {i} is empty; every row needs at least one token id")
        out.append(array.astype(np.int64, copy=False))
    return out


def _padded(rows: list[np.ndarray[Any, Any]]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], list[int]]:
    lengths = [len(r) for r in rows]
    longest = max(lengths)
    ids = np.zeros((len(rows), longest), dtype=np.int64)
    mask = np.zeros((len(rows), longest), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask, lengths


class ModelBatchMapper:
    """A ``map_batches`` callable class: one packrt model per actor, batches to embeddings or logits.

    Args:
        model_dir: a model directory, or a :class:`~packrt_ray.model.ModelSource` already resolved.
            Every node running an actor must read the same files at this path.
        weight_residency: how the actor keeps the weights (``"borrowed"``: the mapped checkpoint is
            the only copy, shared by every actor of the node through the page cache). Ignored when
            ``model_dir`` is a ModelSource (it carries its own).
        input_column: the column read (default by kind: ``text`` or ``input_ids``).
        output_column: the column added (default by kind: ``embedding``, ``hidden`` or ``logits``).
        normalize: sentence encoders only: unit-length embeddings when True, as they come when False; None
            (the default): as the directory's modules.json says (a Normalize step), as sentence-transformers
            and ``SentenceEncoder.encode`` give them.

    A batch without ``input_column`` raises :class:`~packrt_ray.model.BatchColumnError` naming the
    columns it has; values of the wrong kind raise :class:`~packrt.errors.DTypeError`.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | ModelSource,
        *,
        weight_residency: str = "borrowed",
        input_column: str | None = None,
        output_column: str | None = None,
        normalize: bool | None = None,
    ) -> None:
        source = (
            model_dir
            if isinstance(model_dir, ModelSource)
            else ModelSource.resolve(model_dir, weight_residency=weight_residency)
        )
        self.input_column = input_column or INPUT_COLUMNS[source.kind]
        self.output_column = output_column or OUTPUT_COLUMNS[source.kind]
        self.normalize = normalize
        self.loaded: LoadedModel = load(source)

    @property
    def source(self) -> ModelSource:
        """The directory, kind and residency this actor loaded."""
        return self.loaded.source

    def __call__(self, batch: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
        """``batch`` with the output column added (every input column kept, rows in their order)."""
        if self.input_column not in batch:
            raise BatchColumnError(
                f"the batch has no column {self.input_column!r} (its columns: {sorted(batch)}); the "
                f"{self.source.kind} at {self.source.path!r} reads {self.input_column!r}: pass "
                "input_column=<the column that holds the "
                f"{'texts' if self.source.kind == 'sentence-encoder' else 'token ids'}>"
            )
        column = np.asarray(batch[self.input_column])
        out = dict(batch)
        out[self.output_column] = self._map(column)
        return out

    def _map(self, column: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if self.source.kind == "sentence-encoder":
            texts = _texts(column, self.input_column)
            encoder = self.loaded.sentence_encoder
            # normalize None: the encoder's own default (the directory's Normalize step)
            vectors: np.ndarray[Any, Any] = encoder.encode(
                texts, batch_size=max(len(texts), 1), normalize=self.normalize
            )
            return vectors
        rows = _token_rows(column, self.input_column)
        if not rows:
            return np.zeros((0,), dtype=np.float32)
        ids, mask, lengths = _padded(rows)
        ragged = len(set(lengths)) > 1
        inputs = [packrt.from_numpy(ids)]
        if ragged:
            inputs.append(packrt.from_numpy(mask))
        result = np.asarray(self.loaded.model(*inputs).numpy(), dtype=np.float32)
        if not ragged:
            return result
        trimmed = np.empty(len(rows), dtype=object)  # Ray stores rows of different shapes as a ragged tensor
        for i, length in enumerate(lengths):
            trimmed[i] = result[i, :length]
        return trimmed

    def memory(self) -> WeightMemory:
        """What this actor's weights cost its process (see :class:`~packrt_ray.memory.WeightMemory`)."""
        return self.loaded.memory()


def map_model(
    dataset: Dataset,
    model_dir: str | os.PathLike[str],
    *,
    weight_residency: str = "borrowed",
    input_column: str | None = None,
    output_column: str | None = None,
    normalize: bool | None = None,
    preserve_order: bool = True,
    **map_batches_args: Any,
) -> Dataset:
    """``dataset.map_batches(ModelBatchMapper, ...)`` after checking the directory here, in the driver.

    Rows come back in the input's order by default: ``preserve_order=True`` sets Ray Data's
    ``execution_options.preserve_order`` on the dataset's ``DataContext`` (which Ray shares with the
    datasets this one derives from), since Ray Data otherwise yields blocks as actors finish them.
    ``preserve_order=False`` leaves the context as it is: faster when actors finish unevenly, and
    rows may then come back in any order (keep an id column to join on).

    ``map_batches_args`` go to ``map_batches`` untouched (``concurrency``, ``batch_size``,
    ``num_cpus``, ``num_gpus``, ...); ``batch_format`` defaults to ``"numpy"``, the format the
    mapper takes. When the dataset's schema is known without running it, a missing input column
    raises :class:`~packrt_ray.model.BatchColumnError` here; otherwise the first batch does.
    """
    source = ModelSource.resolve(model_dir, weight_residency=weight_residency)
    column = input_column or INPUT_COLUMNS[source.kind]
    schema = dataset.schema(fetch_if_missing=False)
    if schema is not None and column not in schema.names:
        raise BatchColumnError(
            f"the dataset has no column {column!r} (its columns: {sorted(schema.names)}); the {source.kind} at "
            f"{source.path!r} reads {column!r}: pass input_column=<the column to read>"
        )
    map_batches_args.setdefault("batch_format", "numpy")
    constructor = {"input_column": input_column, "output_column": output_column, "normalize": normalize}
    mapped = dataset.map_batches(
        ModelBatchMapper,
        fn_constructor_args=(source,),
        fn_constructor_kwargs=constructor,
        **map_batches_args,
    )
    if preserve_order:
        mapped.context.execution_options.preserve_order = True
    return mapped


__all__ = ["INPUT_COLUMNS", "OUTPUT_COLUMNS", "ModelBatchMapper", "map_model"]
