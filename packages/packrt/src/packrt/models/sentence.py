"""Sentence embeddings from a sentence-transformers directory (all-MiniLM-L6-v2 and its kind).

:meth:`SentenceEncoder.from_pretrained` reads the directory the way sentence-transformers does:
``modules.json`` lists the steps (a Transformer, a Pooling, any Dense steps, optionally a Normalize),
``sentence_bert_config.json`` gives ``max_seq_length``, ``1_Pooling/config.json`` the pooling
modes, each ``Dense`` folder a projection, and ``config_sentence_transformers.json`` the prompts.
Text is tokenized by the ``tokenizers`` library from ``tokenizer.json`` (truncated to
``max_seq_length``, padded to the longest text of each batch), and the transformer is loaded by
:func:`packrt.models.from_pretrained`, so ``weight_residency="borrowed"`` serves it from the
mapped file. :meth:`SentenceEncoder.encode` then gives the vectors sentence-transformers gives:
the configured pooling modes (concatenated in its order), the Dense steps, and L2 normalization
where the directory has a Normalize step.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Encoding, Tokenizer

import packrt
from packrt import nn
from packrt.errors import CheckpointError, PackrtError
from packrt.models.devices import host, model_device, placed
from packrt.models.embedding_quantization import PRECISIONS, Precision, quantize_embeddings
from packrt.models.generation import CausalLM
from packrt.models.gguf_tokenizer import read_tokenizer_json
from packrt.models.hfconfig import read_json
from packrt.models.kinds import POOLING_MODES, DenseStep, Pipeline
from packrt.models.length_groups import length_groups
from packrt.models.pretrained import from_pretrained
from packrt_core.publication import reading
from packrt_io import load_arrays


class TextTypeError(PackrtError, TypeError):
    """``texts`` for :meth:`SentenceEncoder.encode` / ``tokenize`` is not a list (or iterable) of str."""


class BatchSizeError(PackrtError, ValueError):
    """``batch_size`` for :meth:`SentenceEncoder.encode` is not a positive int."""


class EncodeArgumentError(PackrtError, ValueError):
    """A keyword of :meth:`SentenceEncoder.encode` with a value it does not take (named in the message)."""


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
    """A tokenizer, a transformer and the pooling of a sentence-transformers model: a BERT-family encoder (bert,
    roberta, xlm-roberta), or a decoder's last hidden states (Qwen3-Embedding: a qwen3 base model, last-token
    pooling).

    Build it with :meth:`from_pretrained`; ``encode(texts)`` returns (len(texts), dimension)
    float32 vectors. ``model`` is the packrt encoder, ``tokenizer`` the ``tokenizers.Tokenizer``.
    """

    def __init__(self, model: nn.Module, tokenizer: Tokenizer, pipeline: Pipeline, dense: Sequence[Dense] = ()) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.pipeline = pipeline
        self.dense = tuple(dense)  # the pipeline's Dense steps with their weights, in order

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
        model = from_pretrained(
            pipeline.transformer, weight_residency=weight_residency, dtype=dtype, progress=progress, quantize=quantize
        )
        tokenizer = fitted_tokenizer(pipeline.transformer, model, pipeline.max_seq_length)
        return cls(model, tokenizer, pipeline, [Dense.load(step) for step in pipeline.dense])

    @property
    def dimension(self) -> int:
        """Length of one embedding: the last Dense step's width, else hidden size times the pooling modes."""
        if self.dense:
            return self.dense[-1].step.out_features
        config = getattr(self.model, "config", None)  # an encoder's config, or a decoder's own width
        hidden = int(getattr(config, "hidden", 0) or getattr(self.model, "hidden", 0))
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
        return padded(encodings, self.tokenizer, self.model)

    def embed(self, encodings: Sequence[Encoding], normalize: bool | None = None, prompt_tokens: int = 0) -> np.ndarray:
        """(len(encodings), dimension) float32 embeddings of texts already tokenized (see :meth:`batch`): what
        :meth:`encode` gives the same texts (``normalize`` as there; ``prompt_tokens``: how many leading tokens
        are a prompt, see :meth:`prompt_tokens`), in the order given. A server tokenizes each text once, counts
        its tokens from that encoding and batches the encodings of several requests through this call.

        Texts of similar length share a model call (:func:`~packrt.models.length_groups.length_groups`: the
        fewest padded tokens, counting each call's own cost), so a short text does not pay for a long one's
        padding; every call reads one version of the weights."""
        if not encodings:
            return np.empty((0, self.dimension), dtype=np.float32)
        unit = self.pipeline.normalize if normalize is None else normalize
        groups = length_groups([len(encoding.ids) for encoding in encodings])
        if len(groups) == 1:
            return self._embed(self.batch(encodings), unit, prompt_tokens)
        vectors = np.empty((len(encodings), self.dimension), dtype=np.float32)
        with reading():  # a load on another thread lands before the first group or after the last
            for group in groups:
                vectors[group] = self._embed(self.batch([encodings[i] for i in group]), unit, prompt_tokens)
        return vectors

    def prompt_tokens(self, prompt: str) -> int:
        """How many leading tokens ``prompt`` puts before a text, as sentence-transformers counts them for a
        pooling that leaves the prompt out (``include_prompt`` false): the prompt's tokens with the special
        ones around it, less a trailing special one. 0 when the pooling counts the prompt, or for no prompt."""
        if not prompt or self.pipeline.include_prompt:
            return 0
        encoding = self.tokenizer.encode(prompt)
        return len(encoding.ids) - int(bool(encoding.special_tokens_mask[-1]))

    def _hidden(self, batch: dict[str, packrt.Tensor]) -> tuple[np.ndarray, np.ndarray]:
        """The transformer's last hidden states (batch, tokens, width) float32 and the attention mask, on the host."""
        if isinstance(self.model, CausalLM):  # a decoder's last hidden states (causal, no token types)
            hidden = self.model.hidden_states(batch["input_ids"], batch["attention_mask"])
        else:
            hidden = self.model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        # pooled on the host: from another device the hidden state comes back with .cpu()
        return np.asarray(host(hidden), dtype=np.float32), host(batch["attention_mask"])

    def _embed(self, batch: dict[str, packrt.Tensor], normalize: bool, prompt_tokens: int = 0) -> np.ndarray:
        hidden, mask = self._hidden(batch)
        if prompt_tokens:
            mask = mask.copy()
            mask[:, :prompt_tokens] = 0  # right-padded rows: the prompt is their first tokens
        pooled = pool(self.pipeline.pooling, hidden, mask)
        for dense in self.dense:
            pooled = dense(pooled)
        return _unit(pooled) if normalize else pooled

    def encode(
        self,
        inputs: str | Iterable[str],
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        output_value: str = "sentence_embedding",
        precision: Precision = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | packrt.Device | None = None,
        normalize_embeddings: bool = False,
        truncate_dim: int | None = None,
        *,
        normalize: bool | None = None,
    ) -> Any:
        """Embeddings of ``inputs``, with sentence-transformers' ``encode`` signature and what each keyword gives
        there: a (len(inputs), dimension) float32 array, or one (dimension,) vector for a single str.

        - ``prompt`` (a text) or ``prompt_name`` (one of the directory's prompts) is put before every text;
          with neither, the directory's ``default_prompt_name`` when it has one (:meth:`Pipeline.prompt`).
          Where the pooling leaves the prompt out, its tokens are masked out of it.
        - ``output_value="token_embeddings"``: per text, the (tokens, width) hidden states of its tokens
          (padding dropped), as a list of arrays; ``"sentence_embedding"`` (the default) pools them.
        - ``precision``: ``"float32"``, or ``"int8"``, ``"uint8"``, ``"binary"``, ``"ubinary"`` as
          :func:`~packrt.models.embedding_quantization.quantize_embeddings` makes them (int8 ranges come from
          the call's own embeddings, so it needs two texts or more).
        - ``convert_to_tensor``: a packrt Tensor; ``convert_to_numpy=False`` (without it): a list of per-text
          Tensors.
        - ``truncate_dim``: the first ``truncate_dim`` dimensions (Matryoshka), cut after the directory's own
          Normalize step and before ``normalize_embeddings``, which makes every vector unit length.
        - ``normalize`` (packrt's own): True or False overrides the directory's Normalize step (None: as the
          directory says).
        - ``device``: where the model is (``model.to(...)`` moves it); another device is refused.
          ``show_progress_bar``: a tqdm bar over the batches, where tqdm is installed.

        ``inputs`` is a str or any iterable of str (a generator is read once); bytes, or an entry that is not a
        str (None, a number), is a :class:`TextTypeError` (a ``TypeError``) naming its index, raised before any
        text is encoded; a bad keyword value an :class:`EncodeArgumentError` (a ``ValueError``) naming it.
        Texts are batched longest first (less padding), ``batch_size`` at a time, and returned in the order
        given. Padding never changes a text's vector: it is masked out of attention and pooling. Every batch of
        one call reads one version of the weights: a load on another thread lands before the call or after it.
        """
        single = isinstance(inputs, str)
        items = as_texts([inputs] if isinstance(inputs, str) else inputs, "SentenceEncoder.encode")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise BatchSizeError(f"SentenceEncoder.encode: batch_size must be a positive int, got {batch_size!r}")
        self._check_keywords(output_value, precision, device, truncate_dim)
        before = self.pipeline.prompt(prompt_name, prompt)
        skipped = self.prompt_tokens(before)
        items = [before + item for item in items] if before else items
        order = sorted(range(len(items)), key=lambda i: -len(items[i]))
        unit = self.pipeline.normalize if normalize is None else normalize
        pooled = output_value == "sentence_embedding"
        width = min(self.dimension, truncate_dim or self.dimension)
        vectors = np.empty((len(items), width), dtype=np.float32)
        tokens: list[np.ndarray] = [np.empty((0, 0), dtype=np.float32)] * len(items)
        starts = range(0, len(order), batch_size)
        with reading():  # every batch of the call from one version of the weights: a load lands before or after
            for begin in with_progress(starts, show_progress_bar):
                chosen = order[begin : begin + batch_size]
                batch = self.tokenize([items[i] for i in chosen])
                if pooled:
                    found = self._embed(batch, unit, skipped)[:, :width]
                    vectors[chosen] = _unit(found) if normalize_embeddings else found
                else:
                    hidden, mask = self._hidden(batch)
                    for row, index in enumerate(chosen):
                        tokens[index] = hidden[row][mask[row] != 0]
        if not pooled:
            return tokens if precision == "float32" else quantize_embeddings(tokens, precision)
        result = vectors if precision == "float32" or not items else quantize_embeddings(vectors, precision)
        if convert_to_tensor:
            shaped: Any = packrt.from_numpy(np.ascontiguousarray(result))
        elif convert_to_numpy:
            shaped = result
        else:
            shaped = [packrt.from_numpy(np.ascontiguousarray(row)) for row in result]
        return shaped[0] if single else shaped

    def _check_keywords(
        self, output_value: str, precision: str, device: str | packrt.Device | None, truncate_dim: int | None
    ) -> None:
        if output_value not in ("sentence_embedding", "token_embeddings"):
            raise EncodeArgumentError(
                f"SentenceEncoder.encode: output_value {output_value!r} is not one packrt gives; pass "
                "'sentence_embedding' (pooled vectors) or 'token_embeddings' (each text's token states)"
            )
        if precision not in PRECISIONS:
            raise EncodeArgumentError(
                f"SentenceEncoder.encode: precision {precision!r} is not one of {', '.join(PRECISIONS)}"
            )
        if truncate_dim is not None and (
            isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) or truncate_dim <= 0
        ):
            raise EncodeArgumentError(
                f"SentenceEncoder.encode: truncate_dim must be a positive int or None, got {truncate_dim!r}"
            )
        check_device(self.model, device, "SentenceEncoder.encode")


