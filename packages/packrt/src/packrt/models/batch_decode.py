"""Several sequences decoded together: one forward per step over every sequence in flight (continuous batching).

:class:`BatchDecoder` holds the sequences of one causal LM. :meth:`~BatchDecoder.add` queues a sequence (its
prompt ids and its own sampling, length, eos ids and logits processor, checked at once); each
:meth:`~BatchDecoder.step` then

1. runs one batched forward of one token per sequence in the batch, and chooses each one's next token;
2. admits queued sequences (up to ``max_batch`` in all): each newcomer's prompt is run alone, with its own
   cache, which gives its first token; it joins the batch for the next step;
3. retires the sequences that finished (an eos id, ``max_new_tokens``) or that :meth:`~BatchDecoder.remove`
   took out, so they cost nothing after.

The rule a caller relies on: a sequence's tokens do not depend on the others in the batch. Its prompt runs
exactly as :meth:`~packrt.models.CausalLM.generate` runs it alone, and in the batched steps it attends over
its own keys only (the others' and the padding are masked out) at its own positions; greedy decoding gives
``generate``'s tokens for it alone, and a seeded sample draws from its own generator as ``generate`` does.

How the batch's cache is laid out: one :class:`~packrt.models.attention.KVCache` of one row per sequence, the
sequences right-aligned (each one's tokens end at the column the next step writes; its columns before its
first token are masked), as a left-padded batch is. When sequences join or leave, the rows that stay are
copied into a new cache laid out again, as short as the longest of them: a cache never holds a retired
sequence nor more columns than the sequences left need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

import packrt
from packrt import nn
from packrt.models.attention import KVCache, Step
from packrt.models.devices import model_device, placed
from packrt.models.generation import FROM_MODEL, CausalLM, FromModel
from packrt.models.hfconfig import UnsupportedModelError
from packrt.models.logits_processing import LogitsProcessor
from packrt.models.sampling import (
    GenerationArgumentError,
    GenerationArgumentTypeError,
    Sampling,
    check_sampling,
    is_int,
    sample_next,
)

Finish = Literal["stop", "length", "error"]


@dataclass(frozen=True)
class Emitted:
    """What one step gave a sequence: its next ``token`` and, when it ended there, why (``finish``): ``"stop"``
    (an eos id, included as the token), ``"length"`` (its ``max_new_tokens``) or ``"error"`` (the step failed
    for it: ``error`` is the exception, ``token`` None). A sequence asked for no new tokens ends at its first
    step with ``token`` None and ``"length"``."""

    sequence: int
    token: int | None
    finish: Finish | None = None
    error: BaseException | None = None


@dataclass(eq=False)
class _Sequence:
    """One sequence in flight: its prompt and rules, what it generated, and where its keys are cached
    (``cache`` row ``row``, its ``length`` positions from column ``begin``)."""

    ident: int
    prompt: np.ndarray
    max_new_tokens: int
    sampling: Sampling
    eos: tuple[int, ...]
    processor: LogitsProcessor | None
    rng: np.random.Generator
    generated: list[int] = field(default_factory=list)
    cache: KVCache | None = None
    row: int = 0
    begin: int = 0
    length: int = 0

    def choose(self, scores: np.ndarray) -> Emitted:
        """Its next token from its row of a step's ``scores`` (vocab,), recorded, and whether it ends there."""
        if self.processor is not None:
            scores = self.processor(np.asarray(self.generated, dtype=np.int64), scores)
        do_sample, temperature, top_k, top_p, _ = self.sampling
        if do_sample:
            token = int(sample_next(scores[None], self.rng, temperature, top_k, top_p)[0])
        else:
            token = int(scores.argmax())
        self.generated.append(token)
        finish: Finish | None = None
        if token in self.eos:
            finish = "stop"
        elif len(self.generated) >= self.max_new_tokens:
            finish = "length"
        return Emitted(self.ident, token, finish)


