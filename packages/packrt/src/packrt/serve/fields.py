"""The fields of OpenAI's completion and chat requests that ``packrt serve`` does not serve, refused by name.

A field a client sends is either honoured or refused: answering 200 while ignoring it would hand back
something other than what was asked (JSON that is not JSON, a tool call that never comes, a penalty
that was never applied). Each refusal is a 400 whose OpenAI error object names the field in ``param``
(``code`` ``unsupported_parameter`` for a field this server never serves, ``unsupported_value`` for a
value of a field it serves otherwise) and says what to send instead. A field's "nothing asked" value
(``null``, ``best_of`` equal to ``n``, ``{"type": "text"}``, ``tool_choice: "none"``...) is served,
since clients send those by default.
"""

from __future__ import annotations

from packrt.serve.openai_shapes import ChatRequest, CompletionRequest, ServeError

UNSUPPORTED = "unsupported_parameter"
UNSUPPORTED_VALUE = "unsupported_value"


def _refuse(param: str, message: str, code: str = UNSUPPORTED) -> ServeError:
    return ServeError(400, message, param=param, code=code)


def check_fields(request: CompletionRequest | ChatRequest) -> None:
    """A 400 naming the first field of ``request`` whose value this server does not serve; nothing when every
    field is served."""
    if request.stream_options is not None and not request.stream:
        raise _refuse(
            "stream_options",
            "stream_options is only read with stream: true; send stream: true, or leave stream_options out",
            UNSUPPORTED_VALUE,
        )
    if isinstance(request, ChatRequest):
        _check_chat(request)
    else:
        _check_completion(request)


def _check_completion(request: CompletionRequest) -> None:
    if request.best_of is not None and request.best_of != request.n:
        raise _refuse(
            "best_of",
            f"best_of is {request.best_of} with n {request.n}; this server makes exactly n candidates per prompt "
            "and returns them all (it does not rank extra ones by likelihood): send best_of equal to n, or leave "
            "it out",
            UNSUPPORTED_VALUE,
        )
    if request.suffix:
        raise _refuse(
            "suffix",
            "suffix (text after the insertion) is not served: this server continues a prompt, it does not fill in "
            "the middle; leave suffix out and put the text in prompt",
        )
    if request.logprobs is not None and request.stream:
        raise _refuse(
            "logprobs",
            "logprobs is not served with stream: true; send stream: false to get them, or leave logprobs out",
            UNSUPPORTED_VALUE,
        )


def _check_chat(request: ChatRequest) -> None:
    if request.tools:
        raise _refuse(
            "tools",
            "tools (function calling) are not served: this server answers with text only and never makes a tool "
            "call; leave tools out, or describe the tools in a message and parse the answer yourself",
        )
    if request.functions:
        raise _refuse(
            "functions",
            "functions (function calling) are not served: this server answers with text only; leave functions out",
        )
    for name in ("tool_choice", "function_call"):
        value = getattr(request, name)
        if value not in (None, "none"):
            raise _refuse(
                name,
                f'{name} is {value!r}; this server makes no tool calls: leave {name} out or send "none"',
                UNSUPPORTED_VALUE,
            )
    kind = request.response_format.get("type") if request.response_format is not None else "text"
    if kind != "text":
        raise _refuse(
            "response_format",
            f"response_format {kind!r} is not served: this server does not constrain the text to JSON or a schema; "
            'send {"type": "text"} or leave response_format out, and ask for JSON in the messages',
            UNSUPPORTED_VALUE,
        )
    if request.top_logprobs is not None and not request.logprobs:
        raise _refuse(
            "top_logprobs",
            "top_logprobs needs logprobs: true; send logprobs: true with it, or leave top_logprobs out",
            UNSUPPORTED_VALUE,
        )
    if request.logprobs and request.stream:
        raise _refuse(
            "logprobs",
            "logprobs is not served with stream: true; send stream: false to get them, or leave logprobs out",
            UNSUPPORTED_VALUE,
        )


__all__ = ["UNSUPPORTED", "UNSUPPORTED_VALUE", "check_fields"]