def check_device(model: nn.Module, device: str | packrt.Device | None, where: str) -> None:
    """An :class:`EncodeArgumentError` when ``device`` is given and is not where ``model`` is: a call runs the
    model where it is, and moving it is the caller's step (``model.to(...)``)."""
    if device is None:
        return
    here = model_device(model)
    if packrt.Device(device) != here:
        raise EncodeArgumentError(
            f"{where}: device {str(device)!r}, but the model is on {here}; move it first "
            f"(.model.to({str(device)!r})) or leave device=None"
        )


def padded(encodings: Sequence[Encoding], tokenizer: Tokenizer, model: nn.Module) -> dict[str, packrt.Tensor]:
    """``input_ids``, ``attention_mask``, ``token_type_ids`` (len(encodings), longest) int64 of encodings already
    made (a text, or a pair as one input): each row padded on the right to the longest with ``tokenizer``'s pad
    id and pad type id, masked out; on ``model``'s device (a model moved elsewhere reads them there)."""
    padding = tokenizer.padding or {}
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
    device = model_device(model)
    return {name: placed(rows, device) for name, rows in fields.items()}


def fitted_tokenizer(directory: Path, model: nn.Module, max_seq_length: int | None) -> Tokenizer:
    """``directory``'s tokenizer.json set up for ``model``: truncated to ``max_seq_length`` (else to
    tokenizer_config.json's ``model_max_length``, where sentence-transformers 6 saves a CrossEncoder's) and to
    the positions the model holds (a RoBERTa table less its reserved rows; a decoder's configured bound);
    padded to the longest input of a batch with the model's pad id (a RoBERTa model numbers positions
    around it)."""
    tokenizer = read_tokenizer_json(directory / "tokenizer.json")
    config = getattr(model, "config", None)
    decoder = getattr(model, "decoder", model)  # a decoder's classifier reads the decoder's positions
    if isinstance(decoder, CausalLM):  # a decoder embedding model (Qwen3-Embedding): its configured positions
        positions = decoder.positions_bound or max_seq_length or 512
    else:
        positions = int(getattr(config, "max_positions", 512))
    reserved = getattr(config, "padding_idx", None)  # RoBERTa: the table's first padding_idx + 1 rows
    if reserved is not None:
        positions -= int(reserved) + 1
    bound = max_seq_length or _model_max_length(directory) or positions
    tokenizer.enable_truncation(max_length=int(min(bound, positions)))  # a pair: the longer text cut first
    padding = tokenizer.padding or {}
    pad_token = str(padding.get("pad_token", "[PAD]"))
    pad_id = tokenizer.token_to_id(pad_token)
    if reserved is not None and (pad_id is None or "pad_token" not in padding):
        # the model numbers positions around its own pad id, so padding must use that id
        pad_id, pad_token = int(reserved), tokenizer.id_to_token(int(reserved)) or pad_token
    tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token=pad_token)  # to the longest
    return tokenizer