class _Group:
    """Sequences whose steps are one forward: their cache (one row each, right-aligned, see the module
    docstring) and the column their next step writes."""

    def __init__(self) -> None:
        self.sequences: list[_Sequence] = []  # in the rows of self.cache
        self.cache: KVCache | None = None
        self.column = 0
        self.changed = False  # a sequence left since the cache was laid out

    def lay_out(self, sequences: list[_Sequence], layers: int, device: packrt.Device) -> None:
        """A new cache for ``sequences``, each one's keys copied from where they are, as many columns as the
        longest of them holds plus the most tokens any may still feed."""
        self.changed, self.sequences = False, sequences
        if not sequences:
            self.cache, self.column = None, 0
            return
        column = max(each.length for each in sequences)
        room = max(each.max_new_tokens - len(each.generated) for each in sequences)
        cache = KVCache(layers, len(sequences), column + room, device)
        for layer in range(layers):
            _copy_layer(cache, layer, sequences, column)
        for row, each in enumerate(sequences):
            cache.key_mask_array[row, : column - each.length] = False
            each.cache, each.row, each.begin = cache, row, column - each.length
        cache.padded = bool(any(each.length < column for each in sequences))
        # on the CPU the mask tensor is a view of the array just written; elsewhere it is placed anew
        cache.key_mask = packrt.from_numpy(cache.key_mask_array).to(device)
        cache.length = column
        self.cache, self.column = cache, column


def exact_rows(model: CausalLM) -> int | None:
    """The most rows one decode forward of ``model`` may take while each row is computed bit for bit as it is
    alone, where the kernels say so; None where no bound is known (one forward takes every sequence).

    A GGUF model's block-quantized linears on the CPU multiply up to ``ROW_LOOP_ROWS`` rows (8) on the road a
    single row takes (activations quantized per row, integer dots, each row's sums in the same order on the
    one-row and the four-row tile); more rows go through the prefill GEMM, whose sums round otherwise."""
    if model_device(model).type != "cpu" or not any(isinstance(m, nn.BlockQuantizedLinear) for m in model.modules()):
        return None
    from packrt_kernels_cpu.blocks import ROW_LOOP_ROWS

    return int(ROW_LOOP_ROWS)


