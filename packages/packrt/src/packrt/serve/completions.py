"""Completions for ``/v1/completions`` and ``/v1/chat/completions``: prompt, decode loop, stop strings.

A chat request is rendered by the model's own chat template (``chat_template`` of
tokenizer_config.json, a Jinja template run in a sandbox, with ``add_generation_prompt``); a model
without one answers 400 saying so. Its tokens come from the server's generation worker
(:mod:`packrt.serve.decoding`), which decodes every request in flight together, one step at a time;
a :class:`Completion` turns one request's tokens into its text as they come.

Text is produced by decoding every token so far and handing on what was not handed on yet; a tail
that could be the start of a stop string, or that ends inside a multi-byte character (U+FFFD), is held
back until the next token settles it, so no stop string and no broken character ever leaves the server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from packrt.models import CausalLM, LogitBias, Penalties
from packrt.models.logits_processing import chained
from packrt.models.sampling import GenerationArgumentError, GenerationArgumentTypeError
from packrt.serve import logprobs
from packrt.serve.limits import ServeLimits
from packrt.serve.openai_shapes import ChatRequest, CompletionRequest, ServeError
from packrt.serve.served import ServedModel


class RequestTimeoutError(Exception):
    """The request's deadline passed between decode steps."""


@dataclass
class Prompt:
    """A checked prompt: its ids, how many new tokens, the sampling the request asked for, and what the answer
    holds besides the new text: the prompt's ``text`` first (``echo``), the log probabilities of its tokens
    and of the ``logprobs`` likeliest at each place (None: not asked)."""

    ids: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stops: tuple[str, ...]
    text: str = ""
    echo: bool = False
    logprobs: int | None = None
    # each prompt token's (start, end) characters in ``text``, for a prompt given as text (None: given as ids)
    offsets: list[tuple[int, int]] | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: LogitBias | None = None


@dataclass
class Outcome:
    """How a decode ended (``finish``: stop, length or cancelled), its tokens (``count``, an eos included),
    the ``ids`` whose text the answer holds (no eos) and whether a stop string cut that ``text``."""

    finish: str
    count: int
    ids: list[int]
    text: str
    stopped: bool


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    found = (stop,) if isinstance(stop, str) else tuple(stop)
    if len(found) > 4 or not all(isinstance(s, str) and s for s in found):
        raise ServeError(400, "stop must be a non-empty string or a list of up to 4 of them", param="stop")
    return found


def _message(message: dict[str, Any]) -> dict[str, Any]:
    """A message whose ``content`` is a list of parts (``[{"type": "text", "text": ...}]``) with its text
    parts joined, as chat templates expect a string; a part of another type is a 400."""
    content = message.get("content")
    if isinstance(content, list):
        for part in content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ServeError(
                    400,
                    f"content part {part.get('type')!r} is not served: text parts only",
                    "invalid_request_error",
                    "messages",
                )
        message["content"] = "".join(part["text"] for part in content)
    return message


def render_chat(served: ServedModel, request: ChatRequest) -> str:
    """The chat's prompt text by the model's template; 400 when the model has none or it fails on these messages."""
    if served.chat_template is None:
        raise ServeError(
            400,
            f"model {served.name!r} has no chat template (no chat_template.jinja, no chat_template in its "
            "tokenizer_config.json, no tokenizer.chat_template in its GGUF file); use "
            "/v1/completions with a prompt you format yourself, or serve a chat model",
            param="messages",
            code="no_chat_template",
        )
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = raise_exception
    messages = [_message(message.model_dump(exclude_none=True)) for message in request.messages]
    try:
        template = environment.from_string(served.chat_template)
        return template.render(messages=messages, add_generation_prompt=True, **(served.special_tokens or {}))
    except TemplateError as err:
        raise ServeError(400, f"the model's chat template refused these messages: {err}", param="messages") from err