def _model_max_length(directory: Path) -> int | None:
    """tokenizer_config.json's ``model_max_length`` (None: no file, no field, or not a positive number)."""
    try:
        config = read_json(directory / "tokenizer_config.json")
    except FileNotFoundError:
        return None
    value = config.get("model_max_length") if isinstance(config, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1:
        return None
    return int(min(value, 1 << 40))  # transformers writes 1e30 for "no bound"


def _unit(rows: np.ndarray) -> np.ndarray:
    """Each row scaled to unit L2 norm (a zero row stays zero)."""
    scaled: np.ndarray = rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), np.float32(1e-12))
    return scaled


def with_progress(starts: range, show: bool | None) -> Iterable[int]:
    """The batches' starts, behind a tqdm bar when asked and tqdm is installed (packrt's progress extra)."""
    if not show:
        return starts
    try:
        tqdm_module = importlib.import_module("tqdm")
    except ImportError:
        return starts
    bar: Iterable[int] = tqdm_module.tqdm(starts, desc="Batches")
    return bar


def pool(modes: Sequence[str], hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(batch, width * len(modes)) the pooled ``hidden`` (batch, tokens, width) over the tokens ``mask`` keeps,
    each mode as sentence-transformers' Pooling computes it, concatenated in the order given."""
    kept = mask[:, :, None].astype(hidden.dtype)
    counts = np.maximum(kept.sum(axis=1), np.float32(1e-9))
    first = mask.argmax(axis=1)  # the first token kept: 0 unless the rows are padded on the left
    rows = np.arange(hidden.shape[0])
    parts = []
    for mode in modes:
        if mode == "cls_token":
            parts.append(hidden[rows, first])
        elif mode == "max_tokens":
            parts.append(np.where(kept > 0, hidden, np.float32(-np.inf)).max(axis=1))
        elif mode == "mean_tokens":
            parts.append((hidden * kept).sum(axis=1) / counts)
        elif mode == "mean_sqrt_len_tokens":
            parts.append((hidden * kept).sum(axis=1) / np.sqrt(counts))
        elif mode == "weightedmean_tokens":  # position weights 1, 2, ... from the first token kept
            positions = np.arange(1, hidden.shape[1] + 1, dtype=hidden.dtype)[None, :] - first[:, None]
            weights = kept * positions[:, :, None]
            parts.append((hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), np.float32(1e-9)))
        else:  # lasttoken: the last token kept (zeros for a row that keeps none)
            last = hidden.shape[1] - 1 - mask[:, ::-1].argmax(axis=1)
            parts.append(hidden[rows, last] * kept[rows, last])
    return np.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "identity": lambda x: x,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, np.float32(0)),
    "sigmoid": lambda x: np.float32(1) / (np.float32(1) + np.exp(-x)),
    "silu": lambda x: x / (np.float32(1) + np.exp(-x)),
    "gelu": lambda x: nn.functional.gelu(packrt.from_numpy(np.ascontiguousarray(x))).numpy(),  # exact, as torch's
}


