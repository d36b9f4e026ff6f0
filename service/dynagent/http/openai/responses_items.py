"""Responses API items ↔ the chat messages an agent run reads, and the response
object itself. Input: text, messages (``input_text`` / ``output_text`` parts),
``function_call`` and ``function_call_output`` items. Output: one ``message``
item with the answer text, then the client tool calls that ended the turn."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from dynagent.events import Usage
from dynagent.exceptions import BadRequest
from dynagent.http.openai.schemas import ResponsesRequest
from dynagent.models.base import Message

_ROLES = frozenset({"user", "assistant", "system", "developer"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def input_messages(input: str | Sequence[dict[str, Any]]) -> list[Message]:
    """Chat messages of a request's ``input``; ``BadRequest`` for items it cannot take."""
    if isinstance(input, str):
        return [{"role": "user", "content": input}]
    messages: list[Message] = []
    for index, item in enumerate(input):
        _add_item(messages, item, index)
    return messages


def _add_item(messages: list[Message], item: dict[str, Any], index: int) -> None:
    kind = item.get("type", "message")
    if kind == "message" and item.get("role") in _ROLES:
        messages.append({"role": item["role"], "content": _text(item.get("content"), index)})
    elif kind == "function_call":
        call = {
            "id": _string(item, "call_id", index),
            "type": "function",
            "function": {
                "name": _string(item, "name", index),
                "arguments": _string(item, "arguments", index),
            },
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and "tool_calls" in last:
            last["tool_calls"].append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        content = output if isinstance(output, str) else _text(output, index)
        messages.append(
            {"role": "tool", "tool_call_id": _string(item, "call_id", index), "content": content}
        )
    elif kind != "reasoning":  # reasoning items of other models carry nothing to answer
        raise BadRequest(
            f"input[{index}]: items of type {kind!r} are not supported; send messages, "
            "function_call and function_call_output items",
            param="input",
        )


def _string(item: dict[str, Any], key: str, index: int) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise BadRequest(f"input[{index}].{key} must be a string", param="input")
    return value


def _text(content: Any, index: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, dict) and p.get("type") in _TEXT_PARTS]
        if len(parts) == len(content) and all(isinstance(p.get("text"), str) for p in parts):
            return "".join(p["text"] for p in parts)
    raise BadRequest(
        f"input[{index}].content must be text or a list of input_text parts", param="input"
    )


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content if status == "completed" else [],
    }


def call_item(item_id: str, call: dict[str, str], status: str = "completed") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call["id"],
        "name": call["name"],
        "arguments": call["arguments"] if status == "completed" else "",
        "status": status,
    }


def output_items(
    response_id: str, text: str, calls: Sequence[dict[str, str]]
) -> list[dict[str, Any]]:
    items = [message_item(f"msg_{response_id}", text)] if text or not calls else []
    items.extend(call_item(f"fc_{response_id}_{i}", call) for i, call in enumerate(calls))
    return items


def assistant_message(text: str, calls: Sequence[dict[str, str]]) -> Message:
    """The answer as the chat message a continuation (``previous_response_id``) sends."""
    message: Message = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ]
    return message


def input_items(response_id: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The items a stored response was answered from, oldest first (``GET
    /v1/responses/{id}/input_items``): its conversation without the answer, each item
    with an id of its own, stable across reads."""
    items: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        item_id = f"{response_id}_{index}"
        role, content = message.get("role"), message.get("content")
        if role == "tool":
            output = content if isinstance(content, str) else ""
            call_id = message.get("tool_call_id", "")
            items.append(
                _done(
                    {"type": "function_call_output", "id": f"fco_{item_id}"},
                    call_id=call_id,
                    output=output,
                )
            )
            continue
        text = _stored_text(content)
        if role == "assistant":
            if text:
                items.append(message_item(f"msg_{item_id}", text))
            for number, call in enumerate(message.get("tool_calls") or ()):
                function = call.get("function", {})
                flat = {"id": call.get("id", ""), "name": function.get("name", "")}
                flat["arguments"] = function.get("arguments", "")
                items.append(call_item(f"fc_{item_id}_{number}", flat))
        elif role in _ROLES:
            part = {"type": "input_text", "text": text}
            items.append(
                _done({"type": "message", "id": f"msg_{item_id}", "role": role}, content=[part])
            )
    return items


def _done(item: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**item, **fields, "status": "completed"}


def _stored_text(content: Any) -> str:
    """A stored message's text: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def usage_body(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def response_body(
    response_id: str,
    body: ResponsesRequest,
    *,
    status: str,
    output: list[dict[str, Any]],
    usage: Usage | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": body.model,
        "output": output,
        "usage": usage_body(usage) if usage is not None else None,
        "error": error,
        "incomplete_details": None,
        "instructions": body.instructions,
        "metadata": body.metadata or {},
        "parallel_tool_calls": True,
        "previous_response_id": body.previous_response_id,
        "store": body.store,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "tool_choice": body.tool_choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or ()],
        "text": body.text.model_dump(by_alias=True, exclude_none=True)
        if body.text and body.text.format
        else {"format": {"type": "text"}},
        "user": body.user,
    }
