"""What one request may ask of ``packrt serve``, and the checks made on its raw body before parsing.

Every bound is a field of :class:`ServeLimits` with its default documented there; ``packrt serve``
takes each as a command-line option. A request beyond a bound is refused before it costs the model
anything, with a status a client can act on:

- body larger than ``max_body_bytes``: 413; JSON nested deeper than ``max_json_depth``: 400 (found by
  :func:`packrt_io.json_depth`'s scan of the raw bytes, before the parser could recurse into it);
- more than ``max_texts_per_request`` inputs: 400; a text longer than ``max_tokens_per_text`` tokens:
  400 when the request says ``truncate: false``, cut to the bound when it says ``true`` (the default);
- ``max_queued_requests`` already waiting or running: 429 with ``Retry-After`` (each choice of a completion,
  ``n`` per prompt, takes a place; a request with more choices than the bound is a 400 naming ``n``);
- a request not finished within ``request_timeout_s``: 504, and its remaining work is dropped (between
  model calls for embeddings, between decode steps for generation).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from packrt.errors import PackrtError


class LimitsError(PackrtError, ValueError):
    """A :class:`ServeLimits` field that is not a positive number."""


@dataclass(frozen=True)
class ServeLimits:
    """The bounds ``packrt serve`` puts on each request (defaults sized for one CPU machine); each field's
    ``metadata["help"]`` says what it bounds (``packrt serve --help`` prints it)."""

    max_texts_per_request: int = field(
        default=256,
        metadata={
            "help": "Inputs in one embeddings request, prompts in one completions request (OpenAI's own bound is "
            "2048; a CPU replica serves fewer)."
        },
    )
    max_tokens_per_text: int = field(
        default=512, metadata={"help": "Tokens of one input text or prompt (also capped by the model's positions)."}
    )
    max_body_bytes: int = field(
        default=4 * 1024 * 1024,
        metadata={"help": "Bytes of one request body (413 beyond; 4 MiB holds 256 texts of ~16 KB each)."},
    )
    max_json_depth: int = field(
        default=32, metadata={"help": "Nesting of the request's JSON (the API's shapes need 4)."}
    )
    max_queued_requests: int = field(
        default=64, metadata={"help": "Requests waiting or running at once; more get 429 with a Retry-After header."}
    )
    request_timeout_s: float = field(
        default=60.0,
        metadata={
            "help": "Seconds a request may take, queueing included; past it the work stops and the answer is 504."
        },
    )
    max_batch_tokens: int = field(
        default=8192,
        metadata={"help": "Tokens (rows x longest row) in one embedding model call: the dynamic batch's budget."},
    )
    batch_wait_s: float = field(
        default=0.005,
        metadata={"help": "How long the embedding worker waits for more requests to join a batch that has room."},
    )
    max_batch_sequences: int = field(
        default=16,
        metadata={"help": "Completions decoded together in one step; more wait in the queue for a place."},
    )
    max_new_tokens: int = field(
        default=512, metadata={"help": "Most tokens one completion may ask for (its max_tokens field)."}
    )
    retry_after_s: int = field(
        default=1, metadata={"help": "Seconds the Retry-After header of a 429 asks a client to wait."}
    )

    def __post_init__(self) -> None:
        for each in fields(self):
            value = getattr(self, each.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise LimitsError(f"ServeLimits.{each.name} must be a positive number, got {value!r}")


__all__ = ["LimitsError", "ServeLimits"]