def check_prompt(
    served: ServedModel,
    limits: ServeLimits,
    prompt: str | list[int],
    max_tokens: int | None,
    request: CompletionRequest | ChatRequest,
    chat: bool,
    param: str | None = None,
) -> Prompt:
    """The prompt's ids (a text tokenized; token ids as given, each inside the vocabulary) and the request's
    sampling, each bound checked (400 naming the field; ``param`` names the prompt, default ``prompt`` or
    ``messages``)."""
    param = param or ("messages" if chat else "prompt")
    offsets = None
    if isinstance(prompt, list):
        ids, text = _token_ids(served, prompt, param), served.tokenizer.decode(prompt)
    else:
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ServeError(
                400, f"{param} holds a character that is not valid Unicode text ({err.reason})", param=param
            ) from err
        encoding = served.tokenizer.encode(prompt, add_special_tokens=not chat)
        ids, text, offsets = encoding.ids, prompt, encoding.offsets
    if not ids:
        raise ServeError(400, f"{param} is empty after tokenization; give at least one token", param=param)
    bound = min(limits.max_tokens_per_text, served.max_positions - 1)
    if len(ids) > bound:
        raise ServeError(
            400,
            f"{param} has {len(ids)} tokens, more than the {bound} this server takes; shorten it",
            param=param,
            code="context_length_exceeded",
        )
    if max_tokens is None:
        max_tokens = 16 if not chat else limits.max_new_tokens
    if max_tokens > limits.max_new_tokens:
        raise ServeError(
            400,
            f"max_tokens is {max_tokens}, more than this server's bound of {limits.max_new_tokens}",
            param="max_tokens",
        )
    room = served.max_positions - len(ids)
    checked = Prompt(ids, min(max_tokens, room), request.temperature, request.top_p, request.seed, _stops(request.stop))
    checked.text, checked.offsets = text, offsets
    checked.presence_penalty = request.presence_penalty or 0.0
    checked.frequency_penalty = request.frequency_penalty or 0.0
    if request.logit_bias:
        try:
            checked.logit_bias = LogitBias.of(request.logit_bias, _vocab(served))
        except (GenerationArgumentError, GenerationArgumentTypeError) as err:
            raise ServeError(400, str(err), param="logit_bias") from err
    if isinstance(request, CompletionRequest):
        checked.echo, checked.logprobs = request.echo, request.logprobs
    elif request.logprobs:
        checked.logprobs = request.top_logprobs or 0
    return checked


def _vocab(served: ServedModel) -> int:
    """How many token ids the served model scores."""
    return int(served.module.vocab) if isinstance(served.module, CausalLM) else served.tokenizer.get_vocab_size()


def _token_ids(served: ServedModel, ids: list[int], param: str) -> list[int]:
    """A prompt given as token ids, each checked to be one of the model's (400 naming ``param``)."""
    vocab = _vocab(served)
    for index, token in enumerate(ids):
        if not 0 <= token < vocab:
            raise ServeError(
                400,
                f"{param}[{index}] is token id {token}, outside this model's vocabulary [0, {vocab}); token ids "
                "come from the served model's tokenizer (POST /tokenize gives them)",
                param=param,
                code="invalid_token_id",
            )
    return list(ids)


class Decoder:
    """The text of the tokens so far, handed on in pieces that never split a stop string or a character."""

    def __init__(self, served: ServedModel, stops: tuple[str, ...]) -> None:
        self.served, self.stops = served, stops
        self.ids: list[int] = []
        self.sent = 0  # characters of the decoded text already handed on
        self.text = ""
        self.stopped = False

    def push(self, token: int) -> str:
        """Add ``token``; the new text that is safe to hand on ('' when it must wait)."""
        self.ids.append(token)
        self.text = self.served.tokenizer.decode(self.ids)
        for stop in self.stops:
            at = self.text.find(stop, max(self.sent - len(stop), 0))
            if at >= 0:
                self.stopped = True
                self.text = self.text[:at]
                return self.flush()
        hold = max((len(s) - 1 for s in self.stops), default=0)
        end = len(self.text) - hold
        while end > self.sent and self.text[end - 1] == "\ufffd":
            end -= 1
        if end <= self.sent:
            return ""
        piece, self.sent = self.text[self.sent : end], end
        return piece

    def flush(self) -> str:
        piece, self.sent = self.text[self.sent :], len(self.text)
        return piece


class Completion:
    """One request's decode as the generation worker drives it (:mod:`packrt.serve.decoding`): each token the
    model chose goes in through :meth:`push`, its safe text goes out through ``emit`` as it settles, and
    :meth:`outcome` says how it ended. An eos token ends it (``stop``, counted, no text), as does a stop string
    (``stop``, the text cut before it); the model's length ends it with ``length``."""

    def __init__(self, served: ServedModel, prompt: Prompt, emit: Callable[[str], None]) -> None:
        lm = served.module
        assert isinstance(lm, CausalLM)
        self.prompt, self.emit = prompt, emit
        self.decoder = Decoder(served, prompt.stops)
        self.count = 0

    def add_options(self) -> dict[str, Any]:
        """The prompt's sampling, penalties and logit bias as :meth:`~packrt.models.BatchDecoder.add`'s keywords:
        greedy at temperature 0, else a draw seeded with ``seed``; the eos ids are the model's own."""
        prompt = self.prompt
        sample = prompt.temperature > 0
        options: dict[str, Any] = {"max_new_tokens": prompt.max_new_tokens, "do_sample": sample}
        if sample:
            options |= {"temperature": prompt.temperature, "seed": prompt.seed}
            options["top_p"] = prompt.top_p if prompt.top_p < 1 else None
        penalties = Penalties(presence=prompt.presence_penalty, frequency=prompt.frequency_penalty)
        processors = [p for p in (penalties, prompt.logit_bias) if p]
        if processors:
            options["logits_processor"] = chained(*processors)
        return options

    def push(self, token: int | None, finish: str | None) -> str | None:
        """The model's next ``token`` (None: none was asked for) and whether the decoder ended the sequence there
        (``finish``: "stop" for an eos token, "length"); how the completion ends here, or None to go on."""
        if token is None:
            return finish
        self.count += 1
        if finish == "stop":  # an eos token: counted, never shown
            return finish
        piece = self.decoder.push(token)
        if piece:
            self.emit(piece)
        return "stop" if self.decoder.stopped else finish

    def outcome(self, finish: str) -> Outcome:
        """How it ended; the text held back for a possible stop string is handed on first (not when cancelled:
        nobody is listening)."""
        if finish != "cancelled":
            rest = self.decoder.flush()
            if rest:
                self.emit(rest)
        decoder = self.decoder
        return Outcome(finish, self.count, decoder.ids, decoder.text, decoder.stopped)


