"""The caller's messages checked as a conversation (``core/conversation.py``): what no
model endpoint takes is a 400 naming the message, before any model is called."""

from __future__ import annotations

from typing import Any

import pytest

from dynagent.core.conversation import check_conversation
from dynagent.exceptions import BadRequest

CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
ASKED = {"role": "assistant", "content": None, "tool_calls": [CALL]}
ANSWERED = {"role": "tool", "tool_call_id": "c1", "content": "found"}
USER = {"role": "user", "content": "hi"}

GOOD: dict[str, list[dict[str, Any]]] = {
    "one user message": [USER],
    "parts as content": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    "a tool round": [{"role": "system", "content": "s"}, USER, ASKED, ANSWERED],
    "two calls answered": [
        USER,
        {**ASKED, "tool_calls": [CALL, {**CALL, "id": "c2"}]},
        ANSWERED,
        {**ANSWERED, "tool_call_id": "c2"},
        {"role": "assistant", "content": "done"},
        USER,
    ],
}


@pytest.mark.parametrize("messages", GOOD.values(), ids=list(GOOD))
def test_conversations_an_endpoint_takes_pass(messages: list[dict[str, Any]]) -> None:
    check_conversation(messages, field="messages", continued=False)


BAD: dict[str, tuple[list[dict[str, Any]], str]] = {
    "a user message without content": (
        [{"role": "user", "content": None}],
        "messages[0]: a user message needs content",
    ),
    "an empty assistant message": (
        [USER, {"role": "assistant"}],
        "messages[1]: an assistant message needs content or tool_calls",
    ),
    "a tool call without an id": (
        [USER, {**ASKED, "tool_calls": [{"function": {"name": "f"}}]}],
        "messages[1]: each tool call needs an id and a function name",
    ),
    "a tool call that is not an object": (
        [USER, {**ASKED, "tool_calls": ["call"]}],
        "messages[1]: each tool call needs an id and a function name",
    ),
    "a tool result without its call's id": (
        [USER, ASKED, {"role": "tool", "content": "x"}],
        "messages[2]: a tool message needs the tool_call_id",
    ),
    "a tool result that answers nothing": (
        [USER, {"role": "tool", "tool_call_id": "c1", "content": "x"}],
        "messages[1]: tool_call_id 'c1' answers no tool call",
    ),
    "a tool result after another message": (
        [USER, ASKED, USER, ANSWERED],
        "messages[3]: tool_call_id 'c1' answers no tool call",
    ),
    "a tool result for another call": (
        [USER, ASKED, {**ANSWERED, "tool_call_id": "c9"}],
        "messages[2]: tool_call_id 'c9' answers no tool call",
    ),
    "a tool result without content": (
        [USER, ASKED, {**ANSWERED, "content": None}],
        "messages[2]: a tool message needs content",
    ),
}


@pytest.mark.parametrize(("messages", "message"), BAD.values(), ids=list(BAD))
def test_conversations_no_endpoint_takes_are_a_bad_request(
    messages: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(BadRequest, match=message.replace("[", r"\[").replace("]", r"\]")) as caught:
        check_conversation(messages, field="messages", continued=False)
    assert caught.value.param == "messages"


def test_a_continued_conversation_may_answer_a_call_kept_in_its_session() -> None:
    # The call that the result answers is in the session's turns, not in the request.
    check_conversation([ANSWERED], field="input", continued=True)
    with pytest.raises(BadRequest, match="needs the tool_call_id"):
        check_conversation([{"role": "tool", "content": "x"}], field="input", continued=True)


def test_items_that_are_not_the_messages_are_named_by_their_list() -> None:
    with pytest.raises(BadRequest, match=r"^input: tool_call_id 'c1'"):
        check_conversation([ANSWERED], field="input", continued=False, indexed=False)
