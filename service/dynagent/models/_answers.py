"""Reading an OpenAI-compatible answer strictly: anything malformed is a ``ModelError``.

The ``openai`` client builds its response objects without validating them, so a 200
whose choice has no ``message``, a ``content`` that is a number, or a stream that holds
no chunk at all arrive as objects with missing or mistyped parts. Every such answer is
refused here as a model failure (502 ``model_error``), which the circuit breaker,
the metrics, the trace and the canary guard all count (issue 11), instead of becoming
a 500 or a successful empty answer.
"""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta

from ..events import Usage
from ..exceptions import ModelError
from .base import ModelResponse, ToolCallRequest


def malformed(what: str) -> ModelError:
    return ModelError(f"malformed answer from the model endpoint: {what}")


def usage_of(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    prompt = getattr(usage, "prompt_tokens", 0) or 0
    completion = getattr(usage, "completion_tokens", 0) or 0
    if not (isinstance(prompt, int) and isinstance(completion, int)):
        raise malformed("usage token counts are not integers")
    return Usage(prompt, completion)


def _text(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise malformed(f"{where} is {type(value).__name__}, not text")


def _call(call: Any) -> ToolCallRequest | None:
    if getattr(call, "type", "function") != "function":
        return None  # a kind of tool call this service does not make
    function = getattr(call, "function", None)
    name = _text(getattr(function, "name", None), "a tool call's name")
    if not name:
        raise malformed("a tool call without a function name")
    call_id = _text(getattr(call, "id", None), "a tool call's id") or ""
    arguments = _text(getattr(function, "arguments", None), "a tool call's arguments")
    return ToolCallRequest(call_id, name, arguments or "{}")


def from_completion(completion: Any, model: str) -> ModelResponse:
    """The response in a (non-streamed) chat completion."""
    if not isinstance(completion, ChatCompletion):
        raise malformed("not a chat completion")
    choices = getattr(completion, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise ModelError("the model endpoint answered without choices")
    choice = choices[0]
    message = getattr(choice, "message", None) if isinstance(choice, Choice) else None
    if not isinstance(message, ChatCompletionMessage):
        raise malformed("its first choice has no message")
    calls = getattr(message, "tool_calls", None) or []
    if not isinstance(calls, list):
        raise malformed("tool_calls is not a list")
    found = tuple(c for c in map(_call, calls) if c is not None)
    content = _text(getattr(message, "content", None), "the message content")
    served = _text(getattr(completion, "model", None), "the model name")
    return ModelResponse(
        content, found, usage_of(getattr(completion, "usage", None)), served or model
    )


def chunk_delta(chunk: Any) -> ChoiceDelta | None:
    """The first choice's delta of a streamed chunk (None for a usage-only chunk)."""
    if not isinstance(chunk, ChatCompletionChunk):
        raise malformed("a streamed item is not a chat completion chunk")
    choices = getattr(chunk, "choices", None)
    if not isinstance(choices, list):
        raise malformed("a streamed chunk without choices")
    if not choices:
        return None
    choice = choices[0]
    delta = getattr(choice, "delta", None) if isinstance(choice, ChunkChoice) else None
    if not isinstance(delta, ChoiceDelta):
        raise malformed("a streamed choice without a delta")
    _text(getattr(delta, "content", None), "a streamed content delta")
    return delta