class BatchDecoder:
    """The sequences of ``model`` decoded together; see the module docstring for what a step does.

    ``max_batch``: the most sequences in flight; more wait, in the order they were added, until others finish.
    ``rows_per_forward``: the most sequences one forward takes (a step over more runs one forward per group of
    them); None: :func:`exact_rows`, else ``max_batch``. One thread owns a decoder: its methods are not safe to
    call from two threads at once.
    """

    def __init__(self, model: CausalLM, max_batch: int = 16, rows_per_forward: int | None = None) -> None:
        if not isinstance(model, CausalLM):
            raise GenerationArgumentTypeError(f"BatchDecoder decodes a CausalLM, got {type(model).__name__}")
        if model.bidirectional:
            raise UnsupportedModelError(
                f"{type(model).__name__} attends in both directions (an embedding model), so it has no next token to "
                "generate; take its hidden_states instead"
            )
        for name, value in (("max_batch", max_batch), ("rows_per_forward", rows_per_forward)):
            if value is not None and (not is_int(value) or value < 1):
                raise GenerationArgumentError(f"BatchDecoder: {name} must be an int >= 1, got {value!r}")
        self.model, self.max_batch = model, int(max_batch)
        rows = rows_per_forward if rows_per_forward is not None else exact_rows(model)
        self.rows_per_forward = min(int(rows), self.max_batch) if rows is not None else self.max_batch
        self._device = model_device(model)
        self._waiting: list[_Sequence] = []
        self._groups: list[_Group] = []
        self._next = 0

    @property
    def active(self) -> int:
        """Sequences in the batch (each gets a token at the next step)."""
        return sum(len(group.sequences) for group in self._groups)

    @property
    def waiting(self) -> int:
        """Sequences added and not yet admitted to the batch."""
        return len(self._waiting)

    def add(
        self,
        input_ids: Sequence[int] | np.ndarray,
        max_new_tokens: int | None = None,
        *,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        eos_token_id: int | Sequence[int] | Literal[FromModel.FROM_MODEL] | None = FROM_MODEL,
        logits_processor: LogitsProcessor | None = None,
    ) -> int:
        """Queue one sequence (its prompt's token ids, one row) and return its id, which the events of
        :meth:`step` carry. The arguments are :meth:`~packrt.models.CausalLM.generate`'s, checked here with
        its errors; ``logits_processor`` (see :mod:`packrt.models.logits_processing`) changes this sequence's
        scores at each of its steps before its token is chosen."""
        check_sampling(do_sample, temperature, top_k, top_p, seed)
        if logits_processor is not None and not callable(logits_processor):
            raise GenerationArgumentTypeError(
                f"BatchDecoder.add: logits_processor must be callable (generated ids, scores) -> scores, got "
                f"{type(logits_processor).__name__}"
            )
        prompt = np.asarray(input_ids)
        if prompt.ndim != 1 or not np.issubdtype(prompt.dtype, np.integer):
            raise GenerationArgumentTypeError(
                f"BatchDecoder.add: input_ids must be one sequence of integer token ids, got an array of shape "
                f"{prompt.shape} and dtype {prompt.dtype}; add each sequence with its own call"
            )
        prompt = prompt.astype(np.int64)
        new, eos = self.model.check_sequence(prompt, max_new_tokens, eos_token_id)
        sampling = Sampling(bool(do_sample), float(temperature), top_k, top_p, seed)
        ident, self._next = self._next, self._next + 1
        rng = np.random.default_rng(seed)
        self._waiting.append(_Sequence(ident, prompt, new, sampling, eos, logits_processor, rng))
        return ident

    def remove(self, sequence: int) -> bool:
        """Take ``sequence`` out (waiting or in the batch) before the next step; whether it was there (a
        sequence that finished has left already)."""
        for each in self._waiting:
            if each.ident == sequence:
                self._waiting.remove(each)
                return True
        for group in self._groups:
            for each in group.sequences:
                if each.ident == sequence:
                    group.sequences.remove(each)
                    group.changed = True
                    return True
        return False

    def step(self) -> list[Emitted]:
        """One step: a token for every sequence in the batch, then the first token of each sequence admitted
        (see the module docstring); the events in that order. A step that fails ends the sequences it computed
        for with ``finish`` ``"error"`` (the others go on), so one caller's bad sequence never ends the rest."""
        layers, device = self.model.num_layers, self._device
        events: list[Emitted] = []
        for group in self._groups:
            if group.changed:
                group.lay_out(group.sequences, layers, device)
            if group.sequences:
                events += self._decode(group)
        finished = {event.sequence for event in events if event.finish is not None}
        staying = {
            id(group): [each for each in group.sequences if each.ident not in finished] for group in self._groups
        }
        joined: dict[int, list[_Sequence]] = {id(group): [] for group in self._groups}
        room = self.max_batch - sum(len(kept) for kept in staying.values())
        while self._waiting and room > 0:
            newcomer = self._waiting.pop(0)
            event = self._prefill(newcomer)
            events.append(event)
            if event.finish is None:
                room -= 1
                self._group_with_room(staying, joined).append(newcomer)
        for group in self._groups:
            kept, new = staying[id(group)], joined[id(group)]
            if new or len(kept) != len(group.sequences):
                group.lay_out(kept + new, layers, device)
        self._groups = [group for group in self._groups if group.sequences]
        return events

    def _group_with_room(
        self, staying: dict[int, list[_Sequence]], joined: dict[int, list[_Sequence]]
    ) -> list[_Sequence]:
        """The list of newcomers of the first group with fewer than ``rows_per_forward`` sequences after this step
        (a new group when none has room)."""
        for group in self._groups:
            if len(staying[id(group)]) + len(joined[id(group)]) < self.rows_per_forward:
                return joined[id(group)]
        group = _Group()
        self._groups.append(group)
        staying[id(group)], joined[id(group)] = [], []
        return joined[id(group)]

    def _forward(self, ids: np.ndarray, step: Step, cache: KVCache, positions: np.ndarray | None) -> np.ndarray:
        """The scores (rows, vocab) of the last position of each row of ``ids``, as a step of ``generate``."""
        where = None if positions is None else placed(positions, self._device)
        return self.model.step_scores(placed(ids, self._device), step, cache, where)

    def _decode(self, group: _Group) -> list[Emitted]:
        """One forward of each of ``group``'s sequences' last token, at its own position (its tokens so far)."""
        sequences, cache, column = group.sequences, group.cache, group.column
        assert cache is not None, "a group with sequences has its cache laid out"
        ids = np.array([[each.generated[-1]] for each in sequences], dtype=np.int64)
        positions = np.array([[each.length] for each in sequences], dtype=np.int64)
        mask = cache.key_mask[:, : column + 1] if cache.padded else None
        try:
            scores = self._forward(ids, Step(column, 1, mask, self._device), cache, positions)
        except Exception as err:  # every sequence of the group shared the failed call
            return [Emitted(each.ident, None, "error", err) for each in sequences]
        group.column += 1
        for each in sequences:
            each.length += 1
        return [_chosen(each, scores[row]) for row, each in enumerate(sequences)]

    def _prefill(self, newcomer: _Sequence) -> Emitted:
        """``newcomer``'s prompt run alone, into a cache of its own; its first token."""
        if newcomer.max_new_tokens == 0:
            return Emitted(newcomer.ident, None, "length")
        length = len(newcomer.prompt)
        cache = KVCache(self.model.num_layers, 1, length, self._device)
        try:
            scores = self._forward(newcomer.prompt[None], Step(0, length, None, self._device), cache, None)
        except Exception as err:
            return Emitted(newcomer.ident, None, "error", err)
        newcomer.cache, newcomer.row, newcomer.begin, newcomer.length = cache, 0, 0, length
        return _chosen(newcomer, scores[0])


