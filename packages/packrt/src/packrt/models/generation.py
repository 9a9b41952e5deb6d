"""Causal language models: the call that gives logits, and ``generate`` over a key/value cache.

:class:`CausalLM` is the base of the causal families (``gpt2``, ``llama``, ``qwen2``, ``mistral``).
A family implements ``_hidden`` (token ids to final hidden states for one :class:`Step`, reading
and filling a :class:`KVCache` when given one) and ``_logits``; the base class provides:

- ``model(input_ids, attention_mask=None, position_ids=None)``: logits (batch, seq, vocab), as
  transformers' ``...ForCausalLM`` returns them. ``attention_mask`` is (batch, seq), 1 for tokens
  and 0 for padding; positions default to ``0..seq-1`` whatever the padding, as in transformers.
- ``model.generate(input_ids, max_new_tokens, ...)``: the prompt plus the new tokens. The prompt
  runs once to fill the cache; each new token is then one GEMV-shaped step over the cached prefix.
  What is not passed (the eos and pad ids, the length) comes from the model's
  :class:`~packrt.models.generation_defaults.GenerationDefaults` (``generation_config.json``).
  Greedy decoding (``do_sample=False``) picks the argmax, which is transformers'
  ``generate(do_sample=False)`` token for token. With ``attention_mask`` (left padding), positions
  count real tokens only, as transformers' ``generate`` does.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

import numpy as np

import packrt
from packrt import nn
from packrt.errors import DTypeError, IndexingError, ShapeError
from packrt.models.attention import KVCache, Step
from packrt.models.devices import host, model_device, placed
from packrt.models.generation_defaults import GenerationDefaults
from packrt.models.hfconfig import UnsupportedModelError
from packrt.models.layers import check_attention_mask, check_ids
from packrt.models.sampling import (
    GenerationArgumentError,
    GenerationArgumentTypeError,
    Sampling,
    check_sampling,
    eos_ids,
    is_int,
    is_token,
    sample_next,
)
from packrt_core.publication import reading
from packrt_io import mapped_files


class FromModel(enum.Enum):
    """The default of ``generate``'s ``eos_token_id`` and ``pad_token_id``: the model's generation defaults."""

    FROM_MODEL = "the model's generation defaults"


FROM_MODEL: Literal[FromModel.FROM_MODEL] = FromModel.FROM_MODEL


def check_token_range(model: str, ids: np.ndarray, vocab: int) -> None:
    """IndexingError naming the first id of ``ids`` outside ``[0, vocab)``."""
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        bad = np.argwhere((ids < 0) | (ids >= vocab))[0]
        raise IndexingError(
            f"{model}: token id {int(ids[tuple(bad)])} at position {tuple(int(i) for i in bad)} is outside the "
            f"vocabulary [0, {vocab}); ids come from this model's tokenizer"
        )


def check_positions(model: str, positions: packrt.Tensor, max_positions: int | None) -> None:
    """Position ids are integers >= 0 (and below ``max_positions`` when the model has a table of them)."""
    if not np.issubdtype(positions.dtype.numpy, np.integer):
        raise DTypeError(f"{model}: position_ids must be integers, got {positions.dtype}")
    values = host(positions)
    if values.size and values.min() < 0:
        raise IndexingError(
            f"{model}: position_ids hold {int(values.min())}; positions count from 0 (a padded token sits at 0)"
        )
    if values.size and max_positions is not None and values.max() >= max_positions:
        raise IndexingError(
            f"{model}: position_ids hold {int(values.max())}, beyond the model's {max_positions} positions [0, "
            f"{max_positions})"
        )


def _padded_positions(cache: KVCache, attention_mask: packrt.Tensor, prompt: int) -> packrt.Tensor | None:
    """Mark the prompt's padding in ``cache``; with any padding, the position of every prompt and
    new token on the cache's device (real tokens counted only, padding at 0, as transformers'
    ``generate`` numbers them), else None (positions are then the plain ``0..``)."""
    batch, total = cache.batch, cache.capacity
    if tuple(attention_mask.shape) != (batch, prompt):
        raise ShapeError(f"generate: attention_mask has shape {attention_mask.shape}, expected {(batch, prompt)}")
    mask = host(attention_mask) != 0
    cache.set_padding(mask)
    if not cache.padded:
        return None
    counted = np.cumsum(mask, axis=-1) - 1
    counted[~mask] = 0
    grid = np.empty((batch, total), dtype=np.int64)
    grid[:, :prompt] = counted
    grid[:, prompt:] = counted[:, -1:] + np.arange(1, total - prompt + 1)
    return placed(grid, cache.device)


@dataclass
class _Run:
    """A checked generation: the token buffer (prompt, then room for the new tokens) and its cache."""

    tokens: np.ndarray
    prompt: int
    max_new_tokens: int
    device: packrt.Device
    cache: KVCache
    positions: packrt.Tensor | None
    eos: tuple[int, ...]
    filler: int
    sampling: Sampling


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _prepared_by(
    prepare: Callable[Concatenate[Any, _P], _Run],
) -> Callable[[Callable[[Any, _Run], _R]], Callable[Concatenate[Any, _P], _R]]:
    """A method that takes ``prepare``'s parameters, which are written once, there: ``generate`` and ``stream``
    accept the same arguments by construction. The body receives the checked run; ``help()`` and
    ``inspect.signature`` show the parameters, and a call that does not fit them is a TypeError naming them."""
    parameters = inspect.signature(prepare)

    def declare(body: Callable[[Any, _Run], _R]) -> Callable[Concatenate[Any, _P], _R]:
        @functools.wraps(body)
        def method(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                parameters.bind(self, *args, **kwargs)
            except TypeError as err:
                shown = str(parameters).replace("(self, ", "(", 1)
                raise TypeError(f"{type(self).__name__}.{body.__name__}: {err}; it takes {shown}") from err
            return body(self, prepare(self, *args, **kwargs))

        returns = inspect.signature(body).return_annotation
        method.__signature__ = parameters.replace(return_annotation=returns)  # type: ignore[attr-defined]
        return method

    return declare


class CausalLM(nn.Module):
    """Base class of the causal LM families; see the module docstring for the two calls it provides."""

    num_layers: int
    vocab: int
    # The longest sequence the model can place (learned position tables); None when unbounded.
    max_positions: int | None = None
    # The positions a rotary model is configured for (max_position_embeddings): explicit position_ids past them
    # are refused, where its rotary table would have grown to the largest (10**8: gigabytes); None: no bound.
    position_limit: int | None = None

    @property
    def positions_bound(self) -> int | None:
        """The most positions a call or a generation may use: the learned table's, else the rotary limit."""
        return self.max_positions if self.max_positions is not None else self.position_limit

    pad_token_id: int | None = None
    # every position attends to the whole sequence (an embedding model's use_bidirectional_attention): its forward
    # gives hidden states and logits, but it has no next token to generate
    bidirectional: bool = False
    model_type: str | None = None  # the config.json's, for a class that serves several families
    # generate's defaults; None: the model's own pad id and transformers' length default
    generation_defaults: GenerationDefaults | None = None

    def _hidden(
        self, input_ids: packrt.Tensor, step: Step, cache: KVCache | None, positions: packrt.Tensor | None
    ) -> packrt.Tensor:
        """The final hidden states of one step; each layer fuses itself when nothing observes its inner modules
        (:mod:`packrt.models.decoder_plan`)."""
        raise NotImplementedError

    def _logits(self, hidden: packrt.Tensor) -> packrt.Tensor:
        raise NotImplementedError

    def _rope_switch(self) -> int | None:
        """The sequence length past which the model's rotary frequencies change (LongRoPE's pretrained context),
        None when they never do: a generation that crosses it computes its cached keys again (see
        :meth:`_decode`)."""
        return None

    def _name(self) -> str:
        """How messages name the model: its class, and the config's ``model_type`` when the class serves several."""
        name = type(self).__name__
        return name if self.model_type is None else f"{name}({self.model_type})"

    def forward(
        self,
        input_ids: packrt.Tensor,
        attention_mask: packrt.Tensor | None = None,
        position_ids: packrt.Tensor | None = None,
        *,
        hidden: bool = False,
    ) -> packrt.Tensor:
        """(batch, seq, vocab) logits of every position (``attention_mask``: 0 marks padding); with ``hidden``
        the (batch, seq, hidden) final hidden states instead (see :meth:`hidden_states`)."""
        batch, seq = check_ids(self._name(), input_ids, self.max_positions)
        key_mask = None
        if attention_mask is not None:
            check_attention_mask(self._name(), attention_mask, batch, seq)
            keep = host(attention_mask) != 0
            key_mask = None if keep.all() else placed(keep, input_ids.device)
        if position_ids is not None and tuple(position_ids.shape) not in ((batch, seq), (1, seq)):
            raise ShapeError(f"{self._name()}: position_ids has shape {position_ids.shape}, expected {(batch, seq)}")
        if position_ids is not None:
            check_positions(self._name(), position_ids, self.positions_bound)
        step = Step(0, seq, key_mask, input_ids.device, bidirectional=self.bidirectional)
        states = self._hidden(input_ids, step, None, position_ids)
        return states if hidden else self._logits(states)

    def hidden_states(
        self,
        input_ids: packrt.Tensor,
        attention_mask: packrt.Tensor | None = None,
        position_ids: packrt.Tensor | None = None,
    ) -> packrt.Tensor:
        """(batch, seq, hidden) final hidden states, after the last norm and before the LM head: what
        transformers' base model (``Qwen3Model``) returns as ``last_hidden_state``, and what a sentence
        embedding pools. One call of the model (its hooks, its mapped files' check, one version of the
        weights), with the call's arguments and checks."""
        states: packrt.Tensor = self(input_ids, attention_mask, position_ids, hidden=True)
        return states

    def _device(self) -> packrt.Device:
        """Where the model computes: its parameters' device (the CPU for a model without any)."""
        return model_device(self)

    def _defaults(self) -> GenerationDefaults:
        found = self.generation_defaults
        return found if found is not None else GenerationDefaults(pad_token_id=self.pad_token_id)

    def _check_prompt(
        self, input_ids: packrt.Tensor, max_new_tokens: int | None, defaults: GenerationDefaults
    ) -> tuple[int, int, int]:
        """(batch, prompt length, new tokens) of a prompt that leaves room for the new tokens
        (``max_new_tokens``, or the model's default when None)."""
        batch, prompt = check_ids(self._name(), input_ids, None)
        if prompt == 0:
            raise ShapeError(f"{self._name()}.generate needs a prompt of at least one token")
        if max_new_tokens is None:
            max_new_tokens = defaults.new_tokens(prompt)
        # a rotary model's configured positions bound it too, as vLLM's max_model_len does: the token buffer and
        # the cache are sized to the whole run (generate(ids, 10**9) allocated gigabytes before its first step)
        limit = self.positions_bound
        if limit is not None and prompt + max_new_tokens > limit:
            raise ShapeError(
                f"{self._name()}.generate: {prompt} prompt tokens + {max_new_tokens} new ones exceed the model's "
                f"{limit} positions; shorten the prompt or ask for fewer tokens"
            )
        return batch, prompt, max_new_tokens

    def _check_generates(self, max_new_tokens: int | None) -> None:
        """The model has a next token to generate, and ``max_new_tokens`` is an int >= 0 or None."""
        if self.bidirectional:
            raise UnsupportedModelError(
                f"{self._name()} attends in both directions (use_bidirectional_attention: an embedding model), so "
                "it has no next token to generate; take its hidden_states, or load its sentence-transformers "
                "directory with SentenceEncoder"
            )
        if max_new_tokens is not None and (not is_int(max_new_tokens) or max_new_tokens < 0):
            error = GenerationArgumentError if is_int(max_new_tokens) else GenerationArgumentTypeError
            raise error(f"generate: max_new_tokens must be an int >= 0 or None, got {max_new_tokens!r}")

    def check_sequence(
        self,
        prompt: np.ndarray,
        max_new_tokens: int | None,
        eos_token_id: int | Sequence[int] | Literal[FromModel.FROM_MODEL] | None = FROM_MODEL,
    ) -> tuple[int, tuple[int, ...]]:
        """``generate``'s checks of one sequence that a decoder of its own runs
        (:class:`~packrt.models.batch_decode.BatchDecoder`): the model generates, ``prompt`` (1-D int64 ids) is
        inside the vocabulary and leaves room for the new tokens; (new tokens, eos ids) as ``generate`` resolves
        them. Such a decoder never computes its cached keys again, so a sequence that would cross the length
        where the model's rotary frequencies change (LongRoPE) is refused."""
        self._check_generates(max_new_tokens)
        defaults = self._defaults()
        _, length, new = self._check_prompt(packrt.from_numpy(prompt[None]), max_new_tokens, defaults)
        check_token_range(f"{self._name()}.generate", prompt, self.vocab)
        switch = self._rope_switch()
        if switch is not None and length + new > switch:
            raise GenerationArgumentError(
                f"{self._name()}: {length} prompt tokens + {new} new ones cross the {switch} positions where its "
                "rotary frequencies change, which only generate and stream follow; ask for fewer tokens or run "
                "this sequence with generate or stream"
            )
        return new, eos_ids(defaults.eos_token_ids if eos_token_id is FROM_MODEL else eos_token_id, self.vocab)

    def step_scores(
        self, ids: packrt.Tensor, step: Step, cache: KVCache, positions: packrt.Tensor | None
    ) -> np.ndarray:
        """One step of a generation: ``ids`` (batch, step.length) through the model over ``cache``, and the
        scores (batch, vocab) of each row's last position, on the host. The step is one call: one version of the
        weights, the mapped files checked first (a load lands between two steps, never inside one)."""
        with reading():
            for mapped in mapped_files(self):
                mapped.check()
            hidden = self._hidden(ids, step, cache, positions)
            scores: np.ndarray = host(self._logits(hidden[:, -1:]))[:, -1]
        return scores

    def _prepare(
        self,
        input_ids: packrt.Tensor,
        max_new_tokens: int | None = None,
        *,
        attention_mask: packrt.Tensor | None = None,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        eos_token_id: int | Sequence[int] | Literal[FromModel.FROM_MODEL] | None = FROM_MODEL,
        seed: int | None = None,
        pad_token_id: int | Literal[FromModel.FROM_MODEL] | None = FROM_MODEL,
    ) -> _Run:
        """Every check of ``generate``'s arguments (its parameters are these), and the buffers its steps fill."""
        self._check_generates(max_new_tokens)
        check_sampling(do_sample, temperature, top_k, top_p, seed)
        sampling = Sampling(do_sample, temperature, top_k, top_p, seed)
        defaults = self._defaults()
        eos = eos_ids(defaults.eos_token_ids if eos_token_id is FROM_MODEL else eos_token_id, self.vocab)
        pad = defaults.pad_token_id if pad_token_id is FROM_MODEL else pad_token_id
        if pad is not None and not is_token(pad, self.vocab):
            raise GenerationArgumentError(
                f"generate: pad_token_id must be a token id in [0, {self.vocab}), got {pad!r}; it is "
                "written into the rows that have ended"
            )
        batch, prompt, max_new_tokens = self._check_prompt(input_ids, max_new_tokens, defaults)
        total = prompt + max_new_tokens
        device = self._device()
        tokens = np.empty((batch, total), dtype=np.int64)  # on the host: each step appends one column
        tokens[:, :prompt] = prompt_ids = host(input_ids)
        check_token_range(f"{self._name()}.generate", prompt_ids, self.vocab)
        cache = KVCache(self.num_layers, batch, total, device)
        positions = None if attention_mask is None else _padded_positions(cache, attention_mask, prompt)
        filler = pad if pad is not None else eos[0] if eos else 0
        return _Run(tokens, prompt, max_new_tokens, device, cache, positions, eos, filler, sampling)

    @_prepared_by(_prepare)
    def generate(self, run: _Run) -> packrt.Tensor:
        """``input_ids`` (batch, prompt) followed by up to ``max_new_tokens`` new tokens each, int64.

        Greedy by default; ``do_sample=True`` samples with ``temperature``, ``top_k`` and ``top_p``
        from a numpy generator seeded with ``seed`` (the same seed gives the same tokens). A row
        that produced an ``eos_token_id`` is continued with ``pad_token_id`` (else the first eos id)
        and generation stops early once every row has, as transformers does.

        Not given, ``max_new_tokens``, ``eos_token_id`` and ``pad_token_id`` come from the model's
        ``generation_config.json`` (read by ``from_pretrained``; config.json's ids without it), and the
        length defaults to 20 new tokens, as transformers' do (see
        :mod:`packrt.models.generation_defaults`). A value given wins, ``None`` included:
        ``eos_token_id=None`` stops at no token.

        Runs on the model's device (its parameters'): the ids each step feeds are placed there, the
        scores come back to the host with ``.cpu()`` to choose the next token, and the result is a
        tensor on that device, as transformers' ``generate`` returns it. Ids are checked first:
        integer prompt ids, prompt, eos and pad ids inside ``[0, vocab)``.
        """
        end = run.prompt
        with reading():  # one version of the weights for the whole generation: a load lands before or after
            for _ in self._decode(run):
                end += 1
        return placed(run.tokens[:, :end].copy(), run.device)

    @_prepared_by(_prepare)
    def stream(self, run: _Run) -> Iterator[np.ndarray]:
        """:meth:`generate`'s new tokens one step at a time: each item is the (batch,) int64 array of the
        tokens chosen at that step, the same tokens ``generate`` returns for the same arguments.

        The arguments are checked when ``stream`` is called (the same errors as ``generate``); the work
        of each step is done when the next item is asked for, so a caller that stops iterating (a
        deadline, a stop string, a client gone) stops the computation there. Each step reads one version
        of the weights (a load lands between two steps, never inside one) and first checks the mapped files
        the model serves from, as a call of the model does.
        """
        return self._decode(run)

    def _decode(self, run: _Run) -> Iterator[np.ndarray]:
        """The steps of a prepared run: the prompt once, then one token per step, each yielded as chosen."""
        tokens, prompt, device, cache, positions, eos = (
            run.tokens,
            run.prompt,
            run.device,
            run.cache,
            run.positions,
            run.eos,
        )
        key_mask = cache.key_mask if cache.padded else None
        do_sample, temperature, top_k, top_p, seed = run.sampling
        rng = np.random.default_rng(seed)
        finished = np.zeros(tokens.shape[0], dtype=bool)
        ids = placed(tokens[:, :prompt], device)
        start, length = 0, prompt
        switch = self._rope_switch()
        for t in range(run.max_new_tokens):
            if switch is not None and 0 < start <= switch < start + length:
                # the keys cached under the short frequencies are computed again under the long ones, in one
                # step over the whole sequence so far (transformers' Phi-3 does the same at this step)
                start, length = 0, start + length
                ids = placed(tokens[:, :length], device)
            step_mask = None if key_mask is None else key_mask[:, : start + length]
            step_positions = None if positions is None else positions[:, start : start + length]
            scores = self.step_scores(ids, Step(start, length, step_mask, device), cache, step_positions)
            chosen = sample_next(scores, rng, temperature, top_k, top_p) if do_sample else scores.argmax(axis=-1)
            if eos:
                chosen = np.where(finished, run.filler, chosen)
                finished |= np.isin(chosen, eos)
            tokens[:, prompt + t] = chosen
            yield tokens[:, prompt + t].copy()
            if eos and finished.all():
                return
            start, length = prompt + t, 1
            ids = placed(tokens[:, start : start + 1], device)


__all__ = [
    "FROM_MODEL",
    "CausalLM",
    "FromModel",
    "GenerationArgumentError",
    "GenerationArgumentTypeError",
    "check_positions",
    "check_token_range",
    "sample_next",
]
