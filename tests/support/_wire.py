"""The OpenAI chat completions wire format, as the scripted model server writes it.

Bodies and chunks mirror what api.openai.com sends, so the real ``openai``
client parses them exactly as it would in production; ``protocol_problem``
refuses requests the real endpoint would answer with a 400.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

Body = dict[str, Any]
"""A parsed JSON request body, as the model endpoint received it."""

_ROLES = {"system", "developer", "user", "assistant", "tool"}


@dataclass(frozen=True, slots=True)
class WireCall:
    """A tool call as it goes on the wire; ``arguments`` is raw text (possibly invalid JSON)."""

    id: str
    name: str
    arguments: str

    def as_dict(self) -> Body:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class WireAnswer:
    """What one scripted step answers: text and/or tool calls, and token usage."""

    completion_id: str
    model: str
    content: str | None
    calls: tuple[WireCall, ...]
    prompt_tokens: int
    completion_tokens: int
    pieces: tuple[str, ...]
    """How the content is split into streamed deltas."""

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.calls else "stop"

    def usage(self) -> Body:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


def completion(answer: WireAnswer) -> Body:
    """A ``chat.completion`` object."""
    message: Body = {"role": "assistant", "content": answer.content, "refusal": None}
    if answer.calls:
        message["tool_calls"] = [call.as_dict() for call in answer.calls]
    return {
        "id": answer.completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": answer.model,
        "system_fingerprint": "fp_scripted",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": answer.finish_reason,
            }
        ],
        "usage": answer.usage(),
    }


def chunks(answer: WireAnswer, *, include_usage: bool) -> Iterator[Body]:
    """The ``chat.completion.chunk`` objects of a streamed answer, in order."""
    created = int(time.time())

    def chunk(delta: Body, finish_reason: str | None = None) -> Body:
        body: Body = {
            "id": answer.completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": answer.model,
            "system_fingerprint": "fp_scripted",
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if include_usage:
            body["usage"] = None
        return body

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for piece in answer.pieces:
        yield chunk({"content": piece})
    for index, call in enumerate(answer.calls):
        opening = {"name": call.name, "arguments": ""}
        yield chunk({"tool_calls": [_call_delta(index, opening, call_id=call.id)]})
        for piece in split_arguments(call.arguments):
            yield chunk({"tool_calls": [_call_delta(index, {"arguments": piece})]})
    yield chunk({}, answer.finish_reason)
    if include_usage:
        last = chunk({})
        last["choices"] = []
        last["usage"] = answer.usage()
        yield last


def _call_delta(index: int, function: Body, call_id: str | None = None) -> Body:
    delta: Body = {"index": index, "function": function}
    if call_id is not None:
        delta["id"] = call_id
        delta["type"] = "function"
    return delta


def sse(payload: Body | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def split_text(text: str) -> tuple[str, ...]:
    """Word-sized deltas that concatenate back to ``text``."""
    return tuple(re.findall(r"\s*\S+\s*|\s+", text)) if text else ()


def split_arguments(arguments: str, parts: int = 3) -> list[str]:
    """Argument text in a few pieces, as real endpoints stream it."""
    if not arguments:
        return []
    size = max(1, -(-len(arguments) // parts))
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def estimate_tokens(value: object) -> int:
    text = value if isinstance(value, str) else json.dumps(value)
    return max(1, len(text) // 4)


def error_body(message: str, kind: str, param: str | None = None) -> Body:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def protocol_problem(body: object) -> str | None:
    """Why the real endpoint would refuse this request body with a 400, or None."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "'model' must be a non-empty string"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    return _messages_problem(messages) or _tools_problem(body.get("tools"))


def _messages_problem(messages: Sequence[object]) -> str | None:
    pending: list[str] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            return f"messages[{index}] needs a role among {sorted(_ROLES)}"
        role = message["role"]
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                return (
                    f"messages[{index}]: a 'tool' message must answer a preceding "
                    f"'tool_calls' entry; {call_id!r} does not"
                )
            pending.remove(call_id)
            continue
        if pending:
            return (
                f"messages[{index}]: an assistant message with 'tool_calls' must be followed "
                f"by tool messages for each id; missing {pending}"
            )
        if role == "assistant" and message.get("tool_calls"):
            pending = [call["id"] for call in message["tool_calls"]]
        elif not isinstance(message.get("content"), str | list):
            return f"messages[{index}]: 'content' must be a string or an array of parts"
    if pending:
        return f"the conversation ends with unanswered tool calls {pending}"
    return None


def _tools_problem(tools: object) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "'tools' must be an array"
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return f"tools[{index}] must be {{'type': 'function', 'function': {{'name': …}}}}"
    return None