class Dense:
    """A Dense step with its weights: ``activation(x @ weight.T + bias)`` (plus ``x`` with ``use_residual``)."""

    def __init__(self, step: DenseStep, weight: np.ndarray, bias: np.ndarray | None) -> None:
        self.step, self.weight, self.bias = step, weight, bias

    @classmethod
    def load(cls, step: DenseStep) -> Dense:
        """The step's weights from its folder's model.safetensors, checked against its config's sizes."""
        path = step.path / "model.safetensors"
        if not path.is_file():
            older = step.path / "pytorch_model.bin"
            fix = "save it again with sentence-transformers 3 or later" if older.exists() else "the folder lacks it"
            raise CheckpointError(f"{str(path)!r}: a Dense step's weights are read from model.safetensors; {fix}")
        arrays, _ = load_arrays(path, mmap=False)
        shapes: dict[str, tuple[int, ...]] = {"linear.weight": (step.out_features, step.in_features)}
        if step.bias:
            shapes["linear.bias"] = (step.out_features,)
        for key, shape in shapes.items():
            found = arrays.get(key)
            if found is None or found.shape != shape:
                actual = "missing" if found is None else f"shape {found.shape}"
                raise CheckpointError(
                    f"{str(path)!r}: tensor {key!r} is {actual}, expected shape {shape} from "
                    f"{str(step.path / 'config.json')!r}"
                )
        weight = np.ascontiguousarray(arrays["linear.weight"], dtype=np.float32)
        bias = np.asarray(arrays["linear.bias"], dtype=np.float32) if step.bias else None
        return cls(step, weight, bias)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        out = x @ self.weight.T
        if self.bias is not None:
            out = out + self.bias
        out = ACTIVATIONS[self.step.activation](out)
        if self.step.residual:
            out = out + x
        return np.asarray(out, dtype=np.float32)


__all__ = [
    "POOLING_MODES",
    "BatchSizeError",
    "Dense",
    "EncodeArgumentError",
    "Pipeline",
    "SentenceEncoder",
    "TextTypeError",
    "ACTIVATIONS",
    "as_texts",
    "check_device",
    "fitted_tokenizer",
    "padded",
    "pool",
    "with_progress",
]