def answer_logprobs(served: ServedModel, prompt: Prompt, outcome: Outcome, chat: bool) -> dict[str, Any] | None:
    """The choice's ``logprobs`` object (None when the request did not ask): the answer's tokens, and with
    ``echo`` the prompt's before them (the first of which nothing predicts), scored by one model call
    (:mod:`packrt.serve.logprobs`). A stop string's tokens are left out, as its text is."""
    if prompt.logprobs is None or outcome.finish == "cancelled":  # nobody is waiting for the scores
        return None
    lm = served.module
    assert isinstance(lm, CausalLM)

    def decode(ids: list[int]) -> str:
        return str(served.tokenizer.decode(ids))

    ids = prompt.ids + outcome.ids
    texts, offsets = logprobs.pieces(decode, outcome.ids)
    if outcome.stopped:  # the tokens from the one the stop string starts in are not in the text
        kept = sum(1 for offset in offsets if offset < len(outcome.text))
        texts, offsets, ids = texts[:kept], offsets[:kept], ids[: len(prompt.ids) + kept]
    first = 1 if prompt.echo else len(prompt.ids)
    scored: list[logprobs.Scored | None] = list(logprobs.score(lm, ids, first, prompt.logprobs))
    # each answer token's text is decoded after the answer's tokens before it, as the answer's text is
    contexts = [outcome.ids[:at] for at in range(len(texts))]
    if chat:
        return logprobs.chat_logprobs(decode, contexts, [s for s in scored if s is not None], texts)
    if prompt.echo:
        prompt_texts, prompt_offsets = _prompt_pieces(decode, prompt)
        scored = [None, *scored]
        contexts = [prompt.ids[:at] for at in range(len(prompt.ids))] + contexts
        texts, offsets = prompt_texts + texts, prompt_offsets + [len(prompt.text) + at for at in offsets]
    return logprobs.completion_logprobs(decode, contexts, scored, texts, offsets)


def _prompt_pieces(decode: logprobs.Decode, prompt: Prompt) -> tuple[list[str], list[int]]:
    """The prompt's tokens' texts and offsets in the echoed ``prompt.text``: a text's by the tokenizer's offsets
    (a special token the tokenizer added is ''), token ids' by decoding them."""
    if prompt.offsets is None:
        return logprobs.pieces(decode, prompt.ids)
    return [prompt.text[start:end] for start, end in prompt.offsets], [start for start, _ in prompt.offsets]


def chat_text(served: ServedModel, request: ChatRequest) -> tuple[str, int | None]:
    return render_chat(served, request), (
        request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    )


def completion_prompts(request: CompletionRequest, limits: ServeLimits) -> list[str | list[int]]:
    """The request's prompts: one text or one list of token ids is one prompt; a list of texts or of token-id
    lists is that many (at most ``max_texts_per_request``; an empty list is a 400 naming ``prompt``)."""
    prompt: Any = request.prompt
    if isinstance(prompt, str):
        return [prompt]
    if prompt and all(isinstance(token, int) for token in prompt):
        return [list(prompt)]
    if not prompt:
        raise ServeError(400, "prompt is an empty list; give a prompt, or a list of prompts", param="prompt")
    if len(prompt) > limits.max_texts_per_request:
        raise ServeError(
            400,
            f"prompt holds {len(prompt)} prompts, more than this server's {limits.max_texts_per_request} per "
            "request; send them in several requests",
            param="prompt",
        )
    return [list(each) if isinstance(each, list) else str(each) for each in prompt]


__all__ = [
    "Decoder",
    "Outcome",
    "Prompt",
    "Completion",
    "RequestTimeoutError",
    "answer_logprobs",
    "chat_text",
    "check_prompt",
    "completion_prompts",
    "render_chat",
]
