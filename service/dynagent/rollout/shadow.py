"""Shadow runs: a copy of a stable request run on the canary in the background.

The shadow agent is the canary with every tool that is not ``shadow_safe`` replaced by a
placeholder (the model sees that the call was not made), and with the session read but
never written: a shadow never sends an e-mail, refunds an order or changes a conversation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from dynagent.models.base import Message
from dynagent.runtime.agent import Agent
from dynagent.tools.base import Tool

PLACEHOLDER = (
    "SHADOW RUN: this tool was not executed (it is not shadow_safe); "
    "continue as if it had succeeded."
)


def shadow_agent(canary: Agent, history: Sequence[Message] = ()) -> Agent:
    """``canary`` for shadow traffic: unsafe tools stubbed; its session is ``history`` (the
    conversation before the copied turn), and nothing it says is kept."""
    tools = {name: _safe(tool) for name, tool in canary.tools.items()}
    return dataclasses.replace(canary, tools=tools, sessions=ReadOnlySessions(history))


def _safe(tool: Tool) -> Tool:
    if tool.shadow_safe:
        return tool

    async def placeholder(arguments: dict[str, Any]) -> str:
        return PLACEHOLDER

    return dataclasses.replace(tool, function=placeholder)


class ReadOnlySessions:
    """A session store seen by a shadow run: the conversation so far, and nothing kept."""

    def __init__(self, history: Sequence[Message]) -> None:
        self._history = [dict(m) for m in history]

    async def load(self, session_id: str) -> list[Message]:
        return [dict(m) for m in self._history]

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        return None

    async def delete(self, session_id: str) -> bool:
        return False

    def lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        return nullcontext()  # the real run holds the lock; a shadow only reads

    async def pin(self, key: str, value: str) -> str:
        return value

    async def aclose(self) -> None:
        return None
