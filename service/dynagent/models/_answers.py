"""Reading an OpenAI-compatible answer strictly: anything malformed is a ``ModelError``.

Answers arrive as parsed JSON (``openai.py`` skips the client's model objects), so a 200
whose choice has no ``message``, a ``content`` that is a number, or a stream that holds no
chunk at all would otherwise become a 500 or a successful empty answer. Every such answer
is refused here as a model failure (502 ``model_error``), which the circuit breaker, the
metrics, the trace and the canary guard all count.
"""

from __future__ import annotations

from typing import Any

from dynagent.events import Usage
from dynagent.exceptions import ModelError
from dynagent.models.base import ModelResponse, ToolCallRequest


def malformed(what: str) -> ModelError:
    return ModelError(f"malformed answer from the model endpoint: {what}")


def usage_of(usage: Any) -> Usage:
    if not usage:
        return Usage()
    if not isinstance(usage, dict):
        raise malformed("usage is not an object")
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    if not (isinstance(prompt, int) and isinstance(completion, int)):
        raise malformed("usage token counts are not integers")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not isinstance(cached, int) or isinstance(cached, bool):
        cached = 0  # an endpoint without a prompt cache may send null or nothing
    return Usage(prompt, completion, min(max(cached, 0), prompt))


def _text(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise malformed(f"{where} is {type(value).__name__}, not text")


def _call(call: Any) -> ToolCallRequest | None:
    if not isinstance(call, dict):
        raise malformed("a tool call is not an object")
    if call.get("type", "function") != "function":
        return None  # a kind of tool call this service does not make
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    name = _text(function.get("name"), "a tool call's name")
    if not name:
        raise malformed("a tool call without a function name")
    call_id = _text(call.get("id"), "a tool call's id") or ""
    arguments = _text(function.get("arguments"), "a tool call's arguments")
    return ToolCallRequest(call_id, name, arguments or "{}")


def from_completion(completion: Any, model: str) -> ModelResponse:
    """The response in a (non-streamed) ``chat.completion`` body, as parsed JSON."""
    if not isinstance(completion, dict):
        raise malformed("not a chat completion")
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ModelError("the model endpoint answered without choices")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise malformed("its first choice has no message")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise malformed("tool_calls is not a list")
    found = tuple(c for c in map(_call, calls) if c is not None)
    content = _text(message.get("content"), "the message content")
    served = _text(completion.get("model"), "the model name")
    return ModelResponse(content, found, usage_of(completion.get("usage")), served or model)


def chunk_delta(chunk: Any) -> dict[str, Any] | None:
    """The first choice's delta of a streamed chunk (None for a usage-only chunk)."""
    if not isinstance(chunk, dict):
        raise malformed("a streamed item is not a chat completion chunk")
    choices = chunk.get("choices")
    if choices is None:
        if "usage" in chunk:
            return None
        raise malformed("a streamed chunk without choices")
    if not isinstance(choices, list):
        raise malformed("a streamed chunk's choices are not a list")
    if not choices:
        return None
    choice = choices[0]
    delta = choice.get("delta") if isinstance(choice, dict) else None
    if delta is None and isinstance(choice, dict):
        delta = {}
    if not isinstance(delta, dict):
        raise malformed("a streamed choice without a delta")
    _text(delta.get("content"), "a streamed content delta")
    return delta
