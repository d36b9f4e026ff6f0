"""A caller's chat messages checked as a conversation before any model sees them.

A model endpoint refuses a conversation whose shape is wrong (a message without content,
a tool result that answers no tool call), but its 400 reaches the caller as a failed
model call, a 502 that blames the endpoint for the caller's body. The same shapes are
refused here, with a 400 that says which message is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dynagent.exceptions import BadRequest


def check_conversation(
    messages: Sequence[Mapping[str, Any]], *, field: str, continued: bool, indexed: bool = True
) -> None:
    """Refuse (``BadRequest``) messages no model endpoint takes:

    - a system, developer, user or tool message without content, or an assistant message
      with neither content nor tool calls;
    - a tool call without an id or a function name;
    - a tool result without the id of the call it answers, or, unless the conversation
      goes on from turns kept in a session (``continued``: those are not in the list),
      one that answers no call of the assistant message right before it (tool results
      follow the message that asked for them, as the chat completions API requires).

    ``field`` names the list in the request's body (``messages``, ``input``); ``indexed``:
    its items are the messages, so the error names the wrong one's index (the Responses
    API's items are not: several make one message, and a continuation's come first)."""
    asked: set[str] = set()
    for index, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        where = f"{field}[{index}]" if indexed else field
        if role == "tool":
            _check_result(message, where, field, asked, continued=continued)
            continue
        asked = set()
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if content is None and not calls:
                raise BadRequest(
                    f"{where}: an assistant message needs content or tool_calls", param=field
                )
            asked = {_call_id(call, where, field) for call in calls}
        elif content is None:
            raise BadRequest(f"{where}: a {role} message needs content", param=field)


def _call_id(call: Any, where: str, field: str) -> str:
    function = call.get("function") if isinstance(call, Mapping) else None
    call_id = call.get("id") if isinstance(call, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise BadRequest(f"{where}: each tool call needs an id and a function name", param=field)
    return call_id


def _check_result(
    message: Mapping[str, Any], where: str, field: str, asked: set[str], *, continued: bool
) -> None:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise BadRequest(
            f"{where}: a tool message needs the tool_call_id of the call it answers", param=field
        )
    if message.get("content") is None:
        raise BadRequest(f"{where}: a tool message needs content", param=field)
    if not continued and call_id not in asked:
        raise BadRequest(
            f"{where}: tool_call_id {call_id!r} answers no tool call of the assistant "
            "message before it",
            param=field,
        )