def _chosen(sequence: _Sequence, scores: np.ndarray) -> Emitted:
    """``sequence``'s next token; its own logits processor failing ends it alone (``"error"``)."""
    try:
        return sequence.choose(scores)
    except Exception as err:
        return Emitted(sequence.ident, None, "error", err)


def _copy_layer(cache: KVCache, layer: int, sequences: list[_Sequence], column: int) -> None:
    """Layer ``layer``'s keys and values of each of ``sequences`` into row ``i`` of ``cache``, ending at
    ``column``."""
    for target, source in ((cache.keys, "keys"), (cache.values, "values")):
        made: packrt.Tensor | None = None
        for row, each in enumerate(sequences):
            assert each.cache is not None, "a sequence in the batch has its keys cached"
            held = getattr(each.cache, source)[layer]
            assert held is not None, "a prefill writes every layer's keys"
            if made is None:
                _, heads, _, dim = held.shape
                made = packrt.zeros(len(sequences), heads, cache.capacity, dim, dtype=held.dtype, device=held.device)
            start, stop = each.begin, each.begin + each.length
            if made.device.type == "cpu" and held.device.type == "cpu":  # numpy views: no tensor op per row
                made.numpy()[row, :, column - each.length : column] = held.numpy()[each.row, :, start:stop]
            else:
                made[row : row + 1, :, column - each.length : column] = held[each.row : each.row + 1, :, start:stop]
        target[layer] = made


__all__ = ["BatchDecoder", "Emitted", "Finish", "exact_rows"]
